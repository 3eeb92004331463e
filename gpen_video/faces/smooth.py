"""Lag-free temporal smoothing of face landmarks, strong where a face holds still and lighter
where it moves.

Detector landmarks jitter by a pixel or two from frame to frame, and the aligned face crop follows
them, so restored faces shimmer. Each frame's landmarks are a centred local quadratic fit over its
track (Gaussian weights, fitted against the frames' times): a quadratic follows steady motion and
steady acceleration without lag, so its window can be wide. The window's width follows the motion:
from the track's own noise (its third differences) and its acceleration around the frame, the
width that balances noise removed against lag (the local-linear plug-in rule), between
``MOVING_SIGMA`` and ``STILL_SIGMA`` times ``--smooth``. A frame takes the narrowest width of the
frames around it, so a window never reaches into a motion it would lag.

Measured on the shared clips with the real mobile detector (benchmarks/steadiness.py): the median
track keeps 0.26 of its raw jitter (0.37 with the fixed local-linear fit of sigma 1 before), and no
track is pulled off its detections by more than 0.8 % of the eye distance on average (3.1 % before,
on a phone's whip pans).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: ``--smooth 1``'s Gaussian sigma, in frames, for a face that holds still and for one that moves
#: fast; other values scale both.
STILL_SIGMA = 2.5
MOVING_SIGMA = 1.0
#: The sigma, in frames, of the quadratic fit that measures a face's acceleration.
MOTION_SIGMA = 2.0
#: The plug-in width times this: the rule's optimum is for the error against the truth, and a
#: crop that shimmers is worse than one a fraction of a pixel behind (BENCHMARKS.md).
WIDTH_GAIN = 4.0
#: A window ends 3 sigmas out, where the weights have fallen to 1.1% of the centre's.
RADIUS_SIGMAS = 3.0
#: Samples each side that the acceleration's fit reads.
MOTION_RADIUS = math.ceil(RADIUS_SIGMAS * MOTION_SIGMA)


def gaussian_weights(offsets: np.ndarray, sigma: float) -> np.ndarray:
    """Weights of samples ``offsets`` frames away from the frame being smoothed."""
    return np.exp(-0.5 * (np.asarray(offsets, dtype=np.float64) / sigma) ** 2)


def _polynomial_rows(x: np.ndarray, weights: np.ndarray, degree: int) -> np.ndarray | None:
    """The weighted least-squares polynomial's coefficients at x = 0 as rows (coefficient i =
    row i @ y), the degree lowered to what the samples allow (``x`` strictly increasing, as the
    tracker's clocks are); None if they allow no line."""
    degree = min(degree, len(x) - 1)
    if degree < 0:
        return None
    basis = np.vander(x, degree + 1, increasing=True)
    weighted = basis * weights[:, None]
    try:
        return np.linalg.solve(basis.T @ weighted, weighted.T)
    except np.linalg.LinAlgError:
        return None


@dataclass(frozen=True)
class Smoother:
    """The smoother of ``--smooth strength`` (0: landmarks as detected), over one track's samples:
    ``clocks`` (n,) in seconds, strictly increasing, and ``samples`` (n, ...) of landmarks."""

    strength: float

    @property
    def radius(self) -> int:
        """Samples each side of a frame that its fit, its noise and its motion read."""
        if self.strength <= 0:
            return 0
        return max(math.ceil(RADIUS_SIGMAS * STILL_SIGMA * self.strength), MOTION_RADIUS)

    @property
    def spread(self) -> int:
        """Frames each side whose motion narrows a frame's window (half the widest window)."""
        return math.ceil(RADIUS_SIGMAS * STILL_SIGMA * self.strength / 2) if self.strength > 0 else 0

    @property
    def reach(self) -> int:
        """Frames each side of a frame that its smoothed landmarks depend on."""
        return self.radius + self.spread

    def width(self, clocks: np.ndarray, samples: np.ndarray, at: int) -> float:
        """The Gaussian sigma, in frames, that sample ``at``'s own motion asks for (from the
        samples within :attr:`radius` of it)."""
        narrowest, widest = MOVING_SIGMA * self.strength, STILL_SIGMA * self.strength
        lo, hi = max(0, at - self.radius), min(len(samples), at + self.radius + 1)
        points = np.asarray(samples[lo:hi], dtype=np.float64).reshape(hi - lo, -1)
        if len(points) < 4:
            return narrowest
        third = np.diff(points, n=3, axis=0)
        noise = 1.4826 * float(np.median(np.abs(third))) / math.sqrt(20)  # MAD of white noise's third difference
        near = np.arange(max(lo, at - MOTION_RADIUS), min(hi, at + MOTION_RADIUS + 1))
        clock = np.asarray(clocks[lo:hi], dtype=np.float64)
        step = (clock[-1] - clock[0]) / (len(clock) - 1)  # the frames' mean step: accelerations per frame²
        offsets = (clock[near - lo] - clock[at - lo]) / step
        rows = _polynomial_rows(offsets, gaussian_weights(near - at, MOTION_SIGMA), 2)
        if rows is None or len(rows) < 3:
            return narrowest
        curvature = 2 * rows[2]  # the acceleration, in pixels per frame squared, as weights of the samples
        acceleration = curvature @ points[near - lo]
        # The fit's own noise in the acceleration, taken off its square: a still face measures none.
        squared = float(np.maximum(acceleration**2 - noise**2 * float(curvature @ curvature), 0).mean())
        if squared == 0:
            return widest
        return float(np.clip(WIDTH_GAIN * (noise**2 / squared) ** 0.2, narrowest, widest))

    def fit(self, clocks: np.ndarray, samples: np.ndarray, at: int, width: float) -> np.ndarray:
        """Sample ``at`` smoothed: the local quadratic with Gaussian weights of sigma ``width``."""
        radius = math.ceil(RADIUS_SIGMAS * width)
        window = np.arange(max(0, at - radius), min(len(samples), at + radius + 1))
        span = np.asarray(clocks[window[0]:window[-1] + 1], dtype=np.float64) - clocks[at]
        scale = float(np.abs(span).max()) or 1.0
        rows = _polynomial_rows(span / scale, gaussian_weights(window - at, width), 2)
        points = np.asarray(samples[window[0]:window[-1] + 1], dtype=np.float64)
        return np.tensordot(rows[0], points, axes=1) if rows is not None else points[at - window[0]].copy()

    def smooth(self, points: np.ndarray, times: np.ndarray | None = None) -> np.ndarray:
        """A whole uninterrupted track, (T, ...) points per frame, against ``times`` (default:
        one per frame): what the tracker gives it, frame by frame, within its lookahead."""
        points = np.asarray(points, dtype=np.float64)
        if self.strength <= 0:
            return points.copy()
        clocks = np.arange(len(points), dtype=np.float64) if times is None else np.asarray(times, dtype=np.float64)
        widths = [self.width(clocks, points, s) for s in range(len(points))]
        return np.stack([self.fit(clocks, points, t, min(widths[max(0, t - self.spread):t + self.spread + 1]))
                         for t in range(len(points))])


def landmark_jitter(points: np.ndarray, times: np.ndarray) -> float:
    """How much landmarks (T, 5, 2) shake: the mean length of their second difference, in pixels
    per frame squared. Taken against ``times`` (the second divided difference, scaled by the
    median frame step squared), so that on variable-frame-rate video steady motion across a long
    frame is not counted as jitter; at a constant rate it is the plain second difference."""
    step = np.median(np.diff(times))
    velocity = np.diff(points, axis=0) / np.diff(times)[:, None, None]
    acceleration = np.diff(velocity, axis=0) / ((times[2:] - times[:-2]) / 2)[:, None, None]
    return float(np.linalg.norm(acceleration, axis=-1).mean() * step**2)


def eye_distance(points: np.ndarray) -> float:
    """The mean distance between the eyes of landmarks (T, 5, 2): the face's scale."""
    return float(np.linalg.norm(points[:, 1] - points[:, 0], axis=-1).mean())
