"""Whether GPEN in half precision still computes what it computes in fp32, on the user's own checkpoint.

No trained checkpoint can be tested before it reaches a user, and StyleGAN2-style restorers have
shipped broken half-precision output: a layer whose activations overflow fp16 turns whole faces
into NaN, and a checkpoint trained differently can drift past what bf16 keeps. So the first time
an engine loads GPEN in half precision it runs one real aligned face (shipped in the package) both
ways and compares; each restored batch is also checked for values that are not finite
(:func:`finite_faces`), cheaply, on the device.
"""

from __future__ import annotations

from importlib import resources

import cv2
import numpy as np
import torch

#: The largest relative L2 difference from fp32 that a half-precision GPEN may show on the shipped
#: face: twice what the golden-file tests hold fp16 and bf16 to.
TOLERANCE = 0.02


def reference_face(size: int, device: torch.device) -> torch.Tensor:
    """The shipped aligned face (a frame of an MIT-licensed talking-head clip, aligned as the
    pipeline aligns faces) as GPEN's input: (1, 3, size, size), RGB in [-1, 1]."""
    data = resources.files("gpen_video").joinpath("data/aligned_face.jpg").read_bytes()
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr.shape[0] != size:
        bgr = cv2.resize(bgr, (size, size), interpolation=cv2.INTER_AREA if bgr.shape[0] > size else cv2.INTER_CUBIC)
    rgb = torch.from_numpy(np.ascontiguousarray(bgr[:, :, ::-1])).permute(2, 0, 1)[None].float()
    return (rgb / 127.5 - 1.0).to(device)


def relative_difference(got: torch.Tensor, want: torch.Tensor) -> float:
    """Relative L2 difference of ``got`` from ``want`` (fp32's output); infinite where ``got`` has
    values that are not finite."""
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return float("inf")
    return ((got - want).norm() / want.norm().clamp_min(1e-12)).item()


def finite_faces(restored: torch.Tensor) -> torch.Tensor:
    """Per face of a GPEN batch (N, 3, H, W), whether every value is finite: one reduction, left on the device."""
    return torch.isfinite(restored).flatten(1).all(dim=1)
