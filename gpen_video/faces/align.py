"""Alignment exactly as the official GPEN inference crops faces: its own 5-point template, a
least-squares similarity, and a bicubic warp (batched, on whatever device the frames are on)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..transfer import to_device

#: The 5-point template GPEN's ``align_faces.py`` starts from: a 96x112 face crop (eyes, nose tip,
#: mouth corners), the widely used SphereFace/ArcFace reference points.
TEMPLATE_96x112 = np.array([
    [30.29459953, 51.69630051],
    [65.53179932, 51.50139999],
    [48.02519989, 71.73660278],
    [33.54930115, 92.3655014],
    [62.72990036, 92.20410156],
])
#: GPEN squares the template to 112x112, then pads each side by 0.25 of it: a 168 px frame of context.
_SQUARE_SHIFT = np.array([8.0, 0.0])
_PAD = 112 * 0.25
_PADDED_SIZE = 112 + 2 * _PAD


def reference_points(size: int) -> np.ndarray:
    """Where the 5 landmarks land in a ``size`` x ``size`` GPEN crop."""
    return (TEMPLATE_96x112 + _SQUARE_SHIFT + _PAD) * (size / _PADDED_SIZE)


def similarity_transforms(points: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Least-squares similarity (rotation, uniform scale, translation; Umeyama) from each set of
    ``points`` (N, K, 2) onto ``reference`` (K, 2), as (N, 2, 3) affine matrices.

    In 2-D the optimum has a closed form: with centred points p and q, the linear part is
    [[a, -b], [b, a]] with a = sum(p.q) / sum|p|^2 and b = sum(p x q) / sum|p|^2.
    """
    points = np.asarray(points, dtype=np.float64)
    src_mean = points.mean(axis=1, keepdims=True)
    dst_mean = reference.mean(axis=0)
    p = points - src_mean
    q = reference - dst_mean
    norm = (p**2).sum(axis=(1, 2))
    a = (p * q).sum(axis=(1, 2)) / norm
    b = (p[..., 0] * q[..., 1] - p[..., 1] * q[..., 0]).sum(axis=1) / norm
    linear = np.stack([np.stack([a, -b], -1), np.stack([b, a], -1)], axis=1)  # (N, 2, 2)
    translation = dst_mean - np.einsum("nij,nj->ni", linear, src_mean[:, 0])
    return np.concatenate([linear, translation[..., None]], axis=2)


def invert_affine(matrices: np.ndarray) -> np.ndarray:
    """Inverse of each (2, 3) affine matrix."""
    full = np.concatenate([matrices, np.broadcast_to([0.0, 0.0, 1.0], (*matrices.shape[:-2], 1, 3))], axis=-2)
    return np.linalg.inv(full)[..., :2, :]


def sampling_grid(transforms: np.ndarray, out_h: int, out_w: int, src_h: int, src_w: int,
                  origin: tuple[int, int] | np.ndarray = (0, 0), device: torch.device | str = "cpu") -> torch.Tensor:
    """``grid_sample`` coordinates that pull, for each output pixel, the source pixel ``transforms``
    maps it to (pixel centres at integer coordinates, as OpenCV). ``origin`` offsets the output
    pixels (x, y) when only a region of a larger output is produced: one for all, or one per transform."""
    m = to_device(transforms, device, torch.float64)  # (N, 2, 3): output -> source
    offsets = to_device(np.broadcast_to(np.asarray(origin, dtype=np.float64), (len(m), 2)).copy(), device)
    ys = torch.arange(out_h, dtype=torch.float64, device=device)
    xs = torch.arange(out_w, dtype=torch.float64, device=device)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    x = gx[None, :, :, None] + offsets[:, None, None, None, 0]  # (N, h, w, 1)
    y = gy[None, :, :, None] + offsets[:, None, None, None, 1]
    # Multiply-adds, not einsum: that one runs as a float64 matrix product with an inner size of 2.
    src = x * m[:, None, None, :, 0] + y * m[:, None, None, :, 1] + m[:, None, None, :, 2]  # (N, h, w, 2)
    scale = to_device([2.0 / src_w, 2.0 / src_h], device, torch.float64)
    return ((src + 0.5) * scale - 1.0).float()


def warp_faces(frames: torch.Tensor, frame_of_face: torch.Tensor | np.ndarray, transforms: np.ndarray,
               size: int) -> torch.Tensor:
    """Aligned crops (N, C, size, size) from float ``frames`` (F, C, H, W); face n is cut from frame
    ``frame_of_face[n]`` with the frame-to-crop affine ``transforms[n]``. Bicubic, zeros outside,
    like ``cv2.warpAffine(..., flags=cv2.INTER_CUBIC)``."""
    if len(transforms) == 0:
        return frames.new_zeros(0, frames.shape[1], size, size)
    h, w = frames.shape[2:]
    grid = sampling_grid(invert_affine(transforms), size, size, h, w, device=frames.device)
    source = frames[to_device(frame_of_face, frames.device, torch.long)]
    return F.grid_sample(source, grid, mode="bicubic", padding_mode="zeros", align_corners=False)
