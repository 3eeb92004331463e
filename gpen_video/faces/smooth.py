"""Lag-free temporal smoothing of face landmarks.

Detector landmarks jitter by a pixel or two from frame to frame, and the aligned face crop follows
them, so restored faces shimmer. A centred local linear fit (degree-1 regression with Gaussian
weights over +-``window_radius`` frames) removes that noise without the lag of a causal filter and
without the bias a plain moving average has on steady motion and at track ends.
"""

from __future__ import annotations

import math

import numpy as np

#: The window ends 3 sigmas out, where the weights have fallen to 1.1% of the centre's: wider
#: would add next to nothing but lengthen the tracker's lookahead.
RADIUS_SIGMAS = 3.0


def window_radius(strength: float) -> int:
    """Frames on each side of a frame that its smoothed value depends on."""
    return math.ceil(RADIUS_SIGMAS * strength) if strength > 0 else 0


def gaussian_weights(offsets: np.ndarray, strength: float) -> np.ndarray:
    """Weights of samples ``offsets`` frames away from the frame being smoothed (strength = sigma in frames)."""
    return np.exp(-0.5 * (np.asarray(offsets, dtype=np.float64) / strength) ** 2)


def local_linear(x: np.ndarray, y: np.ndarray, weights: np.ndarray, x0: float) -> np.ndarray:
    """The weighted least-squares line through samples (``x``, ``y``), evaluated at ``x0``.

    ``y`` is (n, ...) and is fitted per coordinate. A line, not a constant, so steady motion is
    reproduced exactly even when the samples lie on one side of ``x0`` (track ends, gaps). With one
    distinct ``x`` the line is undefined and the weighted mean is returned.
    """
    dx = np.asarray(x, dtype=np.float64) - x0
    s0, s1, s2 = weights.sum(), weights @ dx, weights @ dx**2
    det = s0 * s2 - s1**2
    kernel = weights * (s2 - s1 * dx) / det if det > 1e-9 * s0 * s2 else weights / s0
    return np.tensordot(kernel, np.asarray(y, dtype=np.float64), axes=1)


def smooth_track(points: np.ndarray, strength: float, times: np.ndarray | None = None) -> np.ndarray:
    """Smooth one uninterrupted track, (T, ...) points per frame, offline.

    ``strength`` is the Gaussian sigma in frames (0 returns a copy). The fit runs against ``times``
    when given, so variable-frame-rate motion that is steady in time stays unbiased.
    """
    points = np.asarray(points, dtype=np.float64)
    radius = window_radius(strength)
    if radius == 0:
        return points.copy()
    x = np.arange(len(points), dtype=np.float64) if times is None else np.asarray(times, dtype=np.float64)
    smoothed = np.empty_like(points)
    for t in range(len(points)):
        window = np.arange(max(0, t - radius), min(len(points), t + radius + 1))
        smoothed[t] = local_linear(x[window], points[window], gaussian_weights(window - t, strength), x[t])
    return smoothed


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
