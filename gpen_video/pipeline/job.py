"""One job through the stages: decode -> detect (workers) -> track (in order) -> restore (workers) -> encode.

Decoding, tracking and encoding are threads of the job's own; the device work goes to the
workers of a :class:`~.scheduler.WorkerPool`, which several jobs can share at once, so that one
job's start overlaps the previous one's end. Tracking needs the frames in order, so it runs in
one thread between the two device stages. A semaphore caps the job's frames in flight, which
keeps memory flat whatever the video's length; batches hold fewer frames the larger they are,
which bounds it in bytes whatever the frame size. The encoder writes frames strictly in order.
Any stage's error stops every stage of the job and reaches the caller; nothing is left at
OUTPUT, and the pool goes on with the other jobs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import av

from ..faces.track import FaceTracker, TrackedFrame
from ..media.fields import FieldOrder, weave
from ..media.frames import SourceFrame, split_fields
from ..media.images import ImageWriter
from ..media.segments import SegmentedWriter
from ..media.writer import VideoWriter
from ..worker.messages import (
    DecodingDone,
    DetectBatch,
    Detected,
    EncoderInput,
    Passed,
    RestoreBatch,
    Restored,
    ToEncode,
    TrackerInput,
    TrackingDone,
)
from .scheduler import QUEUED_DETECTIONS, QUEUED_RESTORATIONS, WorkerPool

_POLL = 0.1  # seconds between checks of the stop flag while a thread waits
_SERIALS = itertools.count(1)
#: Where a job's first picture has got to, in the order it gets there (see Job.milestones).
MILESTONES = ("started", "decoded", "detected", "tracked", "restored", "written")
#: The frame size batches are counted for (1080p); larger frames get fewer per batch.
REFERENCE_PIXELS = 1920 * 1080


def woven_frame(fields: list[ToEncode]) -> ToEncode:
    """One interlaced frame's two field pictures as the frame to encode: the decoded frame, with
    the restored weave of its fields (None when neither changed) and its faces (a face seen in
    both fields counts once)."""
    whole = fields[0].source.field.whole
    restored = {f.source.field.parity: f.result.frame for f in fields if f.result is not None}
    if not restored:
        return ToEncode(whole, None)
    faces = max(f.result.faces for f in fields if f.result is not None)
    return ToEncode(whole, Restored(weave(whole.frame, restored), faces))


#: Where pictures come from: given the streams the writer takes, a generator of decoded pictures
#: and those streams' packets, in file order (media.demux.demux; a photo; later a GPU decoder).
#: The decode thread closes it, however the run ends.
FrameSource = Callable[[set[int]], Generator[SourceFrame | av.Packet, None, None]]


class NoOutput:
    """The writer of a job that makes no picture (--detect-only, the pass that chooses tracks):
    the encoder thread only counts what it is given."""

    copied_streams: set[int] = set()

    def __init__(self, output: Path) -> None:
        self.output = output  # what the job's summary names
        self.warnings: list[str] = []

    def write(self, source: SourceFrame, restored: av.VideoFrame | None = None) -> None:
        """Nothing to encode."""

    def close(self) -> None:
        """Nothing to finish."""

    def abort(self) -> None:
        """Nothing to remove."""


Writer = VideoWriter | SegmentedWriter | ImageWriter | NoOutput


class FaceLog(Protocol):
    """What hears each tracked picture, in order: the tracks file, or a survey of the tracks
    (faces.select). ``in_range`` says whether the picture lies where faces are restored,
    ``restored`` which of its faces were."""

    def add(self, frame: TrackedFrame, field: int | None, in_range: bool, restored: list[bool]) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


class Stopped(Exception):
    """Raised inside a stage when another stage failed or the user interrupted."""


@dataclass
class StageClock:
    """Busy seconds per stage, for the summary (how busy each stage was)."""

    busy: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, stage: str, seconds: float) -> None:
        with self.lock:
            self.busy[stage] = self.busy.get(stage, 0.0) + seconds


@dataclass
class PipelineResult:
    frames: int
    faces: int
    frames_with_faces: int
    damaged: int  # frames the input could not decode cleanly (see SourceFrame.damage)
    seconds: float
    busy: dict[str, float]
    milestones: dict[str, float]  # see Job.milestones


def _restore_cut(faces: list[int], face_batch: int) -> int:
    """How many frames of a full restoration batch to send, given each frame's face count: the
    cut in its second half that leaves the fewest empty places in the last GPEN batch (compiled
    graphs run full batches, padded), the later cut on a tie. The rest start the next batch."""
    best, best_empty = len(faces), None
    total = 0
    for n, count in enumerate(faces, 1):
        total += count
        empty = -total % face_batch
        if n >= (len(faces) + 1) // 2 and (best_empty is None or empty <= best_empty):
            best, best_empty = n, empty
    return best


def frames_per_batch(batch_size: int, frame_pixels: int) -> int:
    """Frames per detection and restoration batch: ``batch_size`` at 1080p and below, fewer for
    larger frames (a quarter at 4K), so that a batch's working tensors and the frames in flight
    (:func:`frames_in_flight`, counted in batches) take the same bytes whatever the frame size.
    GPEN's own batches count faces and stay ``batch_size``."""
    return max(1, min(batch_size, batch_size * REFERENCE_PIXELS // max(frame_pixels, 1)))


def frames_in_flight(workers: int, batch_frames: int, lookahead: int) -> int:
    """How many frames may be between the decoder and the encoder at once: per worker, its queued
    detection and restoration batches; one worker's worth more for the batches between the
    stages; the tracker's look-ahead and the batch the decoder is filling."""
    per_worker = (QUEUED_RESTORATIONS + QUEUED_DETECTIONS) * batch_frames
    return per_worker * (workers + 1) + lookahead + batch_frames


@dataclass(frozen=True)
class TimeRange:
    """Where faces are restored: from ``start`` to before ``end`` (None: the end) seconds after
    the first frame. Frames up to ``before`` seconds before it and ``after`` seconds after it are
    detected and tracked too, so that tracks and smoothing reach its edges as they do mid-clip
    (``before`` is infinite where track ids must be those of a whole clip); frames farther out are
    not detected."""

    start: float
    end: float | None
    before: float
    after: float

    def restores(self, time: float) -> bool:
        return self.start <= time and (self.end is None or time < self.end)

    def tracks(self, time: float) -> bool:
        return self.start - self.before <= time and (self.end is None or time < self.end + self.after)


def frame_time(picture: SourceFrame) -> float:
    """The time of the frame a picture belongs to: a field's is its frame's, so that both fields
    of a frame fall on the same side of a range's edge."""
    return picture.field.whole.time if picture.field is not None else picture.time


class Job:
    """One video (or photo) through the stages, its device work done by ``pool``'s workers;
    :meth:`run` returns when the output is complete. ``height`` x ``width`` is the pictures'
    upright size, which the workers prepare their detection for.

    Faces are restored within ``span`` (None: everywhere), on the ``chosen`` tracks (None: all);
    a job that does not ``restore`` only detects and tracks, for its ``logs``. ``whole_tracks``
    tracks from the first picture whatever is restored, so that track ids are those of a run over
    the whole clip (a choice of tracks refers to them)."""

    def __init__(self, source: FrameSource, writer: Writer, pool: WorkerPool, tracker: FaceTracker,
                 batch_frames: int, height: int, width: int, logs: tuple[FaceLog, ...] = (),
                 on_frame: Callable[[int, int], None] | None = None, start_frame: int = 0,
                 fields: FieldOrder | None = None, fps: float = 25.0, span: TimeRange | None = None,
                 chosen: frozenset[int] | None = None, restore: bool = True, whole_tracks: bool = False,
                 stop_frame: int | None = None) -> None:
        self.source = source
        self.serial = next(_SERIALS)  # tells this job's work from other jobs' on the workers
        self.span = span
        self.chosen = chosen
        self.restore = restore
        self.origin: float | None = None  # the first frame's time, which the span counts from
        self.height, self.width = height, width
        # An interlaced video's fields travel as pictures of their own, two per frame (media.fields);
        # every count below is of pictures, and the encoder weaves each frame's back together.
        self.fields = fields
        self.field_time = 0.5 / fps
        self.pictures_per_frame = 2 if fields is not None else 1
        self.writer = writer
        self.pool = pool
        self.tracker = tracker
        self.batch_frames = batch_frames
        self.logs = logs
        self.on_frame = on_frame or (lambda frames, faces: None)
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.clock = StageClock()
        self.detected_batches: queue.Queue[TrackerInput] = queue.Queue()
        self.to_encode: queue.Queue[EncoderInput | av.Packet] = queue.Queue()
        self.slots = threading.Semaphore(frames_in_flight(len(pool.workers), batch_frames, tracker.lookahead))
        self.counts = {"frames": 0, "faces": 0, "with_faces": 0, "damaged": 0}
        #: time.perf_counter() when the job started and when its first picture left each stage
        #: (MILESTONES; "restored" only if a face was), for the start-up report: each stage sets its own.
        self.milestones: dict[str, float] = {}
        # A resumed job encodes from ``start_frame``; the frames just before it are still detected
        # and tracked, so tracks and smoothing reach the first new frame as in an uninterrupted run.
        self.start_frame = start_frame * self.pictures_per_frame
        self.first_tracked = 0 if whole_tracks else max(0, self.start_frame - tracker.context)
        # A segment of the video (one unit of a cluster's work) encodes up to ``stop_frame``; the
        # frames after it are tracked, as lookahead, and let go.
        self.stop_frame = None if stop_frame is None else stop_frame * self.pictures_per_frame
        self.pictures_end = 0  # the index after the latest picture decoded
        # Stage threads running, counted by the stages themselves: an interrupted Thread.join()
        # can report a thread as finished while it still runs, and a Ctrl-C inside Thread.start()
        # leaves unknown whether the thread exists. Once shutting down, a stage that only then
        # begins does nothing, so the count is exact when the shut-down reads it.
        self.active = 0
        self.shutting_down = False
        self.running = threading.Condition()

    # ---- what the pool's workers report (scheduler.JobPort) ----------------------------------------

    @property
    def stopped(self) -> bool:
        return self.stop.is_set()

    def detected(self, result: Detected) -> None:
        self.detected_batches.put(result)

    def restored(self, result: ToEncode) -> None:
        self.to_encode.put(result)

    def failed(self, error: BaseException) -> None:
        self.errors.append(error)
        self.stop.set()

    def busy(self, stage: str, seconds: float) -> None:
        self.clock.add(stage, seconds)

    # ---- helpers --------------------------------------------------------------------------------

    def _get(self, q: queue.Queue) -> Any:
        while True:
            if self.stop.is_set():
                raise Stopped
            try:
                return q.get(timeout=_POLL)
            except queue.Empty:
                continue

    def _reached(self, milestone: str) -> None:
        """Note the first time the job's pictures reach ``milestone`` (later times are not kept)."""
        if milestone not in self.milestones:
            self.milestones[milestone] = time.perf_counter()

    def _encodes(self, index: int) -> bool:
        """Whether the picture at ``index`` is written: from ``start_frame`` (the ones before are a
        resumed job's context) up to the segment's end (a whole video's last)."""
        return self.start_frame <= index and (self.stop_frame is None or index < self.stop_frame)

    def _acquire_slot(self) -> None:
        while not self.slots.acquire(timeout=_POLL):
            if self.stop.is_set():
                raise Stopped

    def _guard(self, stage: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            with self.running:
                if self.shutting_down:
                    return
                self.active += 1
            try:
                stage()
            except Stopped:
                pass
            except BaseException as exc:  # every failure must stop the other stages and reach the caller
                self.errors.append(exc)
                self.stop.set()
            finally:
                with self.running:
                    self.active -= 1
                    self.running.notify_all()
        return run

    # ---- stages ---------------------------------------------------------------------------------

    def _decode(self) -> None:
        # Closed here, in this thread, however it ends: a demux generator finalised later, after its
        # container is closed, would touch freed FFmpeg state.
        with contextlib.closing(self.source(self.writer.copied_streams)) as items:
            self._decode_from(items)

    def _decode_from(self, items: Iterator[SourceFrame | av.Packet]) -> None:
        batch: list[SourceFrame] = []  # to detect
        passing: list[SourceFrame] = []  # outside the time range's margin: to encode as decoded
        while True:
            t0 = time.perf_counter()
            item = next(items, None)
            self.clock.add("decode", time.perf_counter() - t0)
            if item is None:
                break
            if isinstance(item, av.Packet):
                self.to_encode.put(item)
                continue
            self._reached("decoded")
            t0 = time.perf_counter()
            pictures = [item] if self.fields is None else split_fields(item, self.fields, self.field_time)
            self.clock.add("decode", time.perf_counter() - t0)
            for picture in pictures:
                self.pictures_end = picture.index + 1
                if self.origin is None:
                    self.origin = frame_time(picture)
                if picture.index < self.first_tracked:
                    continue
                self._acquire_slot()
                if self.span is not None and not self.span.tracks(frame_time(picture) - self.origin):
                    if batch:
                        self.pool.submit(self, DetectBatch(batch))
                        batch = []
                    passing.append(picture)
                    if len(passing) == self.batch_frames:
                        self.detected_batches.put(Passed(passing))
                        passing = []
                    continue
                if passing:
                    self.detected_batches.put(Passed(passing))
                    passing = []
                if picture.buffers.state == "decoded":  # NVDEC's come staged
                    t0 = time.perf_counter()
                    self.pool.stage(picture)
                    self.clock.add("decode", time.perf_counter() - t0)
                batch.append(picture)
                if len(batch) == self.batch_frames:
                    self.pool.submit(self, DetectBatch(batch))
                    batch = []
        if batch:
            self.pool.submit(self, DetectBatch(batch))
        if passing:
            self.detected_batches.put(Passed(passing))
        self.detected_batches.put(DecodingDone(self.pictures_end))

    def _track(self) -> None:
        """Puts detection batches back in order and tracks frame by frame."""
        waiting: dict[int, Detected] = {}  # detected batches by first frame
        sources: dict[int, SourceFrame] = {}
        next_index = self.first_tracked
        batch: list[tuple[SourceFrame, TrackedFrame]] = []

        def send(pairs: list[tuple[SourceFrame, TrackedFrame]]) -> None:
            self.pool.submit(self, RestoreBatch(pairs[0][0].buffers.device, [s for s, _ in pairs],
                                                [t for _, t in pairs], self.serial))

        def emit(done: list[TrackedFrame]) -> None:
            nonlocal batch
            if done:
                self._reached("tracked")
            for tracked in done:
                source = sources.pop(tracked.index)
                if not self._encodes(tracked.index):  # tracked only, as context for the frames written
                    source.buffers.release()
                    self.slots.release()
                    continue
                in_range = self.span is None or self.span.restores(frame_time(source) - self.origin)
                restored = [in_range and self.restore and (self.chosen is None or face.track in self.chosen)
                            for face in tracked.faces]
                for log in self.logs:
                    log.add(tracked, source.field.parity if source.field is not None else None, in_range, restored)
                if not all(restored):  # the others were tracked for their neighbours, or not chosen
                    tracked = dataclasses.replace(tracked, faces=[f for f, r in zip(tracked.faces, restored) if r])
                if not tracked.faces:
                    source.buffers.release()
                    self.to_encode.put(ToEncode(source, None))
                elif batch and source.buffers.device != batch[0][0].buffers.device:  # one batch, one device
                    send(batch)
                    batch = [(source, tracked)]
                else:
                    batch.append((source, tracked))
                if len(batch) == self.batch_frames:
                    cut = _restore_cut([len(t.faces) for _, t in batch], self.pool.face_batch)
                    send(batch[:cut])
                    batch = batch[cut:]
                # Faces may be sparse: a batch also leaves once its first frame is `batch` frames old,
                # since the encoder waits for that frame and the frames in flight are capped.
                if batch and tracked.index - batch[0][0].index >= self.batch_frames:
                    send(batch)
                    batch = []

        def pass_by(frames: list[SourceFrame]) -> None:
            """Frames past the tracked stretch: it ends here (its last frames final, their restoration
            sent, or the encoder would wait for them while these take the frames in flight)."""
            nonlocal batch
            emit(self.tracker.flush())
            if batch:
                send(batch)
                batch = []
            for source in frames:
                sources[source.index] = source
            emit([TrackedFrame(source.index, source.time, []) for source in frames])  # none detected

        self.tracker.prepare()
        total: int | None = None
        while total is None or next_index < total:
            message = self._get(self.detected_batches)
            if isinstance(message, DecodingDone):
                total = message.pictures
                continue
            waiting[message.frames[0].index] = message
            while next_index in waiting:
                batch_in = waiting.pop(next_index)
                next_index = batch_in.frames[-1].index + 1
                if isinstance(batch_in, Passed):
                    pass_by(batch_in.frames)
                    continue
                self._reached("detected")
                t0 = time.perf_counter()
                for source, found, thumbnail in zip(batch_in.frames, batch_in.faces, batch_in.thumbnails):
                    sources[source.index] = source
                    emit(self.tracker.push(source.index, source.time, found, thumbnail))
                self.clock.add("track", time.perf_counter() - t0)
        emit(self.tracker.flush())
        if batch:
            send(batch)
        self.to_encode.put(TrackingDone(next_index if self.stop_frame is None else min(next_index, self.stop_frame)))

    def _encode(self) -> None:
        pending: dict[int, ToEncode] = {}  # by picture index
        next_index = self.start_frame
        total: int | None = None
        step = self.pictures_per_frame
        while total is None or next_index < total:
            message = self._get(self.to_encode)
            if isinstance(message, av.Packet):
                self.writer.write_packet(message)
                continue
            if isinstance(message, TrackingDone):
                total = message.pictures
            else:
                if message.result is not None:
                    self._reached("restored")
                pending[message.source.index] = message
            while all(i in pending for i in range(next_index, next_index + step)):
                pictures = [pending.pop(i) for i in range(next_index, next_index + step)]
                frame = pictures[0] if step == 1 else woven_frame(pictures)
                source, faces = frame.source, frame.result.faces if frame.result is not None else 0
                t0 = time.perf_counter()
                self.writer.write(source, frame.result.frame if frame.result is not None else None)
                self.clock.add("encode", time.perf_counter() - t0)
                self._reached("written")
                self.counts["frames"] += 1
                self.counts["faces"] += faces
                self.counts["with_faces"] += bool(faces)
                self.counts["damaged"] += bool(source.damage)
                self.on_frame(1, faces)
                for _ in pictures:
                    self.slots.release()
                next_index += step
        t0 = time.perf_counter()
        self.writer.close()
        self.clock.add("encode", time.perf_counter() - t0)

    # ---- running --------------------------------------------------------------------------------

    def run(self) -> PipelineResult:
        start = time.perf_counter()
        self.milestones["started"] = start
        threads = [threading.Thread(target=self._guard(self._decode), name="decode"),
                   threading.Thread(target=self._guard(self._track), name="track"),
                   threading.Thread(target=self._guard(self._encode), name="encode")]
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(timeout=_POLL)
        except BaseException:  # Ctrl-C lands in the main thread: stop the stages, then let it propagate
            self._shut_down(threads)
            raise
        if self.errors:
            self._shut_down(threads)
            raise self.errors[0]
        for log in self.logs:
            log.close()
        return PipelineResult(self.counts["frames"], self.counts["faces"], self.counts["with_faces"],
                              self.counts["damaged"], time.perf_counter() - start, dict(self.clock.busy),
                              dict(self.milestones))

    def _shut_down(self, threads: list[threading.Thread]) -> None:
        """Stop every stage and wait for it, even through another Ctrl-C, before the files go:
        a stage still inside FFmpeg when its container closes would crash the process."""
        self.stop.set()
        while True:
            try:
                with self.running:
                    self.shutting_down = True
                    while self.active:
                        self.running.wait(timeout=_POLL)
                break
            except KeyboardInterrupt:
                continue
        for t in threads:
            if t.ident is not None:
                t.join()
        self.pool.forget(self)  # frames and packets go while FFmpeg is open
        for q in (self.detected_batches, self.to_encode):
            while not q.empty():
                q.get_nowait()
        self.writer.abort()
        for log in self.logs:
            log.abort()
