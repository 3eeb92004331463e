"""A job as a plan: plain data, made here from (input, output, options), that says what is read,
which pictures are detected, tracked and restored, where they go, and whether a first pass over
the whole clip chooses the tracks before. Every kind of job is a plan: a render, a render in
segments (``--resume``) or of one segment (a cluster's unit), a photo, ``--detect-only`` and
``--preview``. Every check a job makes before any work is made here, so a wrong option never
costs a download or a compile. :class:`~.runner.Runner` executes any plan."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import UsageError
from ..faces.detect import Detections
from ..faces.select import KnownTracks
from ..faces.track import FaceTracker
from ..media.containers import CONTAINERS
from ..media.demux import SeekPoint
from ..media.images import IMAGE_EXTENSIONS, Photo, read_image
from ..media.outputs import check_paths
from ..media.probe import Pictures, VideoInfo
from ..media.segments import SegmentUnit
from ..media.video_input import VideoInput
from ..options import JobOptions, RestoreOptions
from .interfaces import FaceLog, FrameSource, Writer


@dataclass(frozen=True)
class Output:
    """Where a plan's pictures go, by ``kind``: ``video`` (OUTPUT, encoded), ``image`` (a photo's
    OUTPUT), ``sheet`` (``--preview``'s contact sheet of the frames at ``times``, seconds of the
    stream's clock) or ``nothing`` (``--detect-only``, or the pass that chooses the tracks, which
    keeps a sheet's frames at ``times``; ``path`` names the job in its summary). A
    video with ``resume`` is encoded in segments of ``segment_frames`` kept beside OUTPUT; with
    ``unit``, the segment of that index only, for a cluster's driver to assemble."""

    kind: Literal["video", "image", "sheet", "nothing"]
    path: Path
    overwrite: bool = False
    resume: bool = False
    segment_frames: int = 0
    unit: int | None = None
    times: tuple[float, ...] = ()


@dataclass(frozen=True)
class Frames:
    """Which of a video's frames a plan decodes: from the key frame ``seek`` (None: the first) to
    before frame ``end`` (None: the last); and which it writes: from ``start`` to before ``stop``
    (None: the last). A cluster's unit decodes from a key frame before its first frame and on past
    its last, so that tracks and smoothing reach both as in a run over the whole video."""

    seek: SeekPoint | None = None
    end: int | None = None
    start: int = 0
    stop: int | None = None


@dataclass(frozen=True)
class Plan:
    """One job: ``reads`` (a video, probed and checked, or a photo) into ``output``, its faces
    tracked with ``smooth`` (none for a photo) and restored where ``restore`` (else only found:
    the summary lists the tracks), within the options' time range where ``ranged``; ``frames``
    says which frames are decoded and written (a resumed job writes from its first unfinished
    segment, which only the work directory knows when the job runs). ``first``, where
    ``--faces`` or ``--tracks`` choose the tracks, is the plan of the pass over the whole clip that
    finds them before. ``tracks_out`` gets the tracks file; ``qc`` measures each track's flicker;
    ``recording`` gets every picture's detections. ``options`` are the job's own: an engine
    runs jobs of other options than its own, within what its workers keep (``ENGINE_FIELDS``)."""

    reads: VideoInput | Photo
    output: Output
    options: RestoreOptions
    smooth: float
    first: Plan | None = None
    frames: Frames = Frames()
    restore: bool = True
    ranged: bool = True
    tracks_out: Path | None = None
    qc: bool = False
    recording: list[Detections] | None = None

    @staticmethod
    def for_job(input: str | Path, output: str | Path | None, job: JobOptions, options: RestoreOptions,
                gpu: int | None, whole_photos: bool = False) -> Plan:
        """The plan ``job`` asks for: ``--detect-only`` (``output`` None), ``--preview``, a photo
        (by its extension) or a video. With ``whole_photos`` (a batch's files), a photo is restored
        whole whatever the time range, which then applies to the videos."""
        if job.detect_only:
            if output is not None:
                raise UsageError("--detect-only writes no video: give INPUT alone (and --tracks-out), no OUTPUT")
            return Plan.for_find(input, job.tracks_out, options, gpu)
        if output is None:
            raise UsageError("give an OUTPUT to write (or --detect-only)")
        if job.preview is not None:
            return Plan.for_sheet(input, output, job.preview, job.overwrite, options, gpu)
        if Path(input).suffix.lower() in IMAGE_EXTENSIONS:
            return Plan.for_photo(input, output, job, options, whole=whole_photos)
        return Plan.for_video(input, output, job, options, gpu)

    @staticmethod
    def for_video(input: str | Path, output: str | Path, job: JobOptions, options: RestoreOptions,
                  gpu: int | None) -> Plan:
        """Every face of a video (those chosen, with ``--faces`` or ``--tracks``) restored into
        OUTPUT; with ``job.resume``, in segments that a later job continues after the last
        finished."""
        input, output = Path(input), Path(output)
        check_paths(input, output, job.overwrite, CONTAINERS)
        video = VideoInput.for_job(input, options, gpu)
        return Plan(video, Output("video", output, job.overwrite, job.resume, job.segment_frames), options,
                    options.smooth, _choosing(video, options.smooth, options), tracks_out=job.tracks_out, qc=job.qc)

    @staticmethod
    def for_segment(input: str | Path, output: str | Path, job: JobOptions, unit: SegmentUnit,
                    options: RestoreOptions, gpu: int | None) -> Plan:
        """One segment of a long video, a unit of a cluster's job, into the work directory
        beside OUTPUT (a cluster splits no job that chooses tracks)."""
        frames = Frames(unit.seek, unit.stop + FaceTracker(smooth=options.smooth).context, unit.start, unit.stop)
        return Plan(VideoInput.for_job(Path(input), options, gpu),
                    Output("video", Path(output), segment_frames=job.segment_frames, unit=unit.segment),
                    options, options.smooth, frames=frames)

    @staticmethod
    def for_photo(input: str | Path, output: str | Path, job: JobOptions, options: RestoreOptions,
                  whole: bool = False) -> Plan:
        """The faces of one photo (EXIF orientation honoured) restored into another image file,
        without smoothing (there is no time to smooth over). A time range is an error, unless
        ``whole``."""
        input, output = Path(input), Path(output)
        if not whole:
            _refuse_range(input, options)
        check_paths(input, output, job.overwrite, IMAGE_EXTENSIONS)
        photo = read_image(input)
        return Plan(photo, Output("image", output, job.overwrite), options, 0.0,
                    _choosing(photo, 0.0, options, ranged=False), ranged=False, tracks_out=job.tracks_out)

    @staticmethod
    def for_find(input: str | Path, tracks_out: str | Path | None, options: RestoreOptions,
                 gpu: int | None, recording: list[Detections] | None = None) -> Plan:
        """``--detect-only``: the faces of a video or photo detected and tracked, without GPEN
        and without writing a picture; ``tracks_out`` (if given) gets the tracks file, and
        ``recording`` (if given) every picture's detections, to track again."""
        input = Path(input)
        tracks_out = Path(tracks_out) if tracks_out is not None else None
        if tracks_out is not None and not tracks_out.resolve().parent.is_dir():
            raise UsageError(f"--tracks-out: directory does not exist: {tracks_out.resolve().parent}")
        output = Output("nothing", tracks_out or input)
        if input.suffix.lower() in IMAGE_EXTENSIONS:
            _refuse_range(input, options)
            return Plan(read_image(input), output, options, 0.0, restore=False, ranged=False, tracks_out=tracks_out,
                        recording=recording)
        return Plan(VideoInput.for_job(input, options, gpu), output, options, options.smooth, restore=False,
                    tracks_out=tracks_out, recording=recording)

    @staticmethod
    def for_sheet(input: str | Path, output: str | Path, panels: int, overwrite: bool,
                  options: RestoreOptions, gpu: int | None) -> Plan:
        """``--preview``: a contact sheet of ``panels`` frames evenly spaced over the video
        (over ``--start``/``--end`` if given), each decoded beside restored, its faces boxed."""
        input, output = Path(input), Path(output)
        if input.suffix.lower() in IMAGE_EXTENSIONS:
            raise UsageError(f"--preview samples the frames of a video; {input.name} is an image")
        check_paths(input, output, overwrite, IMAGE_EXTENSIONS)
        video = VideoInput.for_job(input, options, gpu)
        times = preview_times(video.info, options.time_range, panels)
        return Plan(video, Output("sheet", output, overwrite, times=times), options, options.smooth,
                    _choosing(video, options.smooth, options, times=times))


@dataclass(frozen=True)
class Pass:
    """One pass over a plan's pictures, as the runner makes it: from ``source`` to ``writer``,
    tracked by ``tracker``, ``logs`` hearing every tracked picture. Frames from ``start_frame`` up
    to ``stop_frame`` (None: the end) are written; the faces of the ``chosen`` tracks (None: all)
    are restored where ``restore``, within the options' time range where ``ranged``."""

    source: FrameSource
    writer: Writer
    pictures: Pictures
    tracker: FaceTracker | KnownTracks
    logs: tuple[FaceLog, ...] = ()
    start_frame: int = 0
    stop_frame: int | None = None
    chosen: frozenset[int] | None = None
    restore: bool = True
    ranged: bool = True


def preview_times(info: VideoInfo, time_range: tuple[float, float | None] | None, panels: int) -> tuple[float, ...]:
    """The times (seconds of the stream's clock) of ``panels`` frames spread evenly over the
    video, or over the time range (counted from the first frame): the middles of equal parts."""
    length = info.duration if info.duration is not None else (info.frames or 1) / info.fps
    start, end = time_range if time_range is not None else (0.0, None)
    end = min(end, length) if end is not None else length
    return tuple(info.first_time + start + (k + 0.5) * (end - start) / panels for k in range(panels))


def _choosing(reads: VideoInput | Photo, smooth: float, options: RestoreOptions, ranged: bool = True,
              times: tuple[float, ...] = ()) -> Plan | None:
    """The pass that chooses the tracks (see :mod:`.choose`), where ``--faces`` or ``--tracks``
    choose: it detects and tracks the whole clip, restoring nothing, and keeps the frames at
    ``times`` (a sheet's)."""
    if not options.selects:
        return None
    return Plan(reads, Output("nothing", reads.path, times=times), options, smooth, restore=False, ranged=ranged)


def _refuse_range(input: Path, options: RestoreOptions) -> None:
    if options.time_range is not None:
        raise UsageError(f"--start and --end apply to videos; {input.name} is an image")
