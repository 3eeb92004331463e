"""``--preview``: a contact sheet of frames spread over a video, each decoded beside restored,
its faces boxed. Each frame is found by a seek and restored alone, as a photo (an interlaced
frame as its two fields, as a render restores them), so a long clip takes seconds."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ..faces.select import KnownTracks, TrackSurvey
from ..faces.track import FaceTracker, TrackedFrame
from ..media.frames import SourceFrame
from ..media.images import ImageWriter, Photo, photo_source
from ..media.seek import SeekReport
from ..media.sheet import Panel, PanelCapture, contact_sheet
from ..media.video_input import VideoInput
from .interfaces import Writer
from .plan import Pass, Plan
from .summary import Summary


def sheet(plan: Plan, writer: Writer, chosen: frozenset[int] | None, survey: TrackSurvey | None,
          run: Callable[[Pass], Summary], started: float) -> Summary:
    """The sheet of the frames at the plan's times into ``writer``, each through ``run`` (a pass of
    its own). Where a first pass chose the tracks, ``survey`` (which kept those frames) numbers
    them, and the frames are restored and labelled with them. ``started`` is when the job began."""
    video = plan.reads
    assert isinstance(video, VideoInput) and isinstance(writer, ImageWriter)  # what a sheet's plan reads and writes
    seek = SeekReport()
    rows = []
    startup: dict[str, float] = {}  # where the workers' start went, if in one of the passes
    for frame in video.frames_at(list(plan.output.times), seek):
        panel, summary = _restored_alone(video, frame, survey.kept if survey is not None else None, chosen, run)
        startup |= summary.startup
        rows.append(panel)
    writer.write_rgb(contact_sheet(rows, f"{video.path.name}: as decoded, faces boxed"))
    writer.close()
    faces = sum(box.restored for row in rows for box in row.boxes)
    return Summary(writer.output, seek.decoded, faces, sum(any(b.restored for b in r.boxes) for r in rows),
                   time.perf_counter() - started, startup=startup, panels=len(rows))


def still(reads: VideoInput | Photo, time: float, tracked: dict[float, TrackedFrame] | None,
          chosen: frozenset[int] | None, run: Callable[[Pass], Summary]) -> Panel:
    """The frame of a video at ``time`` (the first at or after it), or a photo, decoded beside
    restored through ``run``, as the desk shows it; its faces as ``tracked`` (see :func:`_restored_alone`)."""
    if isinstance(reads, Photo):
        (frame,) = reads.frames(None, set())
    else:
        (frame,) = reads.frames_at([time], SeekReport())
    return _restored_alone(reads, frame, tracked, chosen, run)[0]


def _restored_alone(video: VideoInput | Photo, frame: SourceFrame, tracked: dict[float, TrackedFrame] | None,
                    chosen: frozenset[int] | None, run: Callable[[Pass], Summary]) -> tuple[Panel, Summary]:
    """``frame`` restored in a pass of its own, as a photo (an interlaced frame as its two
    fields): its faces as ``tracked`` gives them by time (a pass over the whole clip: whole-clip
    track ids and smoothed landmarks, labelled on the panel), else as detected on it alone;
    the ``chosen`` tracks' (None: all)."""
    one = dataclasses.replace(video.pictures, frames=1)
    capture = PanelCapture(frame, labelled=tracked is not None)
    tracker = KnownTracks(tracked) if tracked is not None else FaceTracker(smooth=0)
    summary = run(Pass(photo_source(frame), capture, one, tracker, (capture,), chosen=chosen, ranged=False))
    return capture.panel(), summary
