"""The work of one device: detect faces in frames, and restore the tracked faces of frames
(align -> GPEN -> paste back). One instance per GPU (or one for the CPU)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .compose import Compositor, PastedFace
from .faces.align import invert_affine, reference_points, similarity_transforms, warp_faces
from .faces.detect import Face, FaceDetector
from .model import build_inference_model
from .model.graphs import GraphedModel

log = logging.getLogger(__name__)


@dataclass
class DeviceSettings:
    device: str = "cpu"
    precision: str = "fp32"
    face_batch: int = 16  # faces per GPEN call
    compile: bool = False  # torch.compile + CUDA graphs (GPU only): ~30 s to start, several times faster
    detector: str = "retinaface-r50"
    detector_weights: str | Path | None = None
    threshold: float = 0.9
    min_face: float = 0.0
    max_faces: int | None = None
    strength: float = 1.0


@dataclass
class Restored:
    """A frame after restoration: the new upright RGB image and which pixels changed."""

    image: np.ndarray
    changed: np.ndarray  # bool (H, W)
    faces: int


class DeviceWorker:
    """Detector, GPEN and compositor living on one device."""

    def __init__(self, state_dict: dict[str, torch.Tensor], settings: DeviceSettings) -> None:
        self.settings = settings
        self.device = torch.device(settings.device)
        model = build_inference_model(state_dict, device=self.device, precision=settings.precision)
        self.crop_size = model.config.size
        self.face_batch = settings.face_batch
        self.out_of_memory = 0  # times the batch was halved
        self.model: Callable[[torch.Tensor], torch.Tensor] = model
        if settings.compile and self.device.type == "cuda":
            self.model = GraphedModel(torch.compile(model, fullgraph=True, dynamic=False))
            # Compile and capture now, in the caller's thread: workers must not compile concurrently
            # (dynamo is not thread-safe), and the 30-odd seconds belong before the first frame.
            log.info("compiling GPEN for %s (once per run, about half a minute)", self.device)
            with torch.no_grad():
                self.model(torch.zeros(settings.face_batch, 3, self.crop_size, self.crop_size, device=self.device))
        # The detector runs in fp32: in fp16 RetinaFace found none of the ~6 small faces per frame of
        # the 1080p crowd clip on an H200 (fp32 found all), and it is a small share of the work.
        self.detector = FaceDetector(settings.detector, settings.detector_weights, device=self.device,
                                     threshold=settings.threshold,
                                     min_size=settings.min_face, max_faces=settings.max_faces, progress=False)
        self.compositor = Compositor(self.crop_size, self.device, settings.strength)
        self.reference = reference_points(self.crop_size)

    def detect(self, images: Sequence[np.ndarray]) -> list[list[Face]]:
        return self.detector.detect(np.stack(images))

    @torch.no_grad()
    def _gpen(self, crops: torch.Tensor) -> torch.Tensor:
        """Restored crops in [0, 255], in fixed-size batches (padded) so compiled graphs are reused.

        On CUDA out-of-memory the batch is halved for good and the same faces are run again: no
        face is dropped or repeated.
        """
        out = []
        start = 0
        while start < len(crops):
            batch = self.face_batch
            chunk = crops[start : start + batch]
            n = len(chunk)
            if n < batch and self.settings.compile:
                chunk = torch.cat([chunk, chunk[-1:].expand(batch - n, -1, -1, -1)])
            try:
                y = self.model(chunk / 127.5 - 1.0)[:n]  # official normalisation: (x/255 - 0.5) / 0.5
            except torch.cuda.OutOfMemoryError:
                if batch == 1:
                    raise
                self.face_batch = batch // 2
                self.out_of_memory += 1
                torch.cuda.empty_cache()
                log.warning("CUDA out of memory on %s: GPEN batch halved to %d", self.device, self.face_batch)
                continue
            out.append(((y * 0.5 + 0.5).clamp(0, 1) * 255).float())
            start += n
        return torch.cat(out) if out else crops

    @torch.no_grad()
    def restore(self, images: Sequence[np.ndarray], faces: Sequence[Sequence[tuple[np.ndarray, float]]]) -> list[Restored]:
        """Restore ``faces[i]`` — (landmarks (5, 2), box size) pairs — in ``images[i]`` (upright RGB)."""
        frames = torch.from_numpy(np.stack(images)).to(self.device)
        owner = np.array([i for i, fs in enumerate(faces) for _ in fs], dtype=np.int64)
        results = []
        if len(owner):
            points = np.stack([p for fs in faces for p, _ in fs])
            transforms = similarity_transforms(points, self.reference)
            crops = warp_faces(frames.permute(0, 3, 1, 2).float(), owner, transforms, self.crop_size)
            restored = self._gpen(crops)
            inverse = invert_affine(transforms)
            sizes = [s for fs in faces for _, s in fs]
        for i, frame in enumerate(frames):
            picked = np.flatnonzero(owner == i)
            if not len(picked):
                results.append(Restored(images[i], np.zeros(images[i].shape[:2], bool), 0))
                continue
            pasted = [PastedFace(restored[k], crops[k], inverse[k], sizes[k]) for k in picked]
            image, changed = self.compositor.paste(frame, pasted)
            results.append(Restored(image.cpu().numpy(), changed.cpu().numpy(), len(picked)))
        return results
