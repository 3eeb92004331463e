"""Decoding: frames as upright RGB arrays with their presentation times."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np


def upright(image: np.ndarray, rotation: int) -> np.ndarray:
    """Turn a decoded frame the way a player shows it.

    ``rotation`` is the display matrix's counter-clockwise angle in degrees (PyAV's
    ``frame.rotation``); a phone video tagged -90 is stored sideways and shown turned clockwise.
    """
    return np.ascontiguousarray(np.rot90(image, k=round(rotation / 90) % 4))


@dataclass
class DecodedFrame:
    index: int
    time: float  # seconds, from the frame's own timestamp
    image: np.ndarray  # (H, W, 3) uint8 RGB, upright


def read_frames(path: str | Path, limit: int | None = None) -> Iterator[DecodedFrame]:
    """Every video frame of the first video stream, in presentation order."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for index, frame in enumerate(container.decode(stream)):
            if limit is not None and index >= limit:
                break
            yield DecodedFrame(index, float(frame.time or 0.0), upright(frame.to_ndarray(format="rgb24"), frame.rotation))
