"""The engine: the weights and one worker per device, loaded and compiled once, then any number
of jobs (videos and images), each with its own output, one after another or several at once on
the same workers; one job's failure leaves the engine ready for the others. Every check a job
makes comes before any work, and before the engine's first (slow) start: a wrong option never
costs a download or a compile."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import av
from tqdm import tqdm

from ..errors import InputError, UsageError
from ..faces.detect import detector_weights
from ..faces.select import KnownTracks, TrackSurvey, describe_tracks
from ..faces.track import FaceTracker
from ..faces.tracks_file import TracksWriter
from ..media.containers import CONTAINERS
from ..media.decoders import DecoderChoice, choose_decoder
from ..media.demux import DecodeReport, demux
from ..media.fields import FieldOrder
from ..media.frames import SourceFrame
from ..media.images import IMAGE_EXTENSIONS, ImageWriter, photo_source, read_image
from ..media.probe import VideoInfo, open_input, probe
from ..media.seek import SeekReport, frames_at
from ..media.segments import SegmentedWriter, SegmentUnit
from ..media.sheet import PanelCapture, contact_sheet
from ..media.writer import VideoWriter
from ..model.weights import load_gpen_weights
from ..options import JobOptions, RestoreOptions
from ..worker.device import DeviceWorker
from ..worker.messages import Worker
from ..worker.process import process_workers
from ..worker.restorer import compile_cache
from .batching import TimeRange, frames_per_batch
from .interfaces import FaceLog, FrameSource, NoOutput, Writer
from .job import Job
from .paths import check_paths, segment_store
from .scheduler import WorkerPool
from .summary import Summary

log = logging.getLogger(__name__)
FrameCallback = Callable[[int, int], None]  # (frames written, faces restored on them)
#: ``--compile auto`` compiles from this many frames of work (a frame has a face or more). Eager
#: GPEN runs its elementwise work in fused Triton kernels, so compiling saves only 0.32 ms a face
#: (897 against 699 faces/s, run BQ), while its first frame comes 5.1 s later with a warm compile
#: cache and 23.7 s with a cold one (run AS): it pays from ~16 000 faces warm, ~75 000 cold
#: (BENCHMARKS.md). A one-face render, bound by its encoder, gains nothing measurable.
COMPILE_FROM_FRAMES = {"warm": 16000, "cold": 75000}


def preview_times(info: VideoInfo, time_range: tuple[float, float | None] | None, panels: int) -> tuple[float, ...]:
    """The times (seconds of the stream's clock) of ``panels`` frames spread evenly over the
    video, or over the time range (counted from the first frame): the middles of equal parts."""
    length = info.duration if info.duration is not None else (info.frames or 1) / info.fps
    start, end = time_range if time_range is not None else (0.0, None)
    end = min(end, length) if end is not None else length
    return tuple(info.first_time + start + (k + 0.5) * (end - start) / panels for k in range(panels))


@dataclass(frozen=True)
class Pictures:
    """What a job's pictures are, as probed: how many (None: unknown), their upright size, the
    smoothing they take (none for a photo), and a video's fields and rate."""

    frames: int | None
    height: int
    width: int
    smooth: float
    fields: FieldOrder | None = None
    fps: float = 25.0


class Engine:
    """Restores any number of videos and images with one set of options. The weights load and the
    workers are built (and compiled) on the first job, once it has passed its checks. Jobs may run
    from several threads at once; they share the workers. Close it (or use ``with``) to stop the
    workers' threads."""

    def __init__(self, options: RestoreOptions | None = None, progress: bool = True) -> None:
        self.options = options or RestoreOptions()
        self.progress = progress
        self.devices = self.options.devices()  # a missing GPU is an error before anything loads
        self._pool: WorkerPool | None = None  # the workers and their threads, once built
        self._building = threading.Lock()  # jobs starting at once build the workers once
        self._retired: list[WorkerPool] = []  # pools with a dead worker, still used by running jobs
        self._jobs: set[Job] = set()  # running, for interrupt()
        self._jobs_lock = threading.Lock()
        self._interrupted = False
        self._startup: dict[str, float] = {}  # how the first job's start-up went, until it reports it
        #: Frames of all the work planned (a batch's), which ``--compile auto`` decides on; None: the first job's.
        self.planned_frames: int | None = None

    def compiles(self, frames: int | None) -> bool:
        """Whether GPU workers compile, for ``frames`` of work (None: unknown, taken as long)."""
        if self.options.compile != "auto":
            return self.options.compile == "on"
        cache = compile_cache()
        warm = cache.is_dir() and any(cache.iterdir())
        return frames is None or frames >= COMPILE_FROM_FRAMES["warm" if warm else "cold"]

    def pool(self, frames: int | None, restoring: bool = True) -> WorkerPool:
        """The workers, built on first use (compiled for the planned work, else the first job's
        ``frames``), then the same for every job, unless a worker process has died: the next job
        then starts them all again. A job that restores has GPEN loaded into them (its weights
        downloaded on first use); one that only finds faces does not."""
        with self._building:
            if self._pool is not None and not self._pool.alive:
                log.warning("a worker process has died: starting the workers again")
                self._retire(self._pool)
                self._pool = None
            if self._pool is None:
                # The tracker's imports (SciPy, up to a second beside the other stages' start) run
                # while the workers start, not on the first frame's way: the first job's track
                # thread then finds them done, or waits only for the rest of them.
                threading.Thread(target=FaceTracker.prepare, name="tracker-imports").start()
                start = time.perf_counter()
                compiled = self.compiles(self.planned_frames if self.planned_frames is not None else frames)
                self._pool = WorkerPool(self._new_workers(compiled))
                self._startup["workers"] = time.perf_counter() - start
            workers = self._pool.workers
            if restoring and not all(w.restores for w in workers):
                start = time.perf_counter()
                state_dict, _ = load_gpen_weights(self.options.model, self.options.weights, self.progress)
                loaded = time.perf_counter()
                for loading in [worker.load_restorer(state_dict) for worker in workers]:
                    loading.result()
                label = "GPEN (compiling)" if any(w.compiled for w in workers) else "GPEN"
                self._startup.update({"weights": loaded - start, label: time.perf_counter() - loaded})
            return self._pool

    def _retire(self, pool: WorkerPool) -> None:
        """A pool with a dead worker: closed now, or by its last running job (which fails on it)."""
        with self._jobs_lock:
            self._retired.append(pool)
        self._close_retired()

    def _close_retired(self) -> None:
        """Close the retired pools that no running job uses any more."""
        with self._jobs_lock:
            idle = [p for p in self._retired if not any(job.pool is p for job in self._jobs)]
            self._retired = [p for p in self._retired if p not in idle]
        for pool in idle:
            pool.close()

    def _new_workers(self, compiled: bool) -> list[Worker]:
        """A worker per device entry, in this process's threads or in processes of their own."""
        if self.options.worker == "thread":
            return [DeviceWorker(self.options, device, compiled) for device in self.devices]
        # The processes load the detector from a file: fetched here, once, with this run's progress.
        path = detector_weights(self.options.detector, self.options.detector_weights, self.progress)
        return process_workers(replace(self.options, detector_weights=path), self.devices, compiled)

    def parallel_jobs(self, requested: int) -> int:
        """Files a batch runs at once on this engine: as many as asked (``--jobs``); they share the workers."""
        return requested

    def check(self, inputs: Sequence[Path], output_dir: Path) -> None:
        """Nothing to check before a batch here: this machine's paths are the ones given."""

    def close(self) -> None:
        """Stop the workers' threads (once no job runs). The engine cannot run jobs after this."""
        for pool in [*self._retired, *([self._pool] if self._pool is not None else [])]:
            pool.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def interrupt(self) -> None:
        """Stop every running job as Ctrl-C would, and any that starts later: each raises
        KeyboardInterrupt and leaves no output."""
        with self._jobs_lock:
            self._interrupted = True
            for job in self._jobs:
                job.failed(KeyboardInterrupt())

    def _take_startup(self) -> dict[str, float]:
        startup, self._startup = self._startup, {}
        return startup

    def restore(self, input: str | Path, output: str | Path | None, job: JobOptions | None = None,
                on_frame: FrameCallback | None = None) -> Summary:
        """Restore ``input`` (a video, or an image by its extension) into ``output``; with
        ``job.detect_only``, find its faces instead (``output`` None; see :meth:`find_faces`)."""
        job = job or JobOptions()
        if job.detect_only:
            if output is not None:
                raise UsageError("--detect-only writes no video: give INPUT alone (and --tracks-out), no OUTPUT")
            return self.find_faces(input, job.tracks_out, on_frame)
        if output is None:
            raise UsageError("give an OUTPUT to write (or --detect-only)")
        if job.preview is not None:
            return self.preview(input, output, job.preview, job.overwrite, on_frame)
        if Path(input).suffix.lower() in IMAGE_EXTENSIONS:
            return self.restore_image(input, output, job, on_frame)
        return self.restore_video(input, output, job, on_frame)

    def _probe_video(self, input: Path) -> VideoInfo:
        """The video's probe, with the checks that come before any work: the range starts inside
        it, and a cut-off file is refused unless --allow-truncated."""
        info = probe(input)
        if self.options.start is not None and info.duration is not None and self.options.start >= info.duration:
            raise InputError(f"--start {self.options.start:g} s is not inside {input.name}, which lasts "
                             f"{info.duration:.3f} s")
        if info.truncated:
            if not self.options.allow_truncated:
                raise InputError(f"{info.truncated}; pass --allow-truncated to restore what is there")
            log.warning("%s; restoring every frame that decodes", info.truncated)
        return info

    def _decoding(self, info: VideoInfo) -> DecoderChoice:
        """``--decoder``'s choice for this video (NVDEC on the first GPU the workers use, when they
        are threads of this process); an impossible ``nvdec`` is an error here, before any work."""
        threads = self.options.worker == "thread"
        gpus = [int(d.split(":")[1]) for d in self.devices if d.startswith("cuda:") and threads]
        assert info.traits is not None
        return choose_decoder(self.options.decoder, info.traits, gpus[0] if gpus else None, info.display_matrix)

    @contextlib.contextmanager
    def _demuxed(self, input: Path, info: VideoInfo, decoding: DecoderChoice) -> Iterator[FrameSource]:
        """A pass of its own over the video's pictures (the first pass that chooses tracks, or
        --detect-only), its container closed afterwards."""
        container = open_input(input)
        try:
            report = DecodeReport(info.truncated)
            yield lambda streams: demux(container, streams, self.options.allow_truncated, report, decoding)
        finally:
            container.close()

    @staticmethod
    def _pictures(info: VideoInfo, smooth: float) -> Pictures:
        return Pictures(info.frames, *info.shown, smooth, info.fields, info.fps)

    def restore_video(self, input: str | Path, output: str | Path, job: JobOptions | None = None,
                      on_frame: FrameCallback | None = None) -> Summary:
        """Restore every face in ``input`` (those chosen, with ``--faces`` or ``--tracks``) and
        write ``output``; audio, timing and metadata are kept.

        With ``job.resume`` the video is encoded in segments kept in a work directory beside
        ``output``; a later job with ``resume`` continues after the last finished one. Raises
        ``InputError``, ``OutputError``, ``UsageError`` or ``WeightsError`` (one-line messages)
        before any output exists when something cannot work. ``on_frame(frames, faces)`` hears
        every frame written; without it the engine shows a progress bar of its own (if asked to).
        """
        job = job or JobOptions()
        input, output = Path(input), Path(output)
        check_paths(input, output, job.overwrite, CONTAINERS)
        info = self._probe_video(input)
        decoding = self._decoding(info)
        pictures = self._pictures(info, self.options.smooth)
        report = DecodeReport(info.truncated)  # the cut found in the file's index, if any
        with open_input(input) as container, \
                VideoWriter(output, container, info, self.options, job.overwrite) as video:
            # After the writer, which checks the encoder settings: a wrong option must not cost
            # a download. Before --resume's work directory, which a failed download must not leave.
            pool = self.pool(info.frames)
            with self._demuxed(input, info, decoding) as first_pass:
                chosen, choice, _ = self._choose(input.name, first_pass, pictures, on_frame)
            writer: VideoWriter | SegmentedWriter = video
            start_frame = 0
            if job.resume:
                writer = SegmentedWriter(video, segment_store(input, output, job, self.options), input,
                                         job.segment_frames)
                start_frame = writer.first_frame

            def source(streams: set[int]) -> Iterator[SourceFrame | av.Packet]:
                return demux(container, streams, self.options.allow_truncated, report, decoding)

            summary = self._run(source, writer, pool, self._tracks_file(job), on_frame, pictures,
                                start_frame, chosen)
        summary.resumed_at, summary.truncated, summary.choice = start_frame, report.truncated, choice
        summary.decoder = decoding.describe()
        return summary

    def restore_segment(self, input: str | Path, output: str | Path, job: JobOptions, unit: SegmentUnit,
                        on_frame: FrameCallback | None = None) -> Summary:
        """One segment of a long video, a unit of a cluster's job: its frames restored and encoded
        into the work directory beside ``output``, where the driver assembles OUTPUT once every
        segment is there. Decoding starts at the unit's key frame and runs the tracker's lookahead
        past its end, so its frames come out as in a run over the whole video."""
        input, output = Path(input), Path(output)
        info = self._probe_video(input)
        decoding = self._decoding(info)
        pictures = self._pictures(info, self.options.smooth)
        store = segment_store(input, output, job, self.options)
        report = DecodeReport(info.truncated)
        # The encoder's settings come from a writer of the output's kind, whose file is thrown away.
        with open_input(input) as container, \
                VideoWriter(store.directory / f"unit-{unit.segment:06d}{output.suffix}", container, info,
                            self.options, overwrite=True) as scratch:
            writer = SegmentedWriter(scratch, store, input, job.segment_frames, unit=unit.segment)
            pool = self.pool(info.frames)
            tracker = FaceTracker(smooth=pictures.smooth)
            end = unit.stop + tracker.context  # the frames after the unit that its last frames need

            def source(streams: set[int]) -> Iterator[SourceFrame | av.Packet]:
                with contextlib.closing(demux(container, streams, self.options.allow_truncated, report, decoding,
                                              unit.seek)) as items:
                    for item in items:
                        if isinstance(item, SourceFrame) and item.index >= end:
                            return
                        yield item

            summary = self._run(source, writer, pool, (), on_frame, pictures, unit.start, tracker=tracker,
                                stop_frame=unit.stop)
        summary.decoder = decoding.describe()
        return summary

    def restore_image(self, input: str | Path, output: str | Path, job: JobOptions | None = None,
                      on_frame: FrameCallback | None = None) -> Summary:
        """Restore the faces of one photo (EXIF orientation honoured) into another image file: a
        one-picture job on the same pipeline, without smoothing (there is no time to smooth over)."""
        job = job or JobOptions()
        input, output = Path(input), Path(output)
        self._refuse_range(input)
        check_paths(input, output, job.overwrite, IMAGE_EXTENSIONS)
        photo = read_image(input)
        with ImageWriter(output, job.overwrite, traits=photo.traits, strict=self.options.strict) as writer:
            pool = self.pool(1)
            pictures = Pictures(1, photo.frame.height, photo.frame.width, smooth=0)
            chosen, choice, _ = self._choose(input.name, photo_source(photo.picture()), pictures, on_frame)
            summary = self._run(photo_source(photo.picture()), writer, pool, self._tracks_file(job), on_frame,
                                pictures, chosen=chosen)
        summary.choice = choice
        return summary

    def find_faces(self, input: str | Path, tracks_out: str | Path | None = None,
                   on_frame: FrameCallback | None = None) -> Summary:
        """``--detect-only``: detect and track the faces of ``input`` (a video or photo), without
        GPEN and without writing a picture; the summary's ``tracks_found`` lists the tracks, and
        ``tracks_out`` (if given) gets the tracks file. The track ids are those a restoration with
        the same detection options numbers (``--tracks`` takes them)."""
        input = Path(input)
        tracks_out = Path(tracks_out) if tracks_out is not None else None
        if tracks_out is not None and not tracks_out.resolve().parent.is_dir():
            raise UsageError(f"--tracks-out: directory does not exist: {tracks_out.resolve().parent}")
        if input.suffix.lower() in IMAGE_EXTENSIONS:
            self._refuse_range(input)
            photo = read_image(input)
            pictures = Pictures(1, photo.frame.height, photo.frame.width, smooth=0)
            pool = self.pool(1, restoring=False)
            return self._find(photo_source(photo.picture()), input, tracks_out, pool, on_frame, pictures)
        info = self._probe_video(input)
        decoding = self._decoding(info)
        pool = self.pool(info.frames, restoring=False)
        pictures = self._pictures(info, self.options.smooth)
        with self._demuxed(input, info, decoding) as source:
            summary = self._find(source, input, tracks_out, pool, on_frame, pictures)
        summary.decoder = decoding.describe()
        return summary

    def _find(self, source: FrameSource, input: Path, tracks_out: Path | None, pool: WorkerPool,
               on_frame: FrameCallback | None, pictures: Pictures) -> Summary:
        survey = TrackSurvey(self.options.faces, pictures.height, pictures.width)
        logs = (survey,) if tracks_out is None else (survey, TracksWriter(tracks_out))
        summary = self._run(source, NoOutput(tracks_out or input), pool, logs, on_frame, pictures, restore=False)
        summary.tracks_found = survey
        return summary

    def preview(self, input: str | Path, output: str | Path, panels: int, overwrite: bool = False,
                on_frame: FrameCallback | None = None) -> Summary:
        """``--preview``: ``output``, a contact sheet of ``panels`` frames evenly spaced over the
        video (over ``--start``/``--end`` if given), each decoded beside restored, its faces boxed.
        It seeks to each frame and restores it alone, as a photo (an interlaced frame as its two
        fields, as a render restores them): a long clip takes seconds. With
        ``--tracks`` or ``--faces``, the first pass a render makes numbers the tracks (it reads
        the whole clip), and the frames are restored and labelled with them."""
        input, output = Path(input), Path(output)
        if input.suffix.lower() in IMAGE_EXTENSIONS:
            raise UsageError(f"--preview samples the frames of a video; {input.name} is an image")
        check_paths(input, output, overwrite, IMAGE_EXTENSIONS)
        info = self._probe_video(input)
        times = preview_times(info, self.options.time_range, panels)
        started = time.perf_counter()
        with ImageWriter(output, overwrite) as writer:
            pool = self.pool(panels)
            pictures = self._pictures(info, self.options.smooth)
            chosen, choice, survey = None, "", None
            if self.options.selects:
                with self._demuxed(input, info, self._decoding(info)) as first_pass:
                    chosen, choice, survey = self._choose(input.name, first_pass, pictures, on_frame, times)
            seek = SeekReport()
            rows = []
            for frame in frames_at(input, list(times), seek):
                capture = PanelCapture(frame, labelled=survey is not None)
                tracker = KnownTracks(survey.kept) if survey is not None else FaceTracker(smooth=0)
                self._run(photo_source(frame), capture, pool, (capture,), lambda done, found: None,
                          Pictures(1, *info.shown, smooth=0, fields=info.fields, fps=info.fps),
                          chosen=chosen, tracker=tracker, ranged=False)
                rows.append(capture.panel())
            writer.write_rgb(contact_sheet(rows, f"{input.name}: as decoded, faces boxed"))
            writer.close()
        faces = sum(box.restored for row in rows for box in row.boxes)
        return Summary(output, seek.decoded, faces, sum(any(b.restored for b in r.boxes) for r in rows),
                       time.perf_counter() - started, startup=self._take_startup(), panels=len(rows), choice=choice)

    def _refuse_range(self, input: Path) -> None:
        if self.options.time_range is not None:
            raise UsageError(f"--start and --end apply to videos; {input.name} is an image")

    @staticmethod
    def _tracks_file(job: JobOptions) -> tuple[FaceLog, ...]:
        return (TracksWriter(Path(job.tracks_out)),) if job.tracks_out else ()

    def _choose(self, name: str, source: FrameSource, pictures: Pictures, on_frame: FrameCallback | None,
                keep_times: tuple[float, ...] = ()) -> tuple[frozenset[int] | None, str, TrackSurvey | None]:
        """The tracks to restore (None: every face), a line saying so, and the survey that found
        them (which keeps the frames at ``keep_times``). Where the options choose some
        (``--faces``, ``--tracks``), a first pass detects and tracks the whole clip without
        restoring: ``largest`` and ``center`` need each track's whole life, and a ``--tracks`` id
        that does not exist is an error before anything is restored."""
        if not self.options.selects:
            return None, "", None
        survey = TrackSurvey(self.options.faces, pictures.height, pictures.width, keep_times)
        quiet = (lambda frames, faces: None) if on_frame is not None else None  # a batch's bar counts the render
        result = self._run(source, NoOutput(Path(name)), self.pool(pictures.frames), (survey,), quiet, pictures,
                           restore=False)
        if self.options.tracks is None:
            chosen = survey.chosen()
        else:
            missing = [t for t in self.options.tracks if t not in survey.frames]
            if missing:
                where = " between --start and --end" if self.options.time_range is not None else ""
                raise UsageError(f"--tracks {missing[0]}: {name} has no such track{where} (its tracks: "
                                 f"{describe_tracks(survey.frames)}; --detect-only --tracks-out lists them)")
            chosen = frozenset(self.options.tracks)
        return chosen, (f"tracks restored: {describe_tracks(chosen)} of {describe_tracks(survey.frames)} "
                        f"(found by a first pass over the clip, {result.seconds:.1f} s)"), survey

    def _run(self, source: FrameSource, writer: Writer, pool: WorkerPool, logs: tuple[FaceLog, ...],
             on_frame: FrameCallback | None, pictures: Pictures, start_frame: int = 0,
             chosen: frozenset[int] | None = None, restore: bool = True,
             tracker: FaceTracker | KnownTracks | None = None, ranged: bool = True,
             stop_frame: int | None = None) -> Summary:
        """One job through the pipeline, with its progress and ``logs`` (the tracks file, the
        survey of tracks); ``logs`` are aborted on any failure, and ``writer`` by the caller's
        ``with`` (or by the job), so nothing is left at OUTPUT. ``tracker`` defaults to a new one
        with the pictures' smoothing; the options' time range applies where ``ranged``. Frames
        from ``start_frame`` up to ``stop_frame`` (None: the end) are written."""
        lowered = [w.out_of_memory for w in pool.workers]
        frames = pictures.frames
        try:
            tracker = tracker or FaceTracker(smooth=pictures.smooth)
            # Never more frames to a batch than the job has: a photo's detection runs on one frame.
            batch_frames = min(frames_per_batch(self.options.batch_size, pictures.width * pictures.height),
                               frames or self.options.batch_size)
            bar = tqdm(total=frames, initial=start_frame, unit="frame", desc=None if restore else "finding faces",
                       disable=not self.progress or on_frame is not None, dynamic_ncols=True)
            faces = [0]

            def count(done: int, found: int) -> None:
                faces[0] += found
                bar.update(done)
                if restore:
                    bar.set_postfix(faces=faces[0], refresh=False)
                if on_frame is not None:
                    on_frame(done, found)

            span = None
            if ranged and self.options.time_range is not None:  # tracked twice the tracker's context around it
                margin = 2 * tracker.context / pictures.fps
                span = TimeRange(*self.options.time_range, before=math.inf if self.options.selects else margin,
                                 after=margin)
            running = Job(source, writer, pool, tracker, batch_frames, pictures.height, pictures.width,
                          logs=logs, on_frame=count, start_frame=start_frame, fields=pictures.fields,
                          fps=pictures.fps, span=span, chosen=chosen, restore=restore,
                          whole_tracks=self.options.selects, stop_frame=stop_frame)
            with self._jobs_lock:
                if self._interrupted:
                    raise KeyboardInterrupt
                self._jobs.add(running)
            try:
                result = running.run()
            finally:
                with self._jobs_lock:
                    self._jobs.discard(running)
                self._close_retired()
                bar.close()
        except BaseException:
            for log in logs:
                log.abort()
            raise
        memory = [f"{w.device}: out of memory {w.out_of_memory - before} time(s), GPEN batch lowered to {w.face_batch}"
                  for w, before in zip(pool.workers, lowered) if w.out_of_memory > before]
        memory += [note for w in pool.workers for note in w.take_notes()]
        return Summary(writer.output, result.frames, result.faces, result.frames_with_faces, result.seconds,
                       result.busy, writer.warnings + memory, result.damaged, startup=self._take_startup(),
                       milestones=result.milestones)
