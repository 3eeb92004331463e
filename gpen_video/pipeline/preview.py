"""``--preview``: a contact sheet of frames spread over a video, each decoded beside restored,
its faces boxed. Each frame is found by a seek and restored alone, as a photo (an interlaced
frame as its two fields, as a render restores them), so a long clip takes seconds."""

from __future__ import annotations

import time

from ..faces.select import KnownTracks
from ..faces.track import FaceTracker
from ..media.images import ImageWriter, photo_source
from ..media.probe import VideoInfo
from ..media.seek import SeekReport
from ..media.sheet import PanelCapture, contact_sheet
from ..media.video_input import VideoInput
from .batching import Pictures
from .choose import choose_tracks
from .runner import FrameCallback, Pass, Runner
from .summary import Summary


def preview_times(info: VideoInfo, time_range: tuple[float, float | None] | None, panels: int) -> tuple[float, ...]:
    """The times (seconds of the stream's clock) of ``panels`` frames spread evenly over the
    video, or over the time range (counted from the first frame): the middles of equal parts."""
    length = info.duration if info.duration is not None else (info.frames or 1) / info.fps
    start, end = time_range if time_range is not None else (0.0, None)
    end = min(end, length) if end is not None else length
    return tuple(info.first_time + start + (k + 0.5) * (end - start) / panels for k in range(panels))


def preview(runner: Runner, video: VideoInput, writer: ImageWriter, panels: int,
            on_frame: FrameCallback | None) -> Summary:
    """The sheet of ``panels`` frames of ``video`` (over ``--start``/``--end`` if given) into
    ``writer``. With ``--tracks`` or ``--faces``, the first pass a render makes numbers the tracks
    (it reads the whole clip), and the frames are restored and labelled with them."""
    options, info = runner.options, video.info
    times = preview_times(info, options.time_range, panels)
    started = time.perf_counter()
    pictures = Pictures.of_video(info, options.smooth)
    chosen, choice, survey = None, "", None
    if options.selects:
        with video.own_pass() as first_pass:
            chosen, choice, survey = choose_tracks(runner, video.path.name, first_pass, pictures, on_frame, times)
    seek = SeekReport()
    rows = []
    for frame in video.frames_at(list(times), seek):
        capture = PanelCapture(frame, labelled=survey is not None)
        tracker = KnownTracks(survey.kept) if survey is not None else FaceTracker(smooth=0)
        one = Pictures(1, *info.shown, smooth=0, fields=info.fields, fps=info.fps)
        runner.run(Pass(photo_source(frame), capture, one, (capture,), chosen=chosen, tracker=tracker, ranged=False),
                   lambda done, found: None)
        rows.append(capture.panel())
    writer.write_rgb(contact_sheet(rows, f"{video.path.name}: as decoded, faces boxed"))
    writer.close()
    faces = sum(box.restored for row in rows for box in row.boxes)
    return Summary(writer.output, seek.decoded, faces, sum(any(b.restored for b in r.boxes) for r in rows),
                   time.perf_counter() - started, startup=runner.workers.take_startup(), panels=len(rows),
                   choice=choice)
