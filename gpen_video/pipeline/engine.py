"""The engine: the weights and one worker per device, loaded and compiled once, then any number
of jobs (videos and images), each with its own output, one after another or several at once on
the same workers; one job's failure leaves the engine ready for the others. Every check a job
makes comes before any work, and before the engine's first (slow) start: a wrong option never
costs a download or a compile."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import av
from tqdm import tqdm

from ..faces.track import FaceTracker
from ..faces.tracks_file import TracksWriter
from ..media.fields import FieldOrder
from ..media.images import IMAGE_EXTENSIONS, ImageWriter, photo_source, read_image
from ..media.segments import SegmentedWriter, SegmentStore, work_dir_for
from ..media.source import DecodeReport, InputError, SourceFrame, demux, open_input, probe
from ..media.writer import CONTAINERS, VideoWriter
from ..model.weights import load_gpen_weights
from ..options import JobOptions, RestoreOptions, UsageError
from ..worker.device import DeviceWorker, compile_cache
from .job import FrameSource, Job, TimeRange, Writer, frames_per_batch
from .scheduler import WorkerPool

log = logging.getLogger(__name__)
FrameCallback = Callable[[int, int], None]  # (frames written, faces restored on them)
#: ``--compile auto`` compiles from this many frames of work: compiled GPEN restores a one-face
#: 1080p clip at 2.3x and a crowd at 5.4x the eager speed (~6.4 ms saved per face, run AN), and
#: its first frame comes 5.1 s later with a warm compile cache, 23.7 s with a cold one (run AS):
#: it pays from ~800 faces warm, ~3700 cold (BENCHMARKS.md).
COMPILE_FROM_FRAMES = {"warm": 1000, "cold": 3500}


@dataclass
class Summary:
    output: Path
    frames: int
    faces: int
    frames_with_faces: int
    seconds: float
    busy: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    damaged: int = 0  # input frames decoded with errors or repeated in place of undecodable ones
    resumed_at: int = 0  # the first frame this run encoded (--resume)
    truncated: str = ""  # why the input ended early (--allow-truncated), or ""
    #: Seconds the engine's start took in this job (weights, workers: building and compiling), if it started here.
    startup: dict[str, float] = field(default_factory=dict)
    first_frame_at: float | None = None  # time.perf_counter() when its first frame was written

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    def describe(self, started: float | None = None) -> str:
        """The closing report: frames, faces, time, where the start-up went (the first frame's time
        counted from ``started``, a ``time.perf_counter()``), and each stage's busy share of the wall time."""
        lines = [f"{self.output}: {self.frames} frames, {self.faces} faces restored on {self.frames_with_faces} "
                 f"frames, {self.seconds:.1f} s ({self.fps:.1f} fps)"]
        if started is not None and self.first_frame_at is not None:
            parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.startup.items())
            lines.append(f"first frame written {self.first_frame_at - started:.1f} s after the start"
                         + (f" (of which {parts})" if parts else ""))
        if self.resumed_at:
            lines.append(f"resumed at frame {self.resumed_at}: the frames before it came from the work directory")
        if self.truncated:
            lines.append(f"warning: {self.truncated}; every frame that decodes was restored")
        if self.damaged:
            lines.append(f"warning: {self.damaged} frame(s) of the input were damaged: decoded with errors, "
                         f"or the previous frame repeated where one could not be decoded")
        if self.busy:
            busy = ", ".join(f"{k} {v / self.seconds:.0%}" for k, v in sorted(self.busy.items()))
            lines.append(f"stage busy time: {busy}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def check_paths(input: Path, output: Path, overwrite: bool, extensions: set[str] | dict) -> None:
    """OUTPUT can be written, is not the input, and replaces nothing unasked."""
    if output.suffix.lower() not in extensions:
        raise UsageError(f"unsupported output extension {output.suffix!r}; use one of {', '.join(sorted(extensions))}")
    if input.exists() and output.exists() and os.path.samefile(input, output):
        raise UsageError("OUTPUT is the input file; choose another path")
    if output.resolve() == input.resolve():
        raise UsageError("OUTPUT is the input file; choose another path")
    if output.is_dir():
        raise UsageError(f"OUTPUT is a directory: {output}")
    if output.exists() and not overwrite:
        raise UsageError(f"{output} exists; pass --overwrite to replace it")
    parent = output.resolve().parent
    if not parent.is_dir():
        raise UsageError(f"output directory does not exist: {parent}")
    try:  # a real probe: permissions, read-only file systems and ACLs all answer the same way
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError:
        raise UsageError(f"output directory is not writable: {parent}") from None


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

    def workers(self, frames: int | None) -> list[DeviceWorker]:
        """The workers, built on first use (weights loaded, downloaded on first use; compiled for
        the planned work, else the first job's ``frames``), then the same for every job."""
        with self._building:
            if self._pool is None:
                start = time.perf_counter()
                state_dict, _ = load_gpen_weights(self.options.model, self.options.weights, self.progress)
                loaded = time.perf_counter()
                compiled = self.compiles(self.planned_frames if self.planned_frames is not None else frames)
                workers = [DeviceWorker(state_dict, self.options, device, compiled) for device in self.devices]
                label = "workers (compiling)" if any(w.compiled for w in workers) else "workers"
                self._startup = {"weights": loaded - start, label: time.perf_counter() - loaded}
                self._pool = WorkerPool(workers)
        return self._pool.workers

    def close(self) -> None:
        """Stop the workers' threads (once no job runs). The engine cannot run jobs after this."""
        if self._pool is not None:
            self._pool.close()

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

    def restore(self, input: str | Path, output: str | Path, job: JobOptions | None = None,
                on_frame: FrameCallback | None = None) -> Summary:
        """Restore ``input`` (a video, or an image by its extension) into ``output``."""
        if Path(input).suffix.lower() in IMAGE_EXTENSIONS:
            return self.restore_image(input, output, job, on_frame)
        return self.restore_video(input, output, job, on_frame)

    def restore_video(self, input: str | Path, output: str | Path, job: JobOptions | None = None,
                      on_frame: FrameCallback | None = None) -> Summary:
        """Restore every face in ``input`` and write ``output``; audio, timing and metadata are kept.

        With ``job.resume`` the video is encoded in segments kept in a work directory beside
        ``output``; a later job with ``resume`` continues after the last finished one. Raises
        ``InputError``, ``OutputError``, ``UsageError`` or ``WeightsError`` (one-line messages)
        before any output exists when something cannot work. ``on_frame(frames, faces)`` hears
        every frame written; without it the engine shows a progress bar of its own (if asked to).
        """
        job = job or JobOptions()
        input, output = Path(input), Path(output)
        check_paths(input, output, job.overwrite, CONTAINERS)
        info = probe(input)
        if self.options.start is not None and info.duration is not None and self.options.start >= info.duration:
            raise InputError(f"--start {self.options.start:g} s is not inside {input.name}, which lasts "
                             f"{info.duration:.3f} s")
        if info.truncated:
            if not self.options.allow_truncated:
                raise InputError(f"{info.truncated}; pass --allow-truncated to restore what is there")
            log.warning("%s; restoring every frame that decodes", info.truncated)
        container = open_input(input)
        report = DecodeReport(info.truncated)  # the cut found in the file's index, if any
        try:
            writer: VideoWriter | SegmentedWriter = VideoWriter(output, container, info, self.options, job.overwrite)
            try:
                # After the writer, which checks the encoder settings: a wrong option must not cost
                # a download. Before --resume's work directory, which a failed download must not leave.
                workers = self.workers(info.frames)
                start_frame = 0
                if job.resume:
                    stat = input.stat()
                    fingerprint = {"input": str(input.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                                   "segment_frames": job.segment_frames, "options": self.options.fingerprint()}
                    writer = SegmentedWriter(writer, SegmentStore(work_dir_for(output), fingerprint), input,
                                             job.segment_frames)
                    start_frame = writer.first_frame
            except BaseException:
                writer.abort()
                raise

            def source(streams: set[int]) -> Iterator[SourceFrame | av.Packet]:
                return demux(container, streams, self.options.allow_truncated, report)

            summary = self._run(source, writer, workers, job, on_frame, info.frames, info.height, info.width,
                                FaceTracker(smooth=self.options.smooth), start_frame, info.fields, info.fps)
        finally:
            container.close()
        summary.resumed_at, summary.truncated = start_frame, report.truncated
        return summary

    def restore_image(self, input: str | Path, output: str | Path, job: JobOptions | None = None,
                      on_frame: FrameCallback | None = None) -> Summary:
        """Restore the faces of one photo (EXIF orientation honoured) into another image file: a
        one-picture job on the same pipeline, without smoothing (there is no time to smooth over)."""
        job = job or JobOptions()
        input, output = Path(input), Path(output)
        if self.options.time_range is not None:
            raise UsageError(f"--start and --end apply to videos; {input.name} is an image")
        check_paths(input, output, job.overwrite, IMAGE_EXTENSIONS)
        picture = read_image(input)
        writer = ImageWriter(output, job.overwrite)
        try:
            workers = self.workers(1)
        except BaseException:
            writer.abort()
            raise
        height, width = picture.frame.height, picture.frame.width
        return self._run(photo_source(picture), writer, workers, job, on_frame, 1, height, width,
                         FaceTracker(smooth=0))

    def _run(self, source: FrameSource, writer: Writer, workers: list[DeviceWorker], job: JobOptions,
             on_frame: FrameCallback | None, frames: int | None, height: int, width: int, tracker: FaceTracker,
             start_frame: int = 0, fields: FieldOrder | None = None, fps: float = 25.0) -> Summary:
        """One job through the pipeline, with its progress and tracks file; ``writer`` is aborted
        on any failure, so nothing is left at OUTPUT."""
        tracks = None
        lowered = [w.out_of_memory for w in workers]
        try:
            # Never more frames to a batch than the job has: a photo's detection runs on one frame.
            batch_frames = min(frames_per_batch(self.options.batch_size, width * height),
                               frames or self.options.batch_size)
            tracks = TracksWriter(Path(job.tracks_out)) if job.tracks_out else None
            bar = tqdm(total=frames, initial=start_frame, unit="frame",
                       disable=not self.progress or on_frame is not None, dynamic_ncols=True)
            faces = [0]

            def count(done: int, found: int) -> None:
                faces[0] += found
                bar.update(done)
                bar.set_postfix(faces=faces[0], refresh=False)
                if on_frame is not None:
                    on_frame(done, found)

            span = None
            if self.options.time_range is not None:  # tracked twice the tracker's context around it
                span = TimeRange(*self.options.time_range, margin=2 * tracker.context / fps)
            running = Job(source, writer, self._pool, tracker, batch_frames, height, width, tracks=tracks,
                          on_frame=count, start_frame=start_frame, fields=fields, fps=fps, span=span)
            with self._jobs_lock:
                if self._interrupted:
                    raise KeyboardInterrupt
                self._jobs.add(running)
            try:
                result = running.run()
            finally:
                with self._jobs_lock:
                    self._jobs.discard(running)
                bar.close()
        except BaseException:
            writer.abort()
            if tracks is not None:
                tracks.abort()
            raise
        memory = [f"{w.device}: out of memory {w.out_of_memory - before} time(s), GPEN batch lowered to {w.face_batch}"
                  for w, before in zip(workers, lowered) if w.out_of_memory > before]
        return Summary(writer.output, result.frames, result.faces, result.frames_with_faces, result.seconds,
                       result.busy, writer.warnings + memory, result.damaged, startup=self._take_startup(),
                       first_frame_at=result.first_frame_at)
