"""What the pipeline's stages hand each other, and what a worker must do: data-only messages and
one worker interface. A device's worker runs in a thread of this process
(:class:`~.device.DeviceWorker`) or in a process of its own (:class:`~.process.ProcessWorker`);
the pipeline does not tell them apart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np
import torch

from ..faces.detect import Face, box_size
from ..options import RestoreOptions

if TYPE_CHECKING:
    import av

    from ..faces.track import TrackedFrame
    from ..media.frames import SourceFrame
    from ..transfer import Pending



class FaceSpec(NamedTuple):
    """A face to restore: its landmarks (5, 2), the shorter side of its box in px, and its track
    (-1: none), along which ``--mask parse`` smooths its masks."""

    landmarks: np.ndarray
    size: float
    track: int = -1


class Paste(NamedTuple):
    """How a job's restored faces go back into its frames: blended at ``strength`` (0..1) under
    the feathered box, or with ``parse``, under each face's own mask from the face parser (the
    checkpoint ``parse_weights``; None: the cached one). A job brings its own, so that one warm
    engine restores each job, or each preview, as its options say."""

    strength: float = 1.0
    parse: bool = False
    parse_weights: str | None = None

    @classmethod
    def of(cls, options: RestoreOptions) -> Paste:
        weights = str(options.parse_weights) if options.parse_weights is not None else None
        return cls(options.strength, options.mask == "parse", weights)


@dataclass
class Restored:
    """A frame after restoration, ready for the encoder: the decoded samples wherever no face reached."""

    frame: av.VideoFrame
    faces: int


class Worker(Protocol):
    """A device's detector and restorer, as the pipeline uses it: work is queued and returns at
    once, its result collected later (:class:`~gpen_video.transfer.Pending`)."""

    device: torch.device
    compiled: bool  # torch.compile and CUDA graphs
    face_batch: int  # faces per GPEN call now (lowered after running out of memory)
    out_of_memory: int  # times the GPEN batch was lowered

    @property
    def restores(self) -> bool: ...  # GPEN is loaded

    @property
    def alive(self) -> bool: ...  # it can take work (a worker process may have died)

    def load_restorer(self, state_dict: dict[str, torch.Tensor]) -> Pending[None]: ...

    def take_notes(self) -> list[str]: ...  # what the next job's summary must say (a precision fallback), once

    def stage(self, frame: SourceFrame) -> None: ...  # on the decode thread, where this kind reads frames

    def prepare_detection(self, frames: int, height: int, width: int) -> None: ...

    def queue_detect(self, frames: Sequence[SourceFrame]) -> Pending[tuple[list[list[Face]], np.ndarray]]: ...

    def queue_restore(self, frames: Sequence[SourceFrame], faces: Sequence[Sequence[FaceSpec]],
                      clip: int = 0, paste: Paste = Paste()) -> Pending[list[Restored]]: ...

    def close(self) -> None: ...


# ---- engine -> workers ------------------------------------------------------------------------

@dataclass
class PrepareDetection:
    """For the worker on ``device``, ahead of a job's first detection: ready its detector for
    batches of up to ``frames`` pictures of ``height`` x ``width`` (see
    :meth:`Worker.prepare_detection`), while GPEN loads and the first frames decode."""

    device: torch.device
    frames: int
    height: int
    width: int


# ---- decode -> workers -> tracker -------------------------------------------------------------

@dataclass
class DetectBatch:
    """Frames for any worker to detect faces in."""

    frames: list[SourceFrame]


@dataclass
class Detected:
    """A detected batch, back to the tracker: each frame's faces and scene thumbnail."""

    frames: list[SourceFrame]
    faces: list[list[Face]]
    thumbnails: np.ndarray


@dataclass
class Passed:
    """Frames outside a time range and its tracking margin, from the decoder to the tracker
    without detection: the tracker sends them to the encoder as decoded, in their turn."""

    frames: list[SourceFrame]


@dataclass
class DecodingDone:
    """The decoder's last word: the index after its last picture (fields of interlaced video
    count), which is how many it decoded unless it started part-way (a segment of the video)."""

    pictures: int


# ---- tracker -> workers -> encoder ------------------------------------------------------------

@dataclass
class RestoreBatch:
    """Tracked frames with faces, for a worker of the device that holds them (any when None), of
    the job numbered ``clip``, pasted back as ``paste`` says."""

    device: torch.device | None
    frames: list[SourceFrame]
    tracked: list[TrackedFrame]
    clip: int = 0
    paste: Paste = Paste()

    def faces(self) -> list[list[FaceSpec]]:
        """Each frame's faces as the worker restores them."""
        return [[FaceSpec(f.landmarks, box_size(f.box), f.track) for f in t.faces] for t in self.tracked]


@dataclass
class ToEncode:
    """A picture for the encoder, restored (``result``) or as decoded (None)."""

    source: SourceFrame
    result: Restored | None


@dataclass
class TrackingDone:
    """The tracker's last word: the pictures up to which the encoder has everything."""

    pictures: int


TrackerInput = Detected | Passed | DecodingDone
EncoderInput = ToEncode | TrackingDone  # and av.Packet: another stream's packet, muxed as it is
