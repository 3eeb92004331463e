"""Paste-back: restored faces go back into the frame through the inverse warp, feathered so that
no edge shows; every pixel outside the faces' masks is left bit-identical."""

from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from ..faces.align import invert_affine, sampling_grid
from ..transfer import to_device

#: The official paste-back mask: a rectangle inset 26 px of 512, Gaussian-blurred twice (101 px, sigma 4).
_MASK_MARGIN = 26 / 512
_MASK_SIGMA = 4 / 512
#: Faces smaller than this (shorter box side, px) get the official light blur before pasting.
SMALL_FACE = 100
_SMALL_FACE_KERNEL = torch.tensor([1.0, 2.0, 1.0]) / 4
#: Faces warped back in one call; each call pads its faces' regions to the largest of them.
_PASTE_CHUNK = 16
#: Faces of one paste_batch call are ranked in the low bits of a 64-bit key: at most this many.
_RANK_SPAN = 1 << 20


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

    def __init__(self, crop_size: int, device: torch.device | str = "cpu") -> None:
        self.crop_size = crop_size
        self.mask = torch.from_numpy(face_mask(crop_size)).to(device)[None]
        self.blur = (_SMALL_FACE_KERNEL[:, None] * _SMALL_FACE_KERNEL[None]).expand(3, 1, 3, 3).to(device)

    def _prepare(self, restored: torch.Tensor, sizes: np.ndarray, masks: torch.Tensor | None,
                 strength: float) -> torch.Tensor:
        """The faces to paste, as (F, 4, S, S): RGB then mask: the feathered box, or each face's own
        within it (the box's feathered edge reaches zero inside the crop, so no seam shows where
        the crop ends; the official parse mask is up to 0.2 there), times the strength. The
        strength thus blends the restored face with the decoded frame itself: the official alpha
        blends it with the face's aligned crop, which, warped there and back, is softer than the
        frame wherever the face is larger than the crop."""
        small = sizes < SMALL_FACE
        if small.any():
            blurred = F.conv2d(F.pad(restored, (1, 1, 1, 1), mode="reflect"), self.blur, groups=3)
            restored = torch.where(to_device(small, restored.device)[:, None, None, None], blurred, restored)
        mask = masks[:, None] * self.mask if masks is not None else self.mask[None].expand(len(restored), -1, -1, -1)
        return torch.cat([restored, strength * mask], dim=1)

    def _footprints(self, crop_to_frame: np.ndarray, height: int, width: int) -> np.ndarray:
        """Frame region (x0, y0, x1, y1) each crop can reach, with a margin for the bicubic taps,
        as an (F, 4) int array; a crop wholly outside the frame gets an empty region (x0 >= x1)."""
        s = self.crop_size
        corners = np.array([[0, 0, 1], [s, 0, 1], [0, s, 1], [s, s, 1]], dtype=np.float64) - [0.5, 0.5, 0]
        xy = np.einsum("kj,fij->fki", corners, crop_to_frame)  # (F, 4 corners, 2)
        low = np.floor(xy.min(axis=1)).astype(int) - 2
        high = np.ceil(xy.max(axis=1)).astype(int) + 3
        return np.concatenate([np.maximum(low, 0), np.minimum(high, [width, height])], axis=1)

    def paste_batch(self, frames: torch.Tensor, restored: torch.Tensor, crop_to_frame: np.ndarray,
                    sizes: np.ndarray, owner: np.ndarray, masks: torch.Tensor | None = None,
                    strength: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """``frames`` (N, 3, H, W), float RGB in whole levels, with face k pasted into frame
        ``owner[k]`` (where faces overlap, the larger mask wins, the earlier face on a tie), and
        the (N, H, W) bool mask of the pixels the masks reach; every other pixel keeps its exact value.

        Face k is ``restored[k]`` (3, S, S), mapped by ``crop_to_frame[k]``, under ``masks[k]``
        ((S, S) in [0, 1]; default: the feathered box) times the strength;
        ``sizes[k]`` (shorter box side, px) picks the small-face blur.
        Faces are warped back in chunks, each over a region padded to the chunk's largest. The
        overlaps are settled for all faces at once, by a per-pixel maximum of a key that orders
        faces by mask value, then by earliness: a fixed number of kernels per chunk, not per face.
        """
        if not 0.0 <= strength <= 1.0:
            raise ValueError(f"strength must be in [0, 1], got {strength}")
        n, _, height, width = frames.shape
        device = frames.device
        crop_to_frame = np.asarray(crop_to_frame, dtype=np.float64).reshape(-1, 2, 3)
        regions = self._footprints(crop_to_frame, height, width)
        todo = np.flatnonzero((regions[:, 0] < regions[:, 2]) & (regions[:, 1] < regions[:, 3]))
        if not len(todo):
            return frames, torch.zeros_like(frames[:, 0], dtype=torch.bool)
        # Chunks of faces of like size: a chunk's regions are padded to its largest face's. The
        # order of faces across chunks does not change the result (the key ranks faces by index).
        areas = (regions[:, 2] - regions[:, 0]) * (regions[:, 3] - regions[:, 1])
        todo = todo[np.argsort(areas[todo], kind="stable")]
        prepared = self._prepare(restored, np.asarray(sizes), masks, strength)
        frame_to_crop = invert_affine(crop_to_frame)
        # Per pixel of the frames, the best key so far; one slot past the end takes every write
        # that must land nowhere (pixels of a chunk's padding, or of a face that lost).
        best = torch.zeros(n * height * width + 1, dtype=torch.int64, device=device)
        chunks = []
        for start in range(0, len(todo), _PASTE_CHUNK):
            chunk = todo[start : start + _PASTE_CHUNK]
            boxes = regions[chunk]
            h, w = int((boxes[:, 3] - boxes[:, 1]).max()), int((boxes[:, 2] - boxes[:, 0]).max())
            grid = sampling_grid(frame_to_crop[chunk], h, w, self.crop_size, self.crop_size, origin=boxes[:, :2],
                                 device=device)
            # A NumPy index would go up in a blocking copy, and the host would wait here for GPEN to finish.
            faces = prepared[to_device(chunk, device)]
            warped = F.grid_sample(faces, grid, mode="bicubic", padding_mode="zeros", align_corners=False)
            rgb, mask = warped[:, :3].clamp(0, 255), warped[:, 3].clamp(0, 1)
            index, inside = self._pixel_index(boxes, owner[chunk], h, w, height, width, device)
            index = torch.where(inside, index, len(best) - 1)
            # Non-negative float32 values order as their bit patterns; the low bits rank the faces,
            # the earlier higher. A zero mask gets key 0 and never wins.
            rank = to_device((_RANK_SPAN - 1 - chunk)[:, None, None], device)
            key = torch.where(inside & (mask > 0), mask.view(torch.int32).long() * _RANK_SPAN + rank, 0)
            best.scatter_reduce_(0, index.flatten(), key.flatten(), "amax")
            chunks.append((rgb, index, key))
        plane = height * width
        face_layer = torch.zeros(n * 3 * plane + 1, dtype=frames.dtype, device=device)
        channel = torch.arange(3, device=device)[None, :, None, None] * plane
        for rgb, index, key in chunks:
            won = ((key > 0) & (key == best[index]))[:, None]  # the sink's key is never positive
            target = (index // plane * 3 * plane + index % plane)[:, None] + channel
            face_layer.scatter_(0, torch.where(won, target, len(face_layer) - 1).flatten(), rgb.flatten())
        best = best[:-1]
        mask_layer = (best // _RANK_SPAN).int().view(torch.float32).view(n, 1, height, width)
        face_layer = face_layer[:-1].view(n, 3, height, width)
        blended = frames * (1 - mask_layer) + face_layer * mask_layer
        reached = mask_layer > 0
        return torch.where(reached, blended.round().clamp(0, 255), frames), reached[:, 0]

    @staticmethod
    def _pixel_index(boxes: np.ndarray, owner: np.ndarray, h: int, w: int, height: int, width: int,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """For each face of a chunk, the flat index (frame * H * W + y * W + x) of every pixel of its
        padded (h, w) region, and which of them lie in the face's own region."""
        boxes_t = to_device(boxes, device, torch.int64)
        owner_t = to_device(np.asarray(owner), device, torch.int64)
        ys = torch.arange(h, device=device)[None, :, None] + boxes_t[:, 1, None, None]
        xs = torch.arange(w, device=device)[None, None, :] + boxes_t[:, 0, None, None]
        inside = (ys < boxes_t[:, 3, None, None]) & (xs < boxes_t[:, 2, None, None])
        index = (owner_t[:, None, None] * height + ys) * width + xs
        return index, inside
