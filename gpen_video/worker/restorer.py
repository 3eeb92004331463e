"""GPEN and the paste-back on one device: upright RGB frames and their faces in, restored frames
out (align -> GPEN -> mask -> paste back). A :class:`~.device.DeviceWorker` gets one only for jobs
that restore, so ``--detect-only`` never loads GPEN's weights or warms it up."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from ..faces.align import invert_affine, reference_points, similarity_transforms, warp_faces
from ..faces.parse import FaceParser, MaskSmoother
from ..model import build_inference_model
from ..model.graphs import GraphedModel, padded
from ..model.weights import cache_dir
from ..options import RestoreOptions
from .compose import Compositor
from .messages import FaceSpec

log = logging.getLogger(__name__)


def compile_cache() -> Path:
    """Where torch.compile keeps what it makes (Inductor's FX graphs, AOT graphs, Triton kernels):
    under ``$GPEN_VIDEO_HOME``, so that the next process on this machine starts warm (Inductor's
    default, ``/tmp/torchinductor_USER``, goes with a reboot); a TORCHINDUCTOR_CACHE_DIR the user
    set wins. Set for this process by the first restorer that compiles."""
    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or cache_dir() / "torch-compile")


class FaceRestorer:
    """GPEN (compiled into a CUDA graph, or eager), the compositor and, for ``--mask parse``,
    ParseNet, on one device."""

    def __init__(self, state_dict: dict[str, torch.Tensor], options: RestoreOptions, device: torch.device,
                 compiled: bool) -> None:
        self.device = device
        self.compiled = compiled and device.type == "cuda"  # torch.compile + CUDA graphs: GPUs only
        precision = options.precision_on(str(device))
        # Eager on a GPU, the elementwise work runs fused in Triton kernels; compiled, the compiler fuses it.
        kernels = "triton" if device.type == "cuda" and not self.compiled else "torch"
        model = build_inference_model(state_dict, device=device, precision=precision, kernels=kernels)
        self.crop_size = model.config.size
        self.face_batch = options.batch_size  # faces per GPEN call; halved for good on out-of-memory
        self.out_of_memory = 0  # times the batch was halved
        self.model: Callable[[torch.Tensor], torch.Tensor] = model
        self._warming: threading.Thread | None = None
        if self.compiled:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache())
            self.model = GraphedModel(torch.compile(model, fullgraph=True, dynamic=False))
            # Compile and capture now, in the caller's thread: restorers must not compile concurrently
            # (dynamo is not thread-safe), and the 30-odd seconds belong before the first frame.
            log.info("compiling GPEN for %s (once per run, about half a minute)", device)
            self._warm_up()
        elif device.type == "cuda":
            # The first call of each batch shape chooses the convolutions' algorithms, about 2 s
            # for GPEN-512 on an H200: done now, beside the detector's first frames, instead of
            # after them (GPU batches are all padded to one shape).
            self._warming = threading.Thread(target=self._warm_up, name=f"gpen-warm-up-{device}", daemon=True)
            self._warming.start()
        self.compositor = Compositor(self.crop_size, device, options.strength)
        # --mask parse: ParseNet on the restored faces, in GPEN's precision on a GPU.
        self.parser = (FaceParser(options.parse_weights, device, half=precision != "fp32", progress=False)
                       if options.mask == "parse" else None)
        self.smoother = MaskSmoother()
        self.reference = reference_points(self.crop_size)

    def close(self) -> None:
        """Wait for GPEN's warm-up, which runs in a thread of its own until the first restoration
        joins it: if none comes, it may still be queuing CUDA work when the process exits, which
        would abort it."""
        if self._warming is not None:
            self._warming.join()
            self._warming = None

    @torch.no_grad()
    def _warm_up(self) -> None:
        """One GPEN batch of zeros: the host's choices for its shape are made once it is queued."""
        self.model(torch.zeros(self.face_batch, 3, self.crop_size, self.crop_size, device=self.device))

    @torch.no_grad()
    def _gpen(self, crops: torch.Tensor) -> torch.Tensor:
        """Restored crops in [0, 255], in fixed-size batches (a short one padded): on a GPU a
        compiled graph is then reused and eager convolutions keep the algorithms chosen for that
        shape; on any device a face comes out the same whatever faces share its batch (oneDNN's
        and cuDNN's sums change in the last bit with the batch size, not with the other faces),
        so a video restored in segments (``--resume``, a cluster) gives a whole run's frames.

        On CUDA out-of-memory the batch is halved for good and the same faces are run again: no
        face is dropped or repeated.
        """
        self.close()
        out = []
        start = 0
        while start < len(crops):
            batch = self.face_batch
            chunk = crops[start : start + batch]
            n = len(chunk)
            chunk = padded(chunk, batch)
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
    def restore_rgb(self, frames: torch.Tensor, faces: Sequence[Sequence[FaceSpec]],
                    indices: Sequence[int] | None = None, clip: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Restore ``faces[i]`` in ``frames[i]`` ((N, 3, H, W) upright RGB on this device, whole
        levels; ``indices`` their picture numbers, ``clip`` their job): the new frames, and the
        (N, H, W) bool mask of the pixels the pasted faces reach."""
        specs = [FaceSpec(*face) for fs in faces for face in fs]
        owner = np.array([i for i, fs in enumerate(faces) for _ in fs], dtype=np.int64)
        if not len(owner):
            return frames, torch.zeros_like(frames[:, 0], dtype=torch.bool)
        transforms = similarity_transforms(np.stack([f.landmarks for f in specs]), self.reference)
        crops = warp_faces(frames, owner, transforms, self.crop_size)
        restored = self._gpen(crops)
        masks = None
        if self.parser is not None:
            indices = indices if indices is not None else range(len(faces))
            keys = [(indices[i], f.track) for i, f in zip(owner, specs)]
            masks = self.smoother(clip, keys, self.parser.masks(restored))
        sizes = np.array([f.size for f in specs])
        return self.compositor.paste_batch(frames, restored, crops, invert_affine(transforms), sizes, owner, masks)
