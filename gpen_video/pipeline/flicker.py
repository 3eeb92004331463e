"""``--qc``: how much flicker the restoration adds to each face track.

For each pair of consecutive frames where a track's face was restored in both, the input's motion
is measured in the face's region (OpenCV's DIS optical flow, from the frame back to the one
before, on the decoded frames), and the frame before is warped along it onto the frame. Where the
flow holds both ways (pixels hidden or revealed by the motion fail its forward-backward check and
are left out), what the warp does not explain is the temporal change: the warping error of Lai et
al., "Learning Blind Video Temporal Consistency" (ECCV 2018). The same warp is applied to the
output's frames. A track's figure is the output's warping error over the input's, summed over its
frame pairs: 1.0 means the restoration adds no flicker beyond the input's own change; a face whose
restored detail changes from frame to frame reads above 1.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import av
import cv2
import numpy as np
import torch

from ..faces.track import TrackedFrame
from ..media.colour import to_rgb
from ..media.frames import SourceFrame
from .interfaces import Writer

#: A track whose output changes this much more than its input between frames is named in the
#: summary, for an editor to look at: half again the input's own change is plainly visible as
#: shimmer on a face that holds still.
FLICKER_LIMIT = 1.5
#: Added to both warping errors of every frame pair (squared 8-bit levels): a perfectly still
#: input would otherwise make any change at all an unbounded ratio.
ERROR_FLOOR = 1.0
#: The face's box, grown by this share of its size on each side, is where the flow is computed.
MARGIN = 0.25


@dataclass
class TrackFlicker:
    """One track's warping errors, summed over its frame pairs (mean squared 8-bit levels each),
    and the times of the first and last frame measured."""

    first: float
    last: float
    pairs: int = 0
    input_error: float = 0.0
    output_error: float = 0.0

    @property
    def ratio(self) -> float:
        """The output's warping error over the input's: 1.0, no flicker added."""
        return (self.output_error + ERROR_FLOOR * self.pairs) / (self.input_error + ERROR_FLOOR * self.pairs)

    def record(self) -> dict:
        return {"flicker": round(self.ratio, 3), "frame_pairs": self.pairs, "from": round(self.first, 3),
                "to": round(self.last, 3)}


def flicker_records(tracks: dict[int, TrackFlicker]) -> dict[str, dict]:
    """Each measured track's figures, by its id, as the tracks file and the report write them."""
    return {str(track): figures.record() for track, figures in sorted(tracks.items())}


def _gray(frame: av.VideoFrame, source: SourceFrame) -> np.ndarray:
    """The upright luma of a frame laid out as ``source`` is, as 8-bit levels: its Y plane where
    square pixels of YUV allow (the flow and the errors need no colour), else through RGB."""
    layout = source.layout
    if layout.rgb or layout.stretch is not None:
        return cv2.cvtColor(to_rgb(frame, layout), cv2.COLOR_RGB2GRAY)
    luma = torch.from_numpy(frame.to_ndarray(format="gray"))
    return layout.orientation.upright(luma[None, None])[0, 0].numpy()


def warping_errors(flow: cv2.DISOpticalFlow, inputs: tuple[np.ndarray, np.ndarray],
                   outputs: tuple[np.ndarray, np.ndarray], face: np.ndarray) -> tuple[float, float] | None:
    """The warping errors of the input and the output in one region, the motion measured by
    ``flow``: ``inputs`` and ``outputs`` are (frame before, frame) uint8 crops of one size,
    ``face`` the bool mask of the face in the frame. None when too little of the face can be followed."""
    before, now = (np.ascontiguousarray(image) for image in inputs)
    back = flow.calc(now, before, None)  # where each pixel of the frame was in the frame before
    forth = flow.calc(before, now, None)
    height, width = now.shape
    grid = np.stack(np.meshgrid(np.arange(width, dtype=np.float32), np.arange(height, dtype=np.float32)), -1)
    source = grid + back
    returned = cv2.remap(forth, source[..., 0], source[..., 1], cv2.INTER_LINEAR)
    # Sundaram et al.'s forward-backward check, as Lai et al. mask occlusions.
    loop = np.square(back + returned).sum(-1)
    bound = 0.01 * (np.square(back).sum(-1) + np.square(returned).sum(-1)) + 0.5
    inside = (source[..., 0] >= 0) & (source[..., 0] <= width - 1) & (source[..., 1] >= 0) & \
             (source[..., 1] <= height - 1)
    valid = face & inside & (loop <= bound)
    if valid.sum() < 0.25 * face.sum():
        return None

    def error(pair: tuple[np.ndarray, np.ndarray]) -> float:
        warped = cv2.remap(pair[0].astype(np.float32), source[..., 0], source[..., 1], cv2.INTER_LINEAR)
        return float(np.square(pair[1].astype(np.float32) - warped)[valid].mean())

    return error(inputs), error(outputs)


class FlickerCheck:
    """Hears each tracked picture, as a job's face log, and measures each frame written, through
    :class:`CheckedWriter`; :attr:`tracks` then holds each track's figures."""

    def __init__(self) -> None:
        self._faces: dict[int, dict[int, np.ndarray]] = {}  # picture index -> restored track -> box
        self._lock = threading.Lock()  # the tracker adds while the encoder takes
        self._previous: tuple[int, np.ndarray, np.ndarray, dict[int, np.ndarray]] | None = None
        self.tracks: dict[int, TrackFlicker] = {}
        self._flow = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)  # one for the job's frames

    def add(self, frame: TrackedFrame, field: int | None, in_range: bool, restored: list[bool]) -> None:
        boxes = {face.track: face.box for face, was in zip(frame.faces, restored) if was}
        if boxes:
            with self._lock:
                self._faces[frame.index] = boxes

    def close(self) -> None:
        """Nothing to finish: the figures are complete once the last frame is written."""

    def abort(self) -> None:
        """Nothing to remove."""

    def figures(self) -> dict[str, dict]:
        """Each measured track's figures, for the tracks file."""
        return flicker_records(self.tracks)

    def measure(self, source: SourceFrame, restored: av.VideoFrame | None) -> None:
        """One frame as written: its faces' warping errors against the frame before, where both
        had the track's face restored."""
        with self._lock:
            boxes = self._faces.pop(source.index, {})
        if not boxes or restored is None:
            self._previous = None
            return
        decoded, made = _gray(source.frame, source), _gray(restored, source)
        previous, self._previous = self._previous, (source.index, decoded, made, boxes)
        if previous is None or previous[0] != source.index - 1:
            return
        _, decoded_before, made_before, boxes_before = previous
        for track, box in boxes.items():
            if track not in boxes_before:
                continue
            left, top, right, bottom = _region(box, boxes_before[track], decoded.shape)
            crop = (slice(top, bottom), slice(left, right))
            face = np.zeros((bottom - top, right - left), dtype=bool)
            x0, y0, x1, y1 = (int(round(v)) for v in box)
            face[max(0, y0 - top):max(0, y1 - top), max(0, x0 - left):max(0, x1 - left)] = True
            errors = warping_errors(self._flow, (decoded_before[crop], decoded[crop]),
                                    (made_before[crop], made[crop]), face)
            if errors is not None:
                figures = self.tracks.setdefault(track, TrackFlicker(source.time, source.time))
                figures.last = source.time
                figures.pairs += 1
                figures.input_error += errors[0]
                figures.output_error += errors[1]


class CheckedWriter:
    """A job's writer with ``check`` measuring every frame it writes."""

    def __init__(self, writer: Writer, check: FlickerCheck) -> None:
        self.writer = writer
        self.check = check
        self.output = writer.output
        self.warnings = writer.warnings
        self.copied_streams = writer.copied_streams

    def write(self, source: SourceFrame, restored: av.VideoFrame | None = None) -> None:
        self.writer.write(source, restored)
        self.check.measure(source, restored)

    def write_packet(self, packet: av.Packet) -> None:
        self.writer.write_packet(packet)

    def close(self) -> None:
        self.writer.close()

    def abort(self) -> None:
        self.writer.abort()


def _region(box: np.ndarray, before: np.ndarray, shape: tuple[int, int]) -> tuple[int, int, int, int]:
    """Both boxes' union, grown by :data:`MARGIN` on each side and clipped to the frame."""
    x0, y0 = min(box[0], before[0]), min(box[1], before[1])
    x1, y1 = max(box[2], before[2]), max(box[3], before[3])
    grow_x, grow_y = MARGIN * (x1 - x0), MARGIN * (y1 - y0)
    height, width = shape
    return (max(0, int(x0 - grow_x)), max(0, int(y0 - grow_y)), min(width, int(np.ceil(x1 + grow_x))),
            min(height, int(np.ceil(y1 + grow_y))))
