"""One job through the stages: decode -> detect (workers) -> track (in order) -> restore (workers) -> encode.

Decoding, tracking and encoding are the job's own stages, run by a :class:`~.runtime.StageRuntime`
(a thread each); the device work goes to the
workers of a :class:`~.scheduler.WorkerPool`, which several jobs can share at once, so that one
job's start overlaps the previous one's end. Tracking needs the frames in order, so it runs in
one thread between the two device stages. A semaphore caps the job's frames in flight, which
keeps memory flat whatever the video's length; batches hold fewer frames the larger they are,
which bounds it in bytes whatever the frame size. The encoder writes frames strictly in order.
Any stage's error stops every stage of the job and reaches the caller; nothing is left at
OUTPUT, and the pool goes on with the other jobs. How pictures are batched and which are
restored is in :mod:`.batching`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import av

from ..faces.track import FaceTracker, TrackedFrame
from ..media.fields import FieldOrder, split_fields, weave
from ..media.frames import SourceFrame
from ..worker.messages import (
    DecodingDone,
    DetectBatch,
    Detected,
    EncoderInput,
    Passed,
    Paste,
    RestoreBatch,
    Restored,
    ToEncode,
    TrackerInput,
    TrackingDone,
)
from .batching import TimeRange, frame_time, frames_in_flight, restore_cut
from .interfaces import FaceLog, FrameSource, Writer
from .runtime import StageRuntime
from .scheduler import WorkerPool

_SERIALS = itertools.count(1)


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


@dataclass
class PipelineResult:
    frames: int
    faces: int
    frames_with_faces: int
    damaged: int  # frames the input could not decode cleanly (see SourceFrame.damage)
    seconds: float
    busy: dict[str, float]
    milestones: dict[str, float]  # see StageRuntime.milestones


class Job:
    """One video (or photo) through the stages, its device work done by ``pool``'s workers;
    :meth:`run` returns when the output is complete. ``height`` x ``width`` is the pictures'
    upright size, which the workers prepare their detection for.

    Faces are restored within ``span`` (None: everywhere), on the ``chosen`` tracks (None: all);
    they are pasted back as ``paste`` says; a job without it only detects and tracks, for its ``logs``. ``whole_tracks``
    tracks from the first picture whatever is restored, so that track ids are those of a run over
    the whole clip (a choice of tracks refers to them)."""

    def __init__(self, source: FrameSource, writer: Writer, pool: WorkerPool, tracker: FaceTracker,
                 batch_frames: int, height: int, width: int, logs: tuple[FaceLog, ...] = (),
                 on_frame: Callable[[int, int], None] | None = None, start_frame: int = 0,
                 fields: FieldOrder | None = None, fps: float = 25.0, span: TimeRange | None = None,
                 chosen: frozenset[int] | None = None, paste: Paste | None = Paste(), whole_tracks: bool = False,
                 stop_frame: int | None = None) -> None:
        self.source = source
        self.serial = next(_SERIALS)  # tells this job's work from other jobs' on the workers
        self.span = span
        self.chosen = chosen
        self.paste = paste
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
        self.runtime = StageRuntime()
        self.detected_batches: queue.Queue[TrackerInput] = self.runtime.queue()
        self.to_encode: queue.Queue[EncoderInput | av.Packet] = self.runtime.queue()
        self.slots = threading.Semaphore(frames_in_flight(len(pool.workers), batch_frames, tracker.lookahead))
        self.counts = {"frames": 0, "faces": 0, "with_faces": 0, "damaged": 0}
        # A resumed job encodes from ``start_frame``; the frames just before it are still detected
        # and tracked, so tracks and smoothing reach the first new frame as in an uninterrupted run.
        self.start_frame = start_frame * self.pictures_per_frame
        self.first_tracked = 0 if whole_tracks else max(0, self.start_frame - tracker.context)
        # A segment of the video (one unit of a cluster's work) encodes up to ``stop_frame``; the
        # frames after it are tracked, as lookahead, and let go.
        self.stop_frame = None if stop_frame is None else stop_frame * self.pictures_per_frame
        self.pictures_end = 0  # the index after the latest picture decoded

    # ---- what the pool's workers report (scheduler.JobPort) ----------------------------------------

    @property
    def stopped(self) -> bool:
        return self.runtime.stopped

    def detected(self, result: Detected) -> None:
        self.detected_batches.put(result)

    def restored(self, result: ToEncode) -> None:
        self.to_encode.put(result)

    def failed(self, error: BaseException) -> None:
        self.runtime.fail(error)

    def busy(self, stage: str, seconds: float) -> None:
        self.runtime.add_busy(stage, seconds)

    def _encodes(self, index: int) -> bool:
        """Whether the picture at ``index`` is written: from ``start_frame`` (the ones before are a
        resumed job's context) up to the segment's end (a whole video's last)."""
        return self.start_frame <= index and (self.stop_frame is None or index < self.stop_frame)

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
            with self.runtime.timed("decode"):
                item = next(items, None)
            if item is None:
                break
            if isinstance(item, av.Packet):
                self.to_encode.put(item)
                continue
            self.runtime.reached("decoded")
            with self.runtime.timed("decode"):
                pictures = [item] if self.fields is None else split_fields(item, self.fields, self.field_time)
            for picture in pictures:
                self.pictures_end = picture.index + 1
                if self.origin is None:
                    self.origin = frame_time(picture)
                if picture.index < self.first_tracked:
                    continue
                self.runtime.acquire(self.slots)
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
                    with self.runtime.timed("decode"):
                        self.pool.stage(picture)
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
                                                [t for _, t in pairs], self.serial, self.paste))

        def emit(done: list[TrackedFrame]) -> None:
            nonlocal batch
            if done:
                self.runtime.reached("tracked")
            for tracked in done:
                source = sources.pop(tracked.index)
                if not self._encodes(tracked.index):  # tracked only, as context for the frames written
                    source.buffers.release()
                    self.slots.release()
                    continue
                in_range = self.span is None or self.span.restores(frame_time(source) - self.origin)
                restored = [in_range and self.paste is not None and (self.chosen is None or face.track in self.chosen)
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
                    cut = restore_cut([len(t.faces) for _, t in batch], self.pool.face_batch)
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
            message = self.runtime.get(self.detected_batches)
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
                self.runtime.reached("detected")
                with self.runtime.timed("track"):
                    for source, found, thumbnail in zip(batch_in.frames, batch_in.faces, batch_in.thumbnails):
                        sources[source.index] = source
                        emit(self.tracker.push(source.index, source.time, found, thumbnail))
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
            message = self.runtime.get(self.to_encode)
            if isinstance(message, av.Packet):
                self.writer.write_packet(message)
                continue
            if isinstance(message, TrackingDone):
                total = message.pictures
            else:
                if message.result is not None:
                    self.runtime.reached("restored")
                pending[message.source.index] = message
            while all(i in pending for i in range(next_index, next_index + step)):
                pictures = [pending.pop(i) for i in range(next_index, next_index + step)]
                frame = pictures[0] if step == 1 else woven_frame(pictures)
                source, faces = frame.source, frame.result.faces if frame.result is not None else 0
                with self.runtime.timed("encode"):
                    self.writer.write(source, frame.result.frame if frame.result is not None else None)
                self.runtime.reached("written")
                self.counts["frames"] += 1
                self.counts["faces"] += faces
                self.counts["with_faces"] += bool(faces)
                self.counts["damaged"] += bool(source.damage)
                self.on_frame(1, faces)
                for _ in pictures:
                    self.slots.release()
                next_index += step
        with self.runtime.timed("encode"):
            self.writer.close()

    # ---- running --------------------------------------------------------------------------------

    def run(self) -> PipelineResult:
        seconds = self.runtime.run({"decode": self._decode, "track": self._track, "encode": self._encode},
                                   on_stop=self._let_go)
        for log in self.logs:
            log.close()
        return PipelineResult(self.counts["frames"], self.counts["faces"], self.counts["with_faces"],
                              self.counts["damaged"], seconds, dict(self.runtime.busy), dict(self.runtime.milestones))

    def _let_go(self) -> None:
        """After a stop: the pool drops this job's work (its frames and packets go while FFmpeg is
        open), and nothing is left at OUTPUT or in the logs."""
        self.pool.forget(self)
        self.writer.abort()
        for log in self.logs:
            log.abort()
