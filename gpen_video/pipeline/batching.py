"""How a job's pictures are grouped: frames per batch, frames in flight, where a restoration
batch is cut, and the time range whose faces are restored."""

from __future__ import annotations

from dataclasses import dataclass

from ..media.frames import SourceFrame
from ..media.probe import Pictures
from .scheduler import QUEUED_DETECTIONS, QUEUED_RESTORATIONS

#: The frame size batches are counted for (1080p); larger frames get fewer per batch.
REFERENCE_PIXELS = 1920 * 1080


def frames_per_batch(batch_size: int, frame_pixels: int) -> int:
    """Frames per detection and restoration batch: ``batch_size`` at 1080p and below, fewer for
    larger frames (a quarter at 4K), so that a batch's working tensors and the frames in flight
    (:func:`frames_in_flight`, counted in batches) take the same bytes whatever the frame size.
    GPEN's own batches count faces and stay ``batch_size``."""
    return max(1, min(batch_size, batch_size * REFERENCE_PIXELS // max(frame_pixels, 1)))


def batch_frames(pictures: Pictures, batch_size: int) -> int:
    """A job's pictures to a detection batch (:func:`frames_per_batch`), never more than there
    are: a photo's detection runs on one."""
    return min(frames_per_batch(batch_size, pictures.width * pictures.height), pictures.frames or batch_size)


def frames_in_flight(workers: int, batch_frames: int, lookahead: int) -> int:
    """How many frames may be between the decoder and the encoder at once: per worker, its queued
    detection and restoration batches; one worker's worth more for the batches between the
    stages; the tracker's look-ahead and the batch the decoder is filling."""
    per_worker = (QUEUED_RESTORATIONS + QUEUED_DETECTIONS) * batch_frames
    return per_worker * (workers + 1) + lookahead + batch_frames


def restore_cut(faces: list[int], face_batch: int) -> int:
    """How many frames of a full restoration batch to send, given each frame's face count: the
    cut in its second half that leaves the fewest empty places in the last GPEN batch (compiled
    graphs run full batches, padded), the later cut on a tie. The rest start the next batch."""
    best, best_empty = len(faces), None
    total = 0
    for n, count in enumerate(faces, 1):
        total += count
        empty = -total % face_batch
        if n >= (len(faces) + 1) // 2 and (best_empty is None or empty <= best_empty):
            best, best_empty = n, empty
    return best


@dataclass(frozen=True)
class TimeRange:
    """Where faces are restored: from ``start`` to before ``end`` (None: the end) seconds after
    the first frame. Frames up to ``before`` seconds before it and ``after`` seconds after it are
    detected and tracked too, so that tracks and smoothing reach its edges as they do mid-clip
    (``before`` is infinite where track ids must be those of a whole clip); frames farther out are
    not detected."""

    start: float
    end: float | None
    before: float
    after: float

    def restores(self, time: float) -> bool:
        return self.start <= time and (self.end is None or time < self.end)

    def tracks(self, time: float) -> bool:
        return self.start - self.before <= time and (self.end is None or time < self.end + self.after)


def frame_time(picture: SourceFrame) -> float:
    """The time of the frame a picture belongs to: a field's is its frame's, so that both fields
    of a frame fall on the same side of a range's edge."""
    return picture.field.whole.time if picture.field is not None else picture.time
