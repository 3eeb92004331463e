"""Paste-back: restored faces go back into the frame through the inverse warp, feathered so that
no edge shows; every pixel outside the faces' masks is left bit-identical."""

from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from .faces.align import invert_affine, sampling_grid
from .transfer import to_device

#: The official paste-back mask: a rectangle inset 26 px of 512, Gaussian-blurred twice (101 px, sigma 4).
_MASK_MARGIN = 26 / 512
_MASK_SIGMA = 4 / 512
#: Faces smaller than this (shorter box side, px) get the official light blur before pasting.
SMALL_FACE = 100
_SMALL_FACE_KERNEL = torch.tensor([1.0, 2.0, 1.0]) / 4
#: Faces warped back in one call; each call pads its faces' regions to the largest of them.
_PASTE_CHUNK = 16


def face_mask(size: int) -> np.ndarray:
    """The feathered rectangle used for blending, at the model's crop size (the official one at 512)."""
    mask = np.zeros((size, size), np.float32)
    margin = round(_MASK_MARGIN * size)
    cv2.rectangle(mask, (margin, margin), (size - margin, size - margin), 1.0, -1, cv2.LINE_AA)
    sigma = _MASK_SIGMA * size
    ksize = 2 * round(50 * size / 512) + 1
    for _ in range(2):
        mask = cv2.GaussianBlur(mask, (ksize, ksize), sigma)
    return mask


class Compositor:
    """Blends restored faces into frames on the frames' device (GPU or CPU alike)."""

    def __init__(self, crop_size: int, device: torch.device | str = "cpu", strength: float = 1.0) -> None:
        if not 0.0 <= strength <= 1.0:
            raise ValueError(f"strength must be in [0, 1], got {strength}")
        self.crop_size = crop_size
        self.strength = strength
        self.mask = torch.from_numpy(face_mask(crop_size)).to(device)[None]
        self.blur = (_SMALL_FACE_KERNEL[:, None] * _SMALL_FACE_KERNEL[None]).expand(3, 1, 3, 3).to(device)

    def _prepare(self, restored: torch.Tensor, original: torch.Tensor, sizes: np.ndarray) -> torch.Tensor:
        """The faces to paste, as (F, 4, S, S): RGB then mask."""
        small = sizes < SMALL_FACE
        if small.any():
            blurred = F.conv2d(F.pad(restored, (1, 1, 1, 1), mode="reflect"), self.blur, groups=3)
            restored = torch.where(to_device(small, restored.device)[:, None, None, None], blurred, restored)
        blended = self.strength * restored + (1.0 - self.strength) * original
        return torch.cat([blended, self.mask[None].expand(len(restored), -1, -1, -1)], dim=1)

    def _footprint(self, crop_to_frame: np.ndarray, height: int, width: int) -> tuple[int, int, int, int] | None:
        """Frame region (x0, y0, x1, y1) the crop can reach, with a margin for the bicubic taps."""
        s = self.crop_size
        corners = np.array([[0, 0, 1], [s, 0, 1], [0, s, 1], [s, s, 1]], dtype=np.float64) - [0.5, 0.5, 0]
        xy = corners @ crop_to_frame.T
        x0, y0 = np.floor(xy.min(axis=0)).astype(int) - 2
        x1, y1 = np.ceil(xy.max(axis=0)).astype(int) + 3
        x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, width), min(y1, height)
        return (x0, y0, x1, y1) if x0 < x1 and y0 < y1 else None

    def paste_batch(self, frames: torch.Tensor, restored: torch.Tensor, original: torch.Tensor,
                    crop_to_frame: np.ndarray, sizes: np.ndarray,
                    owner: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """``frames`` (N, 3, H, W), float RGB in whole levels, with face k pasted into frame
        ``owner[k]`` (where faces overlap, the larger mask wins), and the (N, H, W) bool mask of the
        pixels the masks reach; every other pixel keeps its exact value.

        Face k is ``restored[k]`` (3, S, S) blended with ``original[k]`` by the strength, mapped
        by ``crop_to_frame[k]``; ``sizes[k]`` (shorter box side, px) picks the small-face blur.
        Faces are warped back in chunks, each over a region padded to the chunk's largest.
        """
        height, width = frames.shape[-2:]
        face_layer = torch.zeros_like(frames)
        mask_layer = torch.zeros_like(frames[:, :1])
        regions = [self._footprint(m, height, width) for m in crop_to_frame]
        todo = [k for k, region in enumerate(regions) if region is not None]
        if todo:
            prepared = self._prepare(restored, original, np.asarray(sizes))
            frame_to_crop = invert_affine(np.asarray(crop_to_frame))
        for start in range(0, len(todo), _PASTE_CHUNK):
            chunk = todo[start : start + _PASTE_CHUNK]
            boxes = np.array([regions[k] for k in chunk])
            h, w = int((boxes[:, 3] - boxes[:, 1]).max()), int((boxes[:, 2] - boxes[:, 0]).max())
            grid = sampling_grid(frame_to_crop[chunk], h, w, self.crop_size, self.crop_size, origin=boxes[:, :2],
                                 device=frames.device)
            warped = F.grid_sample(prepared[chunk], grid, mode="bicubic", padding_mode="zeros", align_corners=False)
            rgb, mask = warped[:, :3].clamp(0, 255), warped[:, 3:].clamp(0, 1)
            for j, k in enumerate(chunk):
                x0, y0, x1, y1 = regions[k]
                f = int(owner[k])
                face_mask_k = mask[j, :, : y1 - y0, : x1 - x0]
                current = mask_layer[f, :, y0:y1, x0:x1]
                wins = face_mask_k > current
                mask_layer[f, :, y0:y1, x0:x1] = torch.where(wins, face_mask_k, current)
                face_layer[f, :, y0:y1, x0:x1] = torch.where(wins, rgb[j, :, : y1 - y0, : x1 - x0],
                                                             face_layer[f, :, y0:y1, x0:x1])
        blended = frames * (1 - mask_layer) + face_layer * mask_layer
        reached = mask_layer > 0
        return torch.where(reached, blended.round().clamp(0, 255), frames), reached[:, 0]
