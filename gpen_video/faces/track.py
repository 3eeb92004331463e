"""Face tracking for video: detections linked into tracks, short misses bridged, landmarks smoothed.

Streaming: frames are pushed in order and come out once nothing later can change them, after a
fixed ``lookahead``, so memory stays flat however long the video is.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

from .choices import DEFAULT_SMOOTH
from .detect import Detections, Face
from .smooth import Smoother

#: Side of the grayscale thumbnail compared for scene cuts: small enough that camera motion and
#: compression noise mostly average out, large enough that two different shots rarely match.
THUMBNAIL_SIDE = 32
_GRAY = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # the luma weights of OpenCV's RGB2GRAY


@dataclass
class TrackedFace:
    """A face of one frame, tied to its track; ``landmarks`` are the smoothed ones to align with."""

    track: int
    score: float | None  # None where a missed detection was bridged
    box: np.ndarray  # (4,) x0, y0, x1, y1, as detected (or interpolated)
    landmarks_raw: np.ndarray  # (5, 2) as detected (or interpolated)
    landmarks: np.ndarray  # (5, 2) smoothed over time
    interpolated: bool


@dataclass
class TrackedFrame:
    """A final frame: its faces (ordered by track id) will not change any more."""

    index: int
    time: float
    faces: list[TrackedFace]


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of every box of ``a`` (M, 4) with every box of ``b`` (N, 4)."""
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(bottom_right - top_left, 0, None).prod(axis=-1)
    area_a = (a[:, 2:] - a[:, :2]).prod(axis=-1)
    area_b = (b[:, 2:] - b[:, :2]).prod(axis=-1)
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def face_scale(face: Face) -> float:
    """The inter-ocular distance, floored at a fifth of the box so turned heads still have a scale."""
    return max(float(np.linalg.norm(face.landmarks[1] - face.landmarks[0])), 0.2 * face.size, 1.0)


@functools.lru_cache(maxsize=16)
def _area_weights(size: int, device: torch.device) -> torch.Tensor:
    """(THUMBNAIL_SIDE, size): row i averages the samples of adaptive average pooling's i-th bin,
    from floor(i * size / side) up to ceil((i + 1) * size / side)."""
    i = torch.arange(THUMBNAIL_SIDE, device=device)
    start, end = i * size // THUMBNAIL_SIDE, -(-(i + 1) * size // THUMBNAIL_SIDE)
    j = torch.arange(size, device=device)
    inside = (j >= start[:, None]) & (j < end[:, None])
    return inside / (end - start)[:, None]


def thumbnail_means(rgb: torch.Tensor) -> torch.Tensor:
    """Frames (N, 3, H, W) RGB in [0, 255] as (N, 3, THUMBNAIL_SIDE, THUMBNAIL_SIDE) area averages,
    computed where the frames are, so only a few numbers need to come back.

    Adaptive average pooling, done as two matrix products (rows, then columns): on a GPU, pooling
    1080p frames to 32x32 directly took ~0.2 ms per frame, one thread per output summing ~2000
    scattered samples, while the products read each frame once."""
    h, w = rgb.shape[2:]
    return _area_weights(h, rgb.device) @ rgb.float() @ _area_weights(w, rgb.device).T


def gray_thumbnails(means: np.ndarray) -> np.ndarray:
    """:func:`thumbnail_means` on the host as the grayscale thumbnails the cut detector compares.
    Averaged first, then weighted (both are linear): the weighting touches 32x32 values per
    channel, not whole frames."""
    return np.einsum("nchw,c->nhw", means, _GRAY)


def scene_thumbnails(rgb: torch.Tensor) -> np.ndarray:
    """Frames (N, 3, H, W) RGB in [0, 255] on any device as (N, THUMBNAIL_SIDE, THUMBNAIL_SIDE)
    grayscale area averages."""
    return gray_thumbnails(thumbnail_means(rgb).cpu().numpy())


def scene_thumbnail(image: np.ndarray) -> np.ndarray:
    """:func:`scene_thumbnails` of one (H, W, 3) uint8 RGB image."""
    return scene_thumbnails(torch.from_numpy(image).permute(2, 0, 1)[None])[0]


class SceneCutDetector:
    """Flags a frame that differs wholly from the previous one, by mean absolute difference of
    small grayscale thumbnails (0-255 scale). Keeps a thumbnail and a few numbers, never a frame.

    A cut is a jump: the difference must pass ``threshold`` and also be ``SPIKE`` times the
    recent typical difference. Handheld whip pans change every frame a lot for a while (up to 70
    on the phone selfie); only their first frame can count as a cut, not each one.
    """

    SPIKE = 2.5
    HISTORY = 5

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._previous: np.ndarray | None = None
        self._recent: list[float] = []

    def is_cut(self, thumbnail: np.ndarray) -> bool:
        previous, self._previous = self._previous, thumbnail
        if previous is None:
            return False
        difference = float(np.abs(thumbnail - previous).mean())
        typical = float(np.median(self._recent)) if self._recent else 0.0
        self._recent = (self._recent + [difference])[-self.HISTORY :]
        return difference > self.threshold and difference > self.SPIKE * typical


@dataclass
class _Track:
    """One track segment: its raw landmark series (missed frames filled in), one sample per frame
    from ``first`` on, trimmed at the front once no pending frame needs the samples."""

    id: int
    first: int  # sequence number of samples[0]
    last_face: Face
    last_seen: int  # sequence number and clock of last_face
    last_clock: float
    clocks: list[float] = field(default_factory=list)
    samples: list[np.ndarray] = field(default_factory=list)
    widths: dict[int, float] = field(default_factory=dict)  # by sequence number: the smoother's, once final

    def append(self, clock: float, landmarks: np.ndarray) -> None:
        self.clocks.append(clock)
        self.samples.append(landmarks)

    def trim_before(self, seq: int) -> None:
        drop = max(0, seq - self.first)
        del self.clocks[:drop], self.samples[:drop]
        self.first += drop
        for old in [s for s in self.widths if s < self.first]:
            del self.widths[old]


@dataclass
class _PendingFrame:
    """A frame not yet returned: later frames may still bridge a miss into it or move its smoothing."""

    seq: int
    index: int
    time: float
    clock: float
    faces: list[tuple[_Track, TrackedFace]] = field(default_factory=list)


class FaceTracker:
    """Links per-frame detections into tracks and smooths each track's landmarks.

    ``smooth`` is the strength of the adaptive smoother (see :mod:`.smooth`; 0: off): the default
    1.0 fits a still face's landmarks over a Gaussian window of sigma 2.5 frames and a fast one's
    over down to 1 frame. A track missed for up to ``max_gap`` frames (detector misses last a few frames:
    blur, a hand over the face) is bridged by interpolation; longer, it ends.

    Detections are matched to tracks by landmark distance in face scales plus (1 - IoU), optimally
    over all pairs; a pair needs a distance of at most ``max_distance`` scales per frame apart (a
    handheld phone pan moves a face up to 1.2 eye distances from one frame to the next) and an IoU
    of at least ``min_iou`` (no overlap means another face). A thumbnail difference above
    ``cut_threshold`` is a scene cut and ends every track (see ``SceneCutDetector``): 25 lies well
    above the largest frame-to-frame change in the test videos (13, handheld), except whip pans of
    the phone selfie (up to 70, where a split track costs little), and below the smallest
    difference between two of them (38).

    With ``recording``, every push's arguments are appended to it: the clip's detections, which
    :meth:`replay` tracks again with another smoothing without detecting again.
    """

    def __init__(self, smooth: float = DEFAULT_SMOOTH, max_gap: int = 5, max_distance: float = 1.5,
                 min_iou: float = 0.1, cut_threshold: float = 25.0,
                 recording: list[Detections] | None = None) -> None:
        if smooth < 0 or max_gap < 0:
            raise ValueError("smooth and max_gap must not be negative")
        self.recording = recording
        self.smooth = smooth
        self.max_gap = max_gap
        self.max_distance = max_distance
        self.min_iou = min_iou
        self._smoother = Smoother(smooth)
        self._cuts = SceneCutDetector(cut_threshold)
        self._ids = itertools.count()
        self._tracks: list[_Track] = []
        self._pending: list[_PendingFrame] = []
        self._seq = 0
        self._clock: float | None = None
        self._clock_step = 1.0

    @property
    def lookahead(self) -> int:
        """Frames after frame t that must be pushed before frame t is final: the smoother reads up
        to t + its reach, and a miss there is only resolved ``max_gap`` frames later."""
        return self._smoother.reach + self.max_gap

    @property
    def context(self) -> int:
        """Frames to push before frame t so that t comes out as in a run from the first frame:
        the lookahead of the frames before t, plus the scene-cut detector's history."""
        return 2 * self.lookahead + SceneCutDetector.HISTORY

    @staticmethod
    def prepare() -> None:
        """Import what matching needs (SciPy, most of a second) now: the engine calls this beside
        its workers' start, and the pipeline's track thread before its first detections, instead
        of paying it once they are back."""
        import scipy.optimize  # noqa: F401

    def push(self, index: int, time: float, faces: list[Face], thumbnail: np.ndarray) -> list[TrackedFrame]:
        """Add the next frame (its detections and its :func:`scene_thumbnails`); returns the frames now final."""
        if self.recording is not None:
            self.recording.append(Detections(index, time, faces, thumbnail))
        if self._cuts.is_cut(thumbnail):
            self._tracks = []
        frame = _PendingFrame(self._seq, index, time, self._next_clock(time))
        self._pending.append(frame)
        self._associate(frame, faces)
        self._seq += 1
        return self._emit(lambda pending: pending.seq + self.lookahead < self._seq)

    def flush(self) -> list[TrackedFrame]:
        """The frames still held back, at the end of the video; later pushes start new tracks."""
        self._tracks = []
        return self._emit(lambda pending: True)

    def replay(self, recorded: Iterable[Detections]) -> list[TrackedFrame]:
        """Every frame of a clip whose detections a tracker recorded, tracked by this one: the
        same track ids as the recording run, whatever the smoothing."""
        tracked = [frame for detections in recorded for frame in self.push(*detections)]
        return tracked + self.flush()

    def _next_clock(self, time: float) -> float:
        """The frame's time, kept strictly increasing (repeated or missing timestamps advance by the
        last step) so the smoother can fit against time, which keeps variable frame rates unbiased."""
        if self._clock is not None:
            if time > self._clock:
                self._clock_step = time - self._clock
            time = max(time, self._clock + self._clock_step)
        self._clock = time
        return time

    def _associate(self, frame: _PendingFrame, faces: list[Face]) -> None:
        matches = dict(self._match(faces))  # face index -> track
        # New tracks are numbered left to right, not in the detector's order of scores: two faces
        # of nearly equal score could swap ids between runs whose arithmetic differs by a rounding,
        # and an editor picks ids (--tracks) from one run to use in another.
        for i in sorted(range(len(faces)), key=lambda i: (faces[i].box[0], faces[i].box[1])):
            face = faces[i]
            track = matches.get(i)
            if track is None:
                track = _Track(next(self._ids), frame.seq, face, frame.seq, frame.clock)
                self._tracks.append(track)
            else:
                self._bridge(track, frame, face)
            self._observe(track, frame, face)
        self._tracks = [t for t in self._tracks if frame.seq - t.last_seen <= self.max_gap]

    def _match(self, faces: list[Face]) -> list[tuple[int, _Track]]:
        """Optimal one-to-one pairs of live tracks and detections, within the gates."""
        if not self._tracks or not faces:
            return []
        last = [t.last_face for t in self._tracks]
        iou = box_iou(np.stack([f.box for f in last]), np.stack([f.box for f in faces]))
        shift = np.linalg.norm(np.stack([f.landmarks for f in last])[:, None] - np.stack([f.landmarks for f in faces]),
                               axis=-1).mean(axis=-1)
        # Per frame since the track was last seen: a face missed for 3 frames may have moved 3 steps.
        frames_apart = np.array([self._seq - t.last_seen for t in self._tracks], dtype=np.float64)
        distance = shift / (np.array([face_scale(f) for f in last]) * frames_apart)[:, None]
        allowed = (distance <= self.max_distance) & (iou >= self.min_iou)
        cost = np.where(allowed, distance + 1.0 - iou, 1e6)
        from scipy.optimize import linear_sum_assignment  # imported by prepare(), not with this module

        rows, cols = linear_sum_assignment(cost)
        return [(c, self._tracks[r]) for r, c in zip(rows, cols) if allowed[r, c]]

    def _bridge(self, track: _Track, frame: _PendingFrame, face: Face) -> None:
        """Fill the frames a track was missed in, by linear interpolation in time up to ``face``."""
        for seq in range(track.last_seen + 1, frame.seq):
            missed = self._frame(seq)
            w = (missed.clock - track.last_clock) / (frame.clock - track.last_clock)
            box = (1 - w) * track.last_face.box + w * face.box
            landmarks = (1 - w) * track.last_face.landmarks + w * face.landmarks
            self._attach(track, missed, TrackedFace(track.id, None, box, landmarks, landmarks, interpolated=True))

    def _observe(self, track: _Track, frame: _PendingFrame, face: Face) -> None:
        self._attach(track, frame, TrackedFace(track.id, face.score, face.box, face.landmarks, face.landmarks, False))
        track.last_face, track.last_seen, track.last_clock = face, frame.seq, frame.clock

    def _attach(self, track: _Track, frame: _PendingFrame, face: TrackedFace) -> None:
        frame.faces.append((track, face))
        track.append(frame.clock, face.landmarks_raw)

    def _frame(self, seq: int) -> _PendingFrame:
        return self._pending[seq - self._pending[0].seq]

    def _emit(self, is_final: Callable[[_PendingFrame], bool]) -> list[TrackedFrame]:
        done = []
        while self._pending and is_final(self._pending[0]):
            frame = self._pending.pop(0)
            for track, face in frame.faces:
                face.landmarks = self._smoothed(track, frame)
                track.trim_before(frame.seq + 1 - self._smoother.reach)
            faces = sorted((face for _, face in frame.faces), key=lambda face: face.track)
            done.append(TrackedFrame(frame.index, frame.time, faces))
        return done

    def _smoothed(self, track: _Track, frame: _PendingFrame) -> np.ndarray:
        """The track's landmarks at ``frame``, as :meth:`Smoother.smooth` gives them for the whole
        segment: every sample within the smoother's reach is final by now."""
        at = frame.seq - track.first
        if self.smooth <= 0:
            return track.samples[at].copy()
        smoother = self._smoother
        around = range(max(track.first, frame.seq - smoother.spread),
                       min(track.first + len(track.samples), frame.seq + smoother.spread + 1))
        for seq in around:
            if seq not in track.widths:  # each sample's own width, once: its neighbours' frames need it too
                track.widths[seq] = smoother.width(track.clocks, track.samples, seq - track.first)
        return smoother.fit(track.clocks, track.samples, at, min(track.widths[seq] for seq in around))


def track_faces(frames: Iterable[tuple[int, float, list[Face], np.ndarray]], **options) -> list[TrackedFrame]:
    """Track a whole clip at once: (index, time, faces, image) per frame; ``options`` go to ``FaceTracker``."""
    tracker = FaceTracker(**options)
    tracked = [out for index, time, faces, image in frames
               for out in tracker.push(index, time, faces, scene_thumbnail(image))]
    return tracked + tracker.flush()
