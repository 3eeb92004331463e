"""``--preview``: a contact sheet, one row per frame: the frame as decoded, with its faces' boxes
drawn, beside the frame as it would be restored, left untouched so that it can be judged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import av
import cv2
import numpy as np

from .colour import to_rgb
from .frames import SourceFrame

if TYPE_CHECKING:
    from ..faces.track import TrackedFrame

#: Each half of a row is at most this wide; larger frames are scaled down (area averaging).
PANEL_WIDTH = 960
_CAPTION = 28  # px of caption above each row
_GAP = 8  # px between the halves and between rows
_RESTORED = (64, 220, 64)  # box colour of a face that is restored
_LEFT_ALONE = (230, 160, 40)  # of one --faces or --tracks leaves alone


@dataclass
class Box:
    """A face on a panel: its box in the frame's pixels, its label (a track id, or "") and
    whether it is restored."""

    box: np.ndarray
    label: str
    restored: bool


@dataclass
class Panel:
    """One row of the sheet: the upright RGB frame as decoded and as restored, at ``time``."""

    time: float
    original: np.ndarray
    restored: np.ndarray
    boxes: list[Box]


def _scaled(image: np.ndarray, scale: float) -> np.ndarray:
    if scale == 1.0:
        return image
    size = (max(1, round(image.shape[1] * scale)), max(1, round(image.shape[0] * scale)))
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


def _text(image: np.ndarray, text: str, x: int, y: int, colour: tuple[int, int, int], room: int | None = None,
          outline: bool = False) -> None:
    """``text`` at (x, y), cut short with "..." to fit ``room`` px; ``outline``d in black to be
    read over a picture."""
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, 0.6
    while room is not None and len(text) > 4 and cv2.getTextSize(text, font, scale, 1)[0][0] > room:
        text = text[:-4] + "..."
    if outline:
        cv2.putText(image, text, (x, y), font, scale, (0, 0, 0), 3, cv2.LINE_AA)
    cv2.putText(image, text, (x, y), font, scale, colour, 1, cv2.LINE_AA)


def contact_sheet(panels: list[Panel], title: str) -> np.ndarray:
    """The panels as one RGB image (H, W, 3) uint8, one row each under a caption with its time,
    under a header naming the columns: ``title`` over the decoded frames, "restored" over the
    others. Frames wider than :data:`PANEL_WIDTH` are scaled down."""
    height, width = panels[0].original.shape[:2]
    scale = min(1.0, PANEL_WIDTH / width)
    h, w = round(height * scale), round(width * scale)
    row = _CAPTION + h + _GAP
    sheet = np.full((_CAPTION + row * len(panels), 2 * w + 3 * _GAP, 3), 32, np.uint8)
    _text(sheet, title, _GAP, 20, (255, 255, 255), room=w)
    _text(sheet, "restored", 2 * _GAP + w, 20, (255, 255, 255))
    for n, panel in enumerate(panels):
        top = _CAPTION + n * row
        left = _scaled(panel.original, scale).copy()
        for face in panel.boxes:
            x0, y0, x1, y1 = (np.asarray(face.box) * scale).round().astype(int)
            colour = _RESTORED if face.restored else _LEFT_ALONE
            cv2.rectangle(left, (x0, y0), (x1, y1), colour, 2)
            if face.label:
                _text(left, face.label, x0, max(14, y0 - 4), colour, outline=True)
        sheet[top + _CAPTION : top + _CAPTION + h, _GAP : _GAP + w] = left
        sheet[top + _CAPTION : top + _CAPTION + h, 2 * _GAP + w : 2 * _GAP + 2 * w] = _scaled(panel.restored, scale)
        restored = sum(face.restored for face in panel.boxes)
        _text(sheet, f"{panel.time:.3f} s: {len(panel.boxes)} face(s), {restored} restored", _GAP,
              top + _CAPTION - 6, (220, 220, 220), room=2 * w)
    return sheet


class PanelCapture:
    """Both ends of the one-picture job that restores a panel's frame: as its writer it keeps
    the restored frame, as its log (``pipeline.job.FaceLog``) the faces and which were restored;
    ``labelled`` faces show their track ids (whole-clip ids, where a first pass found them)."""

    copied_streams: set[int] = set()

    def __init__(self, frame: SourceFrame, labelled: bool) -> None:
        self.frame = frame
        self.labelled = labelled
        self.output = Path(f"frame at {frame.time:.3f} s")
        self.warnings: list[str] = []
        self.restored: av.VideoFrame | None = None
        self.boxes: dict[int, Box] = {}  # by track, in the order the faces came

    def write(self, source: SourceFrame, restored: av.VideoFrame | None = None) -> None:
        self.restored = restored

    def add(self, frame: TrackedFrame, field: int | None, in_range: bool, restored: list[bool]) -> None:
        """The faces of the frame, or of one of its fields: an interlaced frame's two fields each
        add theirs, and a face (a track) seen in both is boxed once, where the first field saw it,
        as restored if either field restored it."""
        for face, was in zip(frame.faces, restored):
            if face.track in self.boxes:
                self.boxes[face.track].restored |= was
            else:
                self.boxes[face.track] = Box(face.box, str(face.track) if self.labelled else "", was)

    def close(self) -> None:
        """Nothing to finish: :meth:`panel` reads what was kept."""

    def abort(self) -> None:
        """Nothing to remove."""

    def panel(self) -> Panel:
        original = self.frame.rgb()
        restored = to_rgb(self.restored, self.frame.layout) if self.restored is not None else original
        return Panel(self.frame.time, original, restored, list(self.boxes.values()))
