"""Runs one pass over a job's pictures: the plan of the pass (what is decoded, tracked and
restored, and where it goes) becomes a :class:`~.job.Job` on the engine's workers, with its
progress bar, and its outcome a :class:`~.summary.Summary`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..faces.select import KnownTracks
from ..faces.track import FaceTracker
from ..options import RestoreOptions
from ..progress import progress_bar
from .batching import Pictures, TimeRange
from .interfaces import FaceLog, FrameSource, Writer
from .job import Job
from .summary import Summary
from .workers import Workers

FrameCallback = Callable[[int, int], None]  # (frames written, faces restored on them)


@dataclass(frozen=True)
class Pass:
    """One pass over a job's pictures: from ``source`` to ``writer``, ``logs`` hearing every
    tracked picture. Frames from ``start_frame`` up to ``stop_frame`` (None: the end) are
    written; the faces of the ``chosen`` tracks (None: all) are restored where ``restore``, within
    the options' time range where ``ranged``. ``tracker`` defaults to a new one with the
    pictures' smoothing."""

    source: FrameSource
    writer: Writer
    pictures: Pictures
    logs: tuple[FaceLog, ...] = ()
    start_frame: int = 0
    stop_frame: int | None = None
    chosen: frozenset[int] | None = None
    restore: bool = True
    ranged: bool = True
    tracker: FaceTracker | KnownTracks | None = None


class Runner:
    """Runs passes on ``workers`` with ``options``; a progress bar for each if ``progress``."""

    def __init__(self, options: RestoreOptions, workers: Workers, progress: bool) -> None:
        self.options = options
        self.workers = workers
        self.progress = progress

    def run(self, plan: Pass, on_frame: FrameCallback | None) -> Summary:
        """``plan`` through the pipeline, with its progress; its logs are aborted on any failure,
        and its writer by the caller's ``with`` (or by the job), so nothing is left at OUTPUT.
        ``on_frame(frames, faces)`` hears every frame written, in place of the progress bar."""
        pictures, frames = plan.pictures, plan.pictures.frames
        pool = self.workers.pool(frames, restoring=plan.restore)
        lowered = [w.out_of_memory for w in pool.workers]
        try:
            tracker = plan.tracker or FaceTracker(smooth=pictures.smooth)
            batch_frames = pictures.batch_frames(self.options.batch_size)
            bar = progress_bar("restoring" if plan.restore else "finding faces", total=frames,
                               initial=plan.start_frame, unit="frame",
                               disable=not self.progress or on_frame is not None)
            faces = [0]

            def count(done: int, found: int) -> None:
                faces[0] += found
                if plan.restore:
                    bar.set_postfix(faces=faces[0], refresh=False)
                bar.update(done)
                if on_frame is not None:
                    on_frame(done, found)

            span = None
            if plan.ranged and self.options.time_range is not None:  # tracked twice the tracker's context around it
                margin = 2 * tracker.context / pictures.fps
                span = TimeRange(*self.options.time_range, before=math.inf if self.options.selects else margin,
                                 after=margin)
            job = Job(plan.source, plan.writer, pool, tracker, batch_frames, pictures.height, pictures.width,
                      logs=plan.logs, on_frame=count, start_frame=plan.start_frame, fields=pictures.fields,
                      fps=pictures.fps, span=span, chosen=plan.chosen, restore=plan.restore,
                      whole_tracks=self.options.selects, stop_frame=plan.stop_frame)
            if plan.restore:
                self.workers.restoring_begins()
            try:
                with self.workers.running(job):
                    result = job.run()
            finally:
                bar.close()
        except BaseException:
            for log in plan.logs:
                log.abort()
            raise
        memory = [f"{w.device}: out of memory {w.out_of_memory - before} time(s), GPEN batch lowered to {w.face_batch}"
                  for w, before in zip(pool.workers, lowered) if w.out_of_memory > before]
        memory += [note for w in pool.workers for note in w.take_notes()]
        return Summary(plan.writer.output, result.frames, result.faces, result.frames_with_faces, result.seconds,
                       result.busy, plan.writer.warnings + memory, result.damaged,
                       startup=self.workers.take_startup(), milestones=result.milestones)
