"""The engine: the weights and one worker per device, loaded and compiled once, then any number
of jobs (videos and images), each with its own output, one after another or several at once on
the same workers; one job's failure leaves the engine ready for the others. Every check a job
makes comes before any work, and before the engine's first (slow) start: a wrong option never
costs a download or a compile."""

from __future__ import annotations

from pathlib import Path

from ..faces.detect import Detections
from ..faces.track import TrackedFrame
from ..media.images import IMAGE_EXTENSIONS, read_image
from ..media.segments import SegmentUnit
from ..media.sheet import Panel
from ..media.video_input import VideoInput
from ..options import JobOptions, RestoreOptions, job_options
from .plan import Plan
from .preview import still
from .runner import FrameCallback, Runner
from .summary import Summary
from .workers import Workers


class Engine:
    """Restores any number of videos and images with one set of options. The weights load and the
    workers are built (and compiled) on the first job, once it has passed its checks. Jobs may run
    from several threads at once; they share the workers. Each job may bring options of its own
    (``options``), which may differ from the engine's in all but what its workers keep
    (:data:`~gpen_video.options.ENGINE_FIELDS`). Close it (or use ``with``) to stop the workers'
    threads."""

    def __init__(self, options: RestoreOptions | None = None, progress: bool = True) -> None:
        self.options = options or RestoreOptions()
        self.progress = progress
        self.devices = self.options.devices()  # a missing GPU is an error before anything loads
        # NVDEC decodes on the first GPU the workers use, when they are threads of this process.
        gpus = [int(d.split(":")[1]) for d in self.devices if d.startswith("cuda:") and self.options.worker == "thread"]
        self.decoding_gpu = gpus[0] if gpus else None
        self.workers = Workers(self.options, self.devices, progress)
        self.runner = Runner(self.workers, progress)

    @property
    def planned_frames(self) -> int | None:
        """Frames of all the work planned (a batch's), which ``--compile auto`` decides on; None: the first job's."""
        return self.workers.planned_frames

    @planned_frames.setter
    def planned_frames(self, frames: int | None) -> None:
        self.workers.planned_frames = frames

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
                on_frame: FrameCallback | None = None, whole_photos: bool = False,
                options: RestoreOptions | None = None) -> Summary:
        """Restore ``input`` (a video, or an image by its extension) into ``output``; with
        ``job.detect_only``, find its faces instead (``output`` None; see :meth:`find_faces`); with
        ``job.preview``, write its contact sheet (see :meth:`preview`). With ``whole_photos`` (a
        batch's files), a photo is restored whole whatever the time range, which then applies to
        the videos; else a time range on a photo is an error."""
        plan = Plan.for_job(input, output, job or JobOptions(), job_options(self.options, options), self.decoding_gpu,
                            whole_photos)
        return self.runner.execute(plan, on_frame)

    def restore_video(self, input: str | Path, output: str | Path, job: JobOptions | None = None,
                      on_frame: FrameCallback | None = None, options: RestoreOptions | None = None) -> Summary:
        """Restore every face in ``input`` (those chosen, with ``--faces`` or ``--tracks``) and
        write ``output``; audio, timing and metadata are kept.

        With ``job.resume`` the video is encoded in segments kept in a work directory beside
        ``output``; a later job with ``resume`` continues after the last finished one. Raises
        ``InputError``, ``OutputError``, ``UsageError`` or ``WeightsError`` (one-line messages)
        before any output exists when something cannot work. ``on_frame(frames, faces)`` hears
        every frame written; without it the engine shows a progress bar of its own (if asked to).
        """
        plan = Plan.for_video(input, output, job or JobOptions(), job_options(self.options, options), self.decoding_gpu)
        return self.runner.execute(plan, on_frame)

    def restore_segment(self, input: str | Path, output: str | Path, job: JobOptions, unit: SegmentUnit,
                        on_frame: FrameCallback | None = None, options: RestoreOptions | None = None) -> Summary:
        """One segment of a long video, a unit of a cluster's job: its frames restored and encoded
        into the work directory beside ``output``, where the driver assembles OUTPUT once every
        segment is there. Decoding starts at the unit's key frame and runs the tracker's lookahead
        past its end, so its frames come out as in a run over the whole video."""
        plan = Plan.for_segment(input, output, job, unit, job_options(self.options, options), self.decoding_gpu)
        return self.runner.execute(plan, on_frame)

    def restore_image(self, input: str | Path, output: str | Path, job: JobOptions | None = None,
                      on_frame: FrameCallback | None = None, whole: bool = False,
                      options: RestoreOptions | None = None) -> Summary:
        """Restore the faces of one photo (EXIF orientation honoured) into another image file: a
        one-picture job on the same pipeline, without smoothing (there is no time to smooth over).
        A time range is an error, unless ``whole`` says to restore the photo whole anyway."""
        plan = Plan.for_photo(input, output, job or JobOptions(), job_options(self.options, options), whole)
        return self.runner.execute(plan, on_frame)

    def find_faces(self, input: str | Path, tracks_out: str | Path | None = None,
                   on_frame: FrameCallback | None = None, options: RestoreOptions | None = None,
                   recording: list[Detections] | None = None) -> Summary:
        """``--detect-only``: detect and track the faces of ``input`` (a video or photo), without
        GPEN and without writing a picture; the summary's ``tracks_found`` lists the tracks, and
        ``tracks_out`` (if given) gets the tracks file. The track ids are those a restoration with
        the same detection options numbers (``--tracks`` takes them). ``recording`` (if given)
        gets every picture's detections, which ``FaceTracker.replay`` tracks again with any
        smoothing."""
        plan = Plan.for_find(input, tracks_out, job_options(self.options, options), self.decoding_gpu, recording)
        return self.runner.execute(plan, on_frame)

    def still(self, input: str | Path, time: float, tracked: list[TrackedFrame] | None = None,
              chosen: frozenset[int] | None = None, options: RestoreOptions | None = None) -> Panel:
        """The frame of ``input`` at ``time`` (seconds of a video's clock; the first frame at or
        after it), or the photo ``input``, decoded beside restored, in seconds: the desk's
        preview. ``tracked`` (a clip's
        frames as ``FaceTracker.replay`` tracks its recorded detections) gives the frame its
        faces as a render of the whole clip tracks and smooths them, with its track ids; without
        it they are detected on the frame alone. The ``chosen`` tracks (None: all) are restored."""
        options = job_options(self.options, options)
        input = Path(input)
        reads = (read_image(input) if input.suffix.lower() in IMAGE_EXTENSIONS
                 else VideoInput.for_job(input, options, self.decoding_gpu))
        known = {frame.time: frame for frame in tracked} if tracked is not None else None
        return still(reads, time, known, chosen, lambda one: self.runner.run(one, options, lambda done, found: None))

    def preview(self, input: str | Path, output: str | Path, panels: int, overwrite: bool = False,
                on_frame: FrameCallback | None = None, options: RestoreOptions | None = None) -> Summary:
        """``--preview``: ``output``, a contact sheet of ``panels`` frames evenly spaced over the
        video (over ``--start``/``--end`` if given), each decoded beside restored, its faces boxed
        (see :mod:`.preview`)."""
        plan = Plan.for_sheet(input, output, panels, overwrite, job_options(self.options, options), self.decoding_gpu)
        return self.runner.execute(plan, on_frame)
