"""``--preview``: a contact sheet of frames spread over a video, each decoded beside restored,
its faces boxed. Each frame is found by a seek and restored alone, as a photo (an interlaced
frame as its two fields, as a render restores them), so a long clip takes seconds."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ..faces.select import KnownTracks, TrackSurvey
from ..faces.track import FaceTracker
from ..media.images import ImageWriter, photo_source
from ..media.seek import SeekReport
from ..media.sheet import PanelCapture, contact_sheet
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
    one = dataclasses.replace(video.pictures, frames=1)
    seek = SeekReport()
    rows = []
    startup: dict[str, float] = {}  # where the workers' start went, if in one of the passes
    for frame in video.frames_at(list(plan.output.times), seek):
        capture = PanelCapture(frame, labelled=survey is not None)
        tracker = KnownTracks(survey.kept) if survey is not None else FaceTracker(smooth=0)
        startup |= run(Pass(photo_source(frame), capture, one, tracker, (capture,), chosen=chosen,
                            ranged=False)).startup
        rows.append(capture.panel())
    writer.write_rgb(contact_sheet(rows, f"{video.path.name}: as decoded, faces boxed"))
    writer.close()
    faces = sum(box.restored for row in rows for box in row.boxes)
    return Summary(writer.output, seek.decoded, faces, sum(any(b.restored for b in r.boxes) for r in rows),
                   time.perf_counter() - started, startup=startup, panels=len(rows))
