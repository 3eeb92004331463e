"""Which faces to restore: ``--faces all|largest|center`` and ``--tracks 3,7``.

A choice is made per track, never per frame, so that a restoration does not flicker from one
person to another as their sizes or places change by a few pixels. ``largest`` and ``center``
need each track's whole life, so a first pass over the clip (:class:`TrackSurvey`, fed by a job
that detects and tracks without restoring) counts, for every track, the frames in which it is
the largest (or most central) face present; a track is chosen when it is so in at least half of
its frames. In each shot that is the one main person, however briefly others pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from .detect import box_size
from .track import TrackedFace, TrackedFrame


def _area(face: TrackedFace) -> float:
    x0, y0, x1, y1 = face.box
    return float((x1 - x0) * (y1 - y0))


def _off_centre(face: TrackedFace, height: int, width: int) -> float:
    """How far the box's centre is from the picture's, as fractions of its sides."""
    x0, y0, x1, y1 = face.box
    return float(np.hypot((x0 + x1) / 2 / width - 0.5, (y0 + y1) / 2 / height - 0.5))


def frame_winner(faces: list[TrackedFace], rule: str, height: int, width: int) -> TrackedFace:
    """The face of one frame that ``rule`` (largest or center) prefers."""
    if rule == "largest":
        return max(faces, key=_area)
    return min(faces, key=lambda face: _off_centre(face, height, width))


def describe_tracks(tracks: Iterable[int]) -> str:
    """``[0, 3, 7]`` -> ``"0, 3, 7"``, ``[]`` -> ``"none"``."""
    return ", ".join(map(str, sorted(tracks))) or "none"


class TrackSurvey:
    """What a pass over a clip found, track by track, where faces are restored: the frames each
    track is on, when it is first and last seen, its mean face size, and the frames in which
    ``rule`` (largest or center) preferred it. It is a log of the job that finds them (see
    ``pipeline.job.FaceLog``): the first pass of a choice of tracks, and --detect-only. It also
    keeps the first frame at or after each of ``keep_times`` (seconds), for --preview."""

    def __init__(self, rule: str, height: int, width: int, keep_times: tuple[float, ...] = ()) -> None:
        self.rule = rule
        self.height, self.width = height, width
        self.keep_times = keep_times
        self.kept: dict[float, TrackedFrame] = {}  # by its time
        self._next_kept = 0  # the first of keep_times not met yet
        self.frames: Counter[int] = Counter()  # track -> frames it is on
        self.wins: Counter[int] = Counter()  # track -> frames the rule preferred it
        self.seen: dict[int, tuple[float, float]] = {}  # track -> first and last time
        self.size: Counter[int] = Counter()  # track -> sum of its boxes' shorter sides
        self.faces = 0

    def add(self, frame: TrackedFrame, field: int | None, in_range: bool, restored: list[bool]) -> None:
        while self._next_kept < len(self.keep_times) and frame.time >= self.keep_times[self._next_kept] - 1e-6:
            self.kept[frame.time] = frame
            self._next_kept += 1
        if not in_range or not frame.faces:
            return
        self.faces += len(frame.faces)
        for face in frame.faces:
            self.frames[face.track] += 1
            self.size[face.track] += box_size(face.box)
            self.seen[face.track] = (self.seen.get(face.track, (frame.time,))[0], frame.time)
        if self.rule != "all":
            self.wins[frame_winner(frame.faces, self.rule, self.height, self.width).track] += 1

    def close(self) -> None:
        """Nothing to finish: the survey is read by :meth:`chosen` and :meth:`table`."""

    def abort(self) -> None:
        """Nothing to remove."""

    def chosen(self) -> frozenset[int]:
        """The tracks the rule preferred in at least half of their frames (every one for ``all``)."""
        if self.rule == "all":
            return frozenset(self.frames)
        return frozenset(t for t, n in self.frames.items() if 2 * self.wins[t] >= n)

    def table(self) -> str:
        """One line per track, for an editor choosing ``--tracks``: its id, when it is seen, on how
        many frames, and how large its face is."""
        lines = [f"{'track':>5}  {'first s':>9}  {'last s':>9}  {'frames':>6}  {'face px':>7}"]
        for track in sorted(self.frames):
            first, last = self.seen[track]
            lines.append(f"{track:>5}  {first:>9.3f}  {last:>9.3f}  {self.frames[track]:>6}  "
                         f"{self.size[track] / self.frames[track]:>7.0f}")
        return "\n".join(lines)


class KnownTracks:
    """A tracker for pictures whose tracks a first pass already found (``frames``, by time): it
    hands each picture its faces as that pass tracked them, whole-clip ids and smoothed landmarks,
    whatever is detected on it now. --preview restores its frames so, one at a time."""

    lookahead = 0
    context = 0

    def __init__(self, frames: dict[float, TrackedFrame]) -> None:
        self.frames = frames

    @staticmethod
    def prepare() -> None:
        """Nothing to import: no matching is done."""

    def push(self, index: int, time: float, faces: object, thumbnail: object) -> list[TrackedFrame]:
        known = self.frames.get(time)
        return [TrackedFrame(index, time, known.faces if known is not None else [])]

    @staticmethod
    def flush() -> list[TrackedFrame]:
        return []
