"""A decoded picture as the stages pass it on: its frame, its layout, and its copies beside it in
pinned and device memory (:class:`FrameBuffers`). An interlaced frame's two fields become
pictures of their own in :mod:`.fields`."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import av
import numpy as np
import torch

from .colour import PlaneLayout, to_rgb


class Decoded(NamedTuple):
    """A decoded picture, and (from NVDEC) its planes already packed on the GPU for the workers,
    and whether its packet came flagged as damaged by the container (NVDEC reports no concealment
    of its own; libavcodec's frames say so themselves)."""

    frame: av.VideoFrame
    staged: torch.Tensor | None = None
    damaged: bool = False


class FrameBuffers:
    """A picture's copies beside its decoded frame, with one lifecycle, each step taken by one stage:

    - ``decoded``: none yet;
    - ``staged``: its planes packed into one buffer for a GPU worker's single asynchronous copy:
      pinned host memory filled by the decode thread (worker.device.stage_planes), or GPU memory
      filled by NVDEC's decoder; or a slot of shared memory that worker processes read where it
      lies, and that stays staged until the frame is released (worker.shared.SharedFrames);
    - ``uploaded``: taken by the worker that detects it;
    - ``kept``: its planes (h, w) and upright RGB (3, H, W, uint8 whole levels) kept on that
      worker's device until restoration, so it crosses to the device and converts to RGB once;
    - ``released``: restored, or found to hold no face to restore.

    A step out of order raises: no two stages ever hold the same buffers."""

    def __init__(self) -> None:
        self.state = "decoded"
        self._host: torch.Tensor | None = None
        self._kept: tuple[list[torch.Tensor], torch.Tensor] | None = None
        self._give_back: weakref.finalize | None = None

    def _step(self, allowed: tuple[str, ...], to: str) -> None:
        if self.state not in allowed:
            raise RuntimeError(f"frame buffers: cannot go from {self.state} to {to}")
        self.state = to

    def stage(self, host: torch.Tensor, give_back: Callable[[], None] | None = None) -> None:
        """Staged in ``host``; ``give_back`` returns it to its owner on release (or when this
        picture is dropped unreleased: a shared slot outlives no frame)."""
        self._step(("decoded",), "staged")
        self._host = host
        if give_back is not None:
            self._give_back = weakref.finalize(self, give_back)

    @property
    def staged(self) -> torch.Tensor | None:
        """The staged buffer, left staged: a worker process reads it, and writes the restored
        planes back, where it lies."""
        return self._host if self.state == "staged" else None

    def take_staged(self) -> torch.Tensor | None:
        """The staged buffer for an upload, or None (never staged, or kept and let go)."""
        if self.state in ("decoded", "staged"):
            self.state = "uploaded"
        host, self._host = self._host, None
        return host

    def keep(self, planes: list[torch.Tensor], rgb: torch.Tensor) -> None:
        self._step(("uploaded",), "kept")
        self._kept = planes, rgb

    @property
    def device(self) -> torch.device | None:
        """The device that keeps the picture, if one does."""
        return self._kept[1].device if self._kept is not None else None

    def take_kept(self) -> tuple[list[torch.Tensor], torch.Tensor] | None:
        """The kept planes and RGB, for the restoration (None when not kept); the picture lets go of them."""
        kept, self._kept = self._kept, None
        self.state = "released"
        return kept

    def release(self) -> None:
        """Nothing more of this picture will be restored: its buffers go."""
        self._host = self._kept = None
        self.state = "released"
        if self._give_back is not None:
            self._give_back()


@dataclass(frozen=True)
class FieldOf:
    """Where a field picture comes from: its decoded frame, whose lines it holds, and how long
    after the frame's time it was taken (0 for the first field, half a frame for the second)."""

    whole: SourceFrame
    parity: int
    delay: float


@dataclass
class SourceFrame:
    """One decoded video frame, or one field of an interlaced one, and where it sits in time."""

    index: int  # in decoding order; an interlaced video's fields are numbered, two per frame
    frame: av.VideoFrame  # planar YUV as decoded: the encoder keeps its samples wherever no face changed
    layout: PlaneLayout  # how its planes become upright RGB
    #: "" for a clean frame; "corrupt" if the decoder concealed errors in it; "repeated" if its
    #: packet could not be decoded and the previous frame stands in, at this frame's time.
    damage: str = ""
    buffers: FrameBuffers = field(default_factory=FrameBuffers)  # its copies in pinned and device memory
    field: FieldOf | None = None  # set for a field of an interlaced frame (fields.split_fields)

    @property
    def time(self) -> float:
        return float(self.frame.time or 0.0) + (self.field.delay if self.field is not None else 0.0)

    def rgb(self) -> np.ndarray:
        """Upright RGB24, converted on the CPU (for tests and tools; the pipeline converts on its devices)."""
        return to_rgb(self.frame, self.layout)
