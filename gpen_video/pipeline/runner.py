"""Executes any plan (:mod:`.plan`): opens what it reads and where it writes, readies the
workers, executes the plan of the first pass that chooses the tracks where it has one, then runs
the pass that writes (or a sheet's one pass per frame), each a :class:`~.job.Job` on the engine's workers with its
progress bar, and gathers their outcome into a :class:`~.summary.Summary`. Whatever fails,
nothing is left at OUTPUT."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator

from ..faces.select import TrackSurvey
from ..faces.track import FaceTracker
from ..faces.tracks_file import TracksWriter
from ..media.images import ImageWriter, Photo
from ..media.segments import SegmentedWriter, SegmentStore
from ..media.writer import VideoWriter
from ..options import RestoreOptions
from ..progress import progress_bar
from ..worker.messages import Paste
from .batching import TimeRange, batch_frames
from .choose import choose_tracks
from .flicker import CheckedWriter, FlickerCheck
from .interfaces import FaceLog, NoOutput, Writer
from .job import Job
from .plan import Pass, Plan
from .preview import sheet
from .summary import Summary
from .workers import Workers

FrameCallback = Callable[[int, int], None]  # (frames written, faces restored on them)


class Runner:
    """Runs plans on ``workers``, each with its own options; a progress bar for each pass if ``progress``."""

    def __init__(self, workers: Workers, progress: bool) -> None:
        self.workers = workers
        self.progress = progress

    def execute(self, plan: Plan, on_frame: FrameCallback | None = None) -> Summary:
        """``plan`` from start to end. ``on_frame(frames, faces)`` hears every frame written, in
        place of the progress bar."""
        reads, output = plan.reads, plan.output
        with reads.open() as opened, self._writer(plan, opened) as writer:
            # After the writer, which checks the encoder settings: a wrong option must not cost a download.
            if output.kind == "sheet":
                self.workers.pool(len(output.times), plan.options)
            else:
                self.workers.pool(reads.pictures.frames, plan.options, plan.restore, reads.pictures)
            started = time.perf_counter()
            chosen, choice, survey, startup = None, "", None, {}
            if plan.first is not None:  # a batch's bar counts the render, not the first pass
                found = self.execute(plan.first, (lambda frames, faces: None) if on_frame is not None else None)
                survey, startup = found.tracks_found, found.startup
                assert survey is not None  # what a plan that restores nothing reports
                chosen, choice = choose_tracks(plan.options, reads.path.name, survey, found.seconds)
            if output.kind != "sheet":
                summary = self._render(plan, opened, writer, chosen, on_frame)
            else:
                summary = sheet(plan, writer, chosen, survey,
                                lambda one: self.run(one, plan.options, lambda done, found: None), started)
        summary.choice, summary.chosen = choice, sorted(chosen) if chosen is not None else None
        summary.startup = startup | summary.startup  # the workers' start, in whichever pass it fell
        return summary

    @contextlib.contextmanager
    def _writer(self, plan: Plan, opened: object) -> Iterator[Writer]:
        """Where the plan's pictures go, opened (its checks made) and aborted if the block fails."""
        output, reads, options = plan.output, plan.reads, plan.options
        if output.kind == "nothing":
            yield NoOutput(output.path)
        elif output.kind != "video":
            traits = reads.traits if isinstance(reads, Photo) else None
            with ImageWriter(output.path, output.overwrite, traits, options.strict) as image:
                yield image
        elif output.unit is None:
            with VideoWriter(output.path, opened, reads.info, options, output.overwrite) as encoder:
                yield encoder
        else:  # one segment, into the work directory; the encoder's settings come from a writer of
            # the output's kind, whose file is thrown away
            store = SegmentStore.for_job(reads.path, output.path, output.segment_frames, options.fingerprint())
            with VideoWriter(store.directory / f"unit-{output.unit:06d}{output.path.suffix}", opened,
                             reads.info, options, overwrite=True) as scratch:
                yield SegmentedWriter(scratch, store, reads.path, output.segment_frames, unit=output.unit)

    def _render(self, plan: Plan, opened: object, writer: Writer, chosen: frozenset[int] | None,
                on_frame: FrameCallback | None) -> Summary:
        """The pass that writes: the plan's frames (a resumed job's from its first unfinished
        segment) from ``opened`` into ``writer``, with the logs the plan asks for."""
        reads, output, frames, options = plan.reads, plan.output, plan.frames, plan.options
        start = frames.start
        if output.resume:
            store = SegmentStore.for_job(reads.path, output.path, output.segment_frames, options.fingerprint())
            writer = SegmentedWriter(writer, store, reads.path, output.segment_frames)
            start = writer.first_frame
        check = FlickerCheck() if plan.qc and reads.pictures.fields is None else None
        survey = None if plan.restore else TrackSurvey(options.faces, reads.pictures.height,
                                                       reads.pictures.width, output.times)
        logs: list[FaceLog] = [survey] if survey is not None else []
        if plan.tracks_out is not None:
            logs.append(TracksWriter(plan.tracks_out, check.figures if check is not None else None))
        if check is not None:
            writer, logs = CheckedWriter(writer, check), [*logs, check]

        summary = self.run(Pass(lambda streams: reads.frames(opened, streams, frames.seek, frames.end), writer,
                                reads.pictures, FaceTracker(smooth=plan.smooth, recording=plan.recording),
                                tuple(logs), start, frames.stop, chosen, plan.restore, plan.ranged), options, on_frame)
        summary.resumed_at = start if output.resume else 0
        summary.truncated, summary.decoder, summary.tracks_found = reads.truncated, reads.describe(), survey
        if check is not None:
            summary.flicker = check.tracks
        elif plan.qc:
            summary.warnings.append(f"--qc measures progressive video; {reads.path.name} is interlaced, so its "
                                    f"flicker was not measured")
        return summary

    def run(self, pass_: Pass, options: RestoreOptions, on_frame: FrameCallback | None) -> Summary:
        """One pass through the pipeline with the job's ``options``, with its progress; its logs are
        aborted on any failure, and its writer by the caller's ``with`` (or by the job), so nothing
        is left at OUTPUT.
        ``on_frame(frames, faces)`` hears every frame written, in place of the progress bar."""
        pictures, frames = pass_.pictures, pass_.pictures.frames
        pool = self.workers.pool(frames, options, restoring=pass_.restore)
        lowered = [w.out_of_memory for w in pool.workers]
        try:
            bar = progress_bar("restoring" if pass_.restore else "finding faces", total=frames,
                               initial=pass_.start_frame, unit="frame",
                               disable=not self.progress or on_frame is not None)
            faces = [0]

            def count(done: int, found: int) -> None:
                faces[0] += found
                if pass_.restore:
                    bar.set_postfix(faces=faces[0], refresh=False)
                bar.update(done)
                if on_frame is not None:
                    on_frame(done, found)

            span = None
            if pass_.ranged and options.time_range is not None:  # tracked twice the tracker's context around it
                margin = 2 * pass_.tracker.context / pictures.fps
                span = TimeRange(*options.time_range, before=math.inf if options.selects else margin,
                                 after=margin)
            job = Job(pass_.source, pass_.writer, pool, pass_.tracker, batch_frames(pictures, options.batch_size),
                      pictures.height, pictures.width, logs=pass_.logs, on_frame=count, start_frame=pass_.start_frame,
                      fields=pictures.fields, fps=pictures.fps, span=span, chosen=pass_.chosen,
                      paste=Paste.of(options) if pass_.restore else None, whole_tracks=options.selects,
                      stop_frame=pass_.stop_frame)
            if pass_.restore:
                self.workers.restoring_begins()
            try:
                with self.workers.running(job):
                    result = job.run()
            finally:
                bar.close()
        except BaseException:
            for log in pass_.logs:
                log.abort()
            raise
        memory = [f"{w.device}: out of memory {w.out_of_memory - before} time(s), GPEN batch lowered to {w.face_batch}"
                  for w, before in zip(pool.workers, lowered) if w.out_of_memory > before]
        memory += [note for w in pool.workers for note in w.take_notes()]
        return Summary(pass_.writer.output, result.frames, result.faces, result.frames_with_faces, result.seconds,
                       result.busy, pass_.writer.warnings + memory, result.damaged,
                       startup=self.workers.take_startup(), milestones=result.milestones)
