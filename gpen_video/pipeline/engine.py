"""The engine: the weights and one worker per device, loaded and compiled once, then any number
of jobs (videos and images), each with its own output, one after another or several at once on
the same workers; one job's failure leaves the engine ready for the others. Every check a job
makes comes before any work, and before the engine's first (slow) start: a wrong option never
costs a download or a compile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import av

from ..errors import UsageError
from ..faces.select import TrackSurvey
from ..faces.track import FaceTracker
from ..faces.tracks_file import TracksWriter
from ..media.containers import CONTAINERS
from ..media.frames import SourceFrame
from ..media.images import IMAGE_EXTENSIONS, ImageWriter, photo_source, read_image
from ..media.segments import SegmentedWriter, SegmentUnit
from ..media.video_input import VideoInput
from ..media.writer import VideoWriter
from ..options import JobOptions, RestoreOptions
from .batching import Pictures
from .choose import choose_tracks
from .flicker import CheckedWriter, FlickerCheck
from .interfaces import FaceLog, FrameSource, NoOutput
from .paths import check_paths, segment_store
from .preview import preview
from .runner import FrameCallback, Pass, Runner
from .scheduler import WorkerPool
from .summary import Summary
from .workers import Workers


class Engine:
    """Restores any number of videos and images with one set of options. The weights load and the
    workers are built (and compiled) on the first job, once it has passed its checks. Jobs may run
    from several threads at once; they share the workers. Close it (or use ``with``) to stop the
    workers' threads."""

    def __init__(self, options: RestoreOptions | None = None, progress: bool = True) -> None:
        self.options = options or RestoreOptions()
        self.progress = progress
        self.devices = self.options.devices()  # a missing GPU is an error before anything loads
        # NVDEC decodes on the first GPU the workers use, when they are threads of this process.
        gpus = [int(d.split(":")[1]) for d in self.devices if d.startswith("cuda:") and self.options.worker == "thread"]
        self.decoding_gpu = gpus[0] if gpus else None
        self.workers = Workers(self.options, self.devices, progress)
        self.runner = Runner(self.options, self.workers, progress)
        #: Frames of all the work planned (a batch's), which ``--compile auto`` decides on; None: the first job's.
        self.planned_frames: int | None = None

    def pool(self, frames: int | None, restoring: bool = True, pictures: Pictures | None = None) -> WorkerPool:
        """The workers (see :meth:`Workers.pool`), compiled or not for the planned work, else ``frames``."""
        return self.workers.pool(self.planned_frames if self.planned_frames is not None else frames, restoring,
                                 pictures)

    def parallel_jobs(self, requested: int) -> int:
        """Files a batch runs at once on this engine: as many as asked (``--jobs``); they share the workers."""
        return requested

    def check(self, inputs: list[Path], output_dir: Path) -> None:
        """Nothing to check before a batch here: this machine's paths are the ones given."""

    def close(self) -> None:
        """Stop the workers' threads (once no job runs). The engine cannot run jobs after this."""
        self.workers.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def interrupt(self) -> None:
        """Stop every running job as Ctrl-C would, and any that starts later: each raises
        KeyboardInterrupt and leaves no output."""
        self.workers.interrupt()

    def restore(self, input: str | Path, output: str | Path | None, job: JobOptions | None = None,
                on_frame: FrameCallback | None = None, whole_photos: bool = False) -> Summary:
        """Restore ``input`` (a video, or an image by its extension) into ``output``; with
        ``job.detect_only``, find its faces instead (``output`` None; see :meth:`find_faces`).
        With ``whole_photos`` (a batch's files), a photo is restored whole whatever the time range,
        which then applies to the videos; else a time range on a photo is an error."""
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
            return self.restore_image(input, output, job, on_frame, whole=whole_photos)
        return self.restore_video(input, output, job, on_frame)

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
        video = VideoInput.for_job(input, self.options, self.decoding_gpu)
        with video.open() as container, \
                VideoWriter(output, container, video.info, self.options, job.overwrite) as encoder:
            pictures = Pictures.of_video(video.info, self.options.smooth)
            # After the writer, which checks the encoder settings: a wrong option must not cost
            # a download. Before --resume's work directory, which a failed download must not leave.
            self.pool(pictures.frames, pictures=pictures)
            with video.own_pass() as first_pass:
                chosen, choice, _ = choose_tracks(self.runner, input.name, first_pass, pictures, on_frame)
            writer: VideoWriter | SegmentedWriter | CheckedWriter = encoder
            start_frame = 0
            if job.resume:
                store = segment_store(input, output, job, self.options)
                writer = SegmentedWriter(encoder, store, input, job.segment_frames)
                start_frame = writer.first_frame
            check = FlickerCheck() if job.qc and pictures.fields is None else None
            logs = self._tracks_file(job, check)
            if check is not None:
                writer, logs = CheckedWriter(writer, check), (*logs, check)

            def source(streams: set[int]) -> Iterator[SourceFrame | av.Packet]:
                return video.frames(container, streams)

            summary = self.runner.run(Pass(source, writer, pictures, logs, start_frame, chosen=chosen), on_frame)
        summary.resumed_at, summary.truncated, summary.choice = start_frame, video.report.truncated, choice
        summary.chosen = sorted(chosen) if chosen is not None else None
        summary.decoder = video.describe()
        if check is not None:
            summary.flicker = check.tracks
        elif job.qc:
            summary.warnings.append(f"--qc measures progressive video; {input.name} is interlaced, so its flicker "
                                    f"was not measured")
        return summary

    def restore_segment(self, input: str | Path, output: str | Path, job: JobOptions, unit: SegmentUnit,
                        on_frame: FrameCallback | None = None) -> Summary:
        """One segment of a long video, a unit of a cluster's job: its frames restored and encoded
        into the work directory beside ``output``, where the driver assembles OUTPUT once every
        segment is there. Decoding starts at the unit's key frame and runs the tracker's lookahead
        past its end, so its frames come out as in a run over the whole video."""
        input, output = Path(input), Path(output)
        video = VideoInput.for_job(input, self.options, self.decoding_gpu)
        store = segment_store(input, output, job, self.options)
        # The encoder's settings come from a writer of the output's kind, whose file is thrown away.
        with video.open() as container, \
                VideoWriter(store.directory / f"unit-{unit.segment:06d}{output.suffix}", container, video.info,
                            self.options, overwrite=True) as scratch:
            writer = SegmentedWriter(scratch, store, input, job.segment_frames, unit=unit.segment)
            pictures = Pictures.of_video(video.info, self.options.smooth)
            self.pool(pictures.frames, pictures=pictures)
            tracker = FaceTracker(smooth=self.options.smooth)
            end = unit.stop + tracker.context  # the frames after the unit that its last frames need

            def source(streams: set[int]) -> Iterator[SourceFrame | av.Packet]:
                return video.frames(container, streams, unit.seek, end)

            summary = self.runner.run(Pass(source, writer, pictures, start_frame=unit.start,
                                           stop_frame=unit.stop, tracker=tracker), on_frame)
        summary.decoder = video.describe()
        return summary

    def restore_image(self, input: str | Path, output: str | Path, job: JobOptions | None = None,
                      on_frame: FrameCallback | None = None, whole: bool = False) -> Summary:
        """Restore the faces of one photo (EXIF orientation honoured) into another image file: a
        one-picture job on the same pipeline, without smoothing (there is no time to smooth over).
        A time range is an error, unless ``whole`` says to restore the photo whole anyway."""
        job = job or JobOptions()
        input, output = Path(input), Path(output)
        if not whole:
            self._refuse_range(input)
        check_paths(input, output, job.overwrite, IMAGE_EXTENSIONS)
        photo = read_image(input)
        with ImageWriter(output, job.overwrite, traits=photo.traits, strict=self.options.strict) as writer:
            pictures = Pictures(1, photo.frame.height, photo.frame.width, smooth=0)
            self.pool(1, pictures=pictures)
            chosen, choice, _ = choose_tracks(self.runner, input.name, photo_source(photo.picture()), pictures,
                                              on_frame)
            summary = self.runner.run(Pass(photo_source(photo.picture()), writer, pictures, self._tracks_file(job),
                                           chosen=chosen, ranged=False), on_frame)
        summary.choice, summary.chosen = choice, sorted(chosen) if chosen is not None else None
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
            self.pool(1, restoring=False, pictures=pictures)
            return self._find(photo_source(photo.picture()), input, tracks_out, on_frame, pictures)
        video = VideoInput.for_job(input, self.options, self.decoding_gpu)
        pictures = Pictures.of_video(video.info, self.options.smooth)
        self.pool(pictures.frames, restoring=False, pictures=pictures)
        with video.own_pass() as source:
            summary = self._find(source, input, tracks_out, on_frame, pictures)
        summary.decoder = video.describe()
        return summary

    def _find(self, source: FrameSource, input: Path, tracks_out: Path | None, on_frame: FrameCallback | None,
              pictures: Pictures) -> Summary:
        survey = TrackSurvey(self.options.faces, pictures.height, pictures.width)
        logs = (survey,) if tracks_out is None else (survey, TracksWriter(tracks_out))
        summary = self.runner.run(Pass(source, NoOutput(tracks_out or input), pictures, logs, restore=False),
                                  on_frame)
        summary.tracks_found = survey
        return summary

    def preview(self, input: str | Path, output: str | Path, panels: int, overwrite: bool = False,
                on_frame: FrameCallback | None = None) -> Summary:
        """``--preview``: ``output``, a contact sheet of ``panels`` frames evenly spaced over the
        video (over ``--start``/``--end`` if given), each decoded beside restored, its faces boxed
        (see :mod:`.preview`)."""
        input, output = Path(input), Path(output)
        if input.suffix.lower() in IMAGE_EXTENSIONS:
            raise UsageError(f"--preview samples the frames of a video; {input.name} is an image")
        check_paths(input, output, overwrite, IMAGE_EXTENSIONS)
        video = VideoInput.for_job(input, self.options, self.decoding_gpu)
        with ImageWriter(output, overwrite) as writer:
            self.pool(panels)
            return preview(self.runner, video, writer, panels, on_frame)

    def _refuse_range(self, input: Path) -> None:
        if self.options.time_range is not None:
            raise UsageError(f"--start and --end apply to videos; {input.name} is an image")

    @staticmethod
    def _tracks_file(job: JobOptions, check: FlickerCheck | None = None) -> tuple[FaceLog, ...]:
        """The tracks file's log, if asked for; with ``check``, it ends with each track's flicker."""
        if not job.tracks_out:
            return ()
        return (TracksWriter(Path(job.tracks_out), check.figures if check is not None else None),)
