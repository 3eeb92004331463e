"""The desk's survey of a clip's faces: the ``--detect-only`` pass, with its progress, whose
detections are kept so that the preview tracks them again with any smoothing under the same
track ids, and a card per track: when it is seen, on how many frames, how large, and where its
clearest face is."""

from __future__ import annotations

import io
import logging
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from ..errors import GpenVideoError, error_line
from ..faces.detect import Detections, box_size
from ..faces.select import TrackSurvey
from ..faces.track import FaceTracker, TrackedFrame
from ..media.seek import frames_at
from ..options import RestoreOptions
from ..pipeline.engine import Engine

log = logging.getLogger(__name__)
#: A face card's picture: a square this many pixels wide, of the face's box grown by MARGIN.
CARD_SIZE = 224
CARD_MARGIN = 1.8
#: The quick choices the page offers besides clicking cards (``--faces``' rules).
RULES = ("all", "largest", "center")


@dataclass(frozen=True)
class Card:
    """One track as the page shows it; ``best_time`` and ``best_box`` place its clearest face
    (the largest box, weighed by the detector's confidence)."""

    track: int
    first: float
    last: float
    frames: int
    face_px: float
    best_time: float
    best_box: tuple[float, float, float, float]


class Survey:
    """One clip's survey, run on a thread of the desk's; read while it runs for its progress."""

    def __init__(self, path: Path, frames: int | None, height: int, width: int) -> None:
        self.path = path
        self.total = frames  # an estimate while it runs
        self.height, self.width = height, width
        self.done = 0
        self.state = "running"  # then "done" or "failed"
        self.error: str | None = None
        self.cards: list[Card] = []
        self.picks: dict[str, list[int]] = {}
        self.smooth = 0.0  # the smoothing of the survey's own tracking
        self._recording: list[Detections] = []
        self._tracked: dict[float, list[TrackedFrame]] = {}
        self._lock = threading.Lock()

    def run(self, engine: Engine, options: RestoreOptions) -> None:
        """The pass, with ``options`` (their smoothing and detection); a failure is kept as its one line."""
        try:
            engine.find_faces(self.path, on_frame=self._count, options=options, recording=self._recording)
            self.smooth = options.smooth
            tracked = self.tracked(options.smooth)
            self.cards = _cards(tracked)
            self.picks = {rule: sorted(self._chosen(rule, tracked)) for rule in RULES}
            self.total, self.state = self.done, "done"  # the count, where the header's was an estimate
        except GpenVideoError as exc:
            self.error, self.state = error_line(exc), "failed"
        except Exception as exc:  # a bug must not leave the page waiting for ever
            log.exception("the survey of %s failed", self.path)
            self.error, self.state = f"the survey failed: {exc}", "failed"

    def _count(self, frames: int, faces: int) -> None:
        self.done += frames

    def tracked(self, smooth: float) -> list[TrackedFrame]:
        """The clip's frames tracked with ``smooth``, from the survey's detections (kept per value)."""
        with self._lock:
            if smooth not in self._tracked:
                self._tracked[smooth] = FaceTracker(smooth=smooth).replay(self._recording)
            return self._tracked[smooth]

    def _chosen(self, rule: str, tracked: list[TrackedFrame]) -> frozenset[int]:
        """The tracks ``--faces rule`` restores."""
        survey = TrackSurvey(rule, self.height, self.width)
        for frame in tracked:
            survey.add(frame, None, True, [])
        return survey.chosen()

    def as_json(self, name: str) -> dict:
        """What the page reads: progress, then the cards and the quick choices; ``name`` is the file's."""
        return {"file": name, "state": self.state, "done": self.done, "total": self.total, "error": self.error,
                "tracks": [asdict(card) for card in self.cards], "picks": self.picks}

    def face_picture(self, track: int) -> bytes:
        """A JPEG of the track's clearest face, enlarged to a card's size."""
        card = next((c for c in self.cards if c.track == track), None)
        if card is None:
            raise KeyError(track)
        rgb = frames_at(self.path, [card.best_time])[0].rgb()
        x0, y0, x1, y1 = card.best_box
        half = CARD_MARGIN * max(x1 - x0, y1 - y0) / 2
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        square = (round(cx - half), round(cy - half), round(cx + half), round(cy + half))
        face = Image.fromarray(rgb).crop(square).resize((CARD_SIZE, CARD_SIZE), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        face.save(out, "JPEG", quality=90)
        return out.getvalue()


def _cards(tracked: list[TrackedFrame]) -> list[Card]:
    """A card per track of the tracked frames."""
    seen: dict[int, list[float]] = {}  # track -> first, last, frames, summed size, best weight, best time
    boxes: dict[int, np.ndarray] = {}
    for frame in tracked:
        for face in frame.faces:
            size = box_size(face.box)
            weight = size * (face.score if face.score is not None else 0.0)
            facts = seen.setdefault(face.track, [frame.time, frame.time, 0, 0.0, -1.0, frame.time])
            facts[1], facts[2], facts[3] = frame.time, facts[2] + 1, facts[3] + size
            if weight > facts[4]:
                facts[4], facts[5], boxes[face.track] = weight, frame.time, face.box
    return [Card(track, first, last, int(frames), round(total / frames, 1), best,
                 tuple(round(float(v), 1) for v in boxes[track]))
            for track, (first, last, frames, total, _, best) in sorted(seen.items())]
