"""Paste-back: only the faces change, and the warp/inverse-warp round trip is faithful."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpen_video.faces.align import invert_affine, reference_points, sampling_grid, similarity_transforms, warp_faces
from gpen_video.worker.compose import Compositor, face_mask

from .conftest import read_rgb


def _paste_identity(rgb: np.ndarray, faces, size: int, restore=lambda crop: crop, strength: float = 1.0):
    """Crop every face, 'restore' it, paste it back; returns the new frame, the mask of the pixels
    the pasted faces reach, each face's crop -> frame transform, and the compositor."""
    frame = torch.from_numpy(rgb).permute(2, 0, 1)[None].float()
    owner = np.zeros(len(faces), dtype=np.int64)
    transforms = similarity_transforms(np.stack([f.landmarks for f in faces]), reference_points(size))
    crops = warp_faces(frame, owner, transforms, size)
    comp = Compositor(size)
    crop_to_frame = invert_affine(transforms)
    image, reached = comp.paste_batch(frame, restore(crops), crop_to_frame, np.array([f.size for f in faces]), owner,
                                      strength=strength)
    return image[0].permute(1, 2, 0).to(torch.uint8).numpy(), reached[0].numpy(), crop_to_frame, comp


def test_mask_is_the_official_feathered_rectangle():
    mask = face_mask(512)
    assert mask.shape == (512, 512) and mask.dtype == np.float32
    assert mask[256, 256] == pytest.approx(1.0) and mask[0, 0] < 1e-6
    assert 0.3 < mask[256, 26] < 0.7  # the edge of the 26 px inset, half way up the feather
    np.testing.assert_allclose(mask, mask.T, atol=1e-6)  # a square inset, feathered alike on all sides


@pytest.mark.parametrize("image", ["whole_two_people.jpg", "whole_Solvay_conference_1927.png"])
def test_pixels_outside_the_masks_are_bit_identical(detector, image):
    rgb = read_rgb(image)
    faces = detector.detect(rgb[None])[0]
    out, reached, _, _ = _paste_identity(rgb, faces, 256, restore=lambda crop: 255 - crop)  # a visibly different "face"
    changed = np.any(out != rgb, axis=2)
    assert not np.any(changed & ~reached)  # the mask the encoder relies on covers every change
    assert changed.sum() > 0
    # Recompute the union of the pasted masks independently of the compositor's own bookkeeping.
    union = np.zeros(rgb.shape[:2], bool)
    h, w = union.shape
    ys, xs = np.mgrid[0:h, 0:w]
    mask = face_mask(256)
    for f in faces:
        m = similarity_transforms(f.landmarks[None], reference_points(256))[0]
        u = np.round(m[0, 0] * xs + m[0, 1] * ys + m[0, 2]).astype(int)
        v = np.round(m[1, 0] * xs + m[1, 1] * ys + m[1, 2]).astype(int)
        inside = (u >= -2) & (u < 258) & (v >= -2) & (v < 258)
        union |= inside & (mask[v.clip(0, 255), u.clip(0, 255)] > 0)
    assert not np.any(changed & ~union)
    np.testing.assert_array_equal(out[~union], rgb[~union])


def test_identity_restoration_round_trips_within_two_grey_levels(detector):
    rgb = read_rgb("whole_two_people.jpg")
    faces = detector.detect(rgb[None])[0]
    assert len(faces) == 2 and all(f.size >= 100 for f in faces)  # no small-face blur in the way
    out, _, crop_to_frame, comp = _paste_identity(rgb, faces, 512)
    inside = np.zeros(rgb.shape[:2], bool)
    for x0, y0, x1, y1 in comp._footprints(crop_to_frame, *rgb.shape[:2]):
        inside[y0 + 40 : y1 - 40, x0 + 40 : x1 - 40] = True
    diff = np.abs(out.astype(int) - rgb.astype(int))[inside]
    assert diff.mean() < 2.0


def _paste_one_face_at_a_time(frames, faces, masks, crop_to_frame, owner, comp):
    """The composite by its definition, face after face over whole frames: a face's pixel replaces
    what is there where its mask is larger than any before it; then blend and round."""
    n, _, height, width = frames.shape
    size = comp.crop_size
    face_layer, mask_layer = torch.zeros_like(frames), torch.zeros_like(frames[:, :1])
    for k, m in enumerate(crop_to_frame):
        grid = sampling_grid(invert_affine(m[None]), height, width, size, size)
        warped = torch.nn.functional.grid_sample(torch.cat([faces[k : k + 1], masks[k : k + 1]], 1), grid,
                                                 mode="bicubic", padding_mode="zeros", align_corners=False)
        rgb, mask = warped[:, :3].clamp(0, 255), warped[:, 3:].clamp(0, 1)
        f = owner[k]
        wins = mask[0] > mask_layer[f]
        mask_layer[f] = torch.where(wins, mask[0], mask_layer[f])
        face_layer[f] = torch.where(wins, rgb[0], face_layer[f])
    blended = (frames * (1 - mask_layer) + face_layer * mask_layer).round().clamp(0, 255)
    return torch.where(mask_layer > 0, blended, frames)


def test_overlapping_faces_composite_as_if_pasted_one_at_a_time(detector):
    """Crowded faces overlap; where they do the larger mask wins and on a tie the earlier face,
    exactly as pasting them one after another over whole frames would give."""
    rgb = read_rgb("whole_Solvay_conference_1927.png")
    faces = detector.detect(rgb[None])[0]
    frames = torch.from_numpy(np.stack([rgb, rgb[::-1].copy()])).permute(0, 3, 1, 2).float()
    owner = np.array([0] * len(faces) + [1] * len(faces))
    points = np.stack([f.landmarks for f in faces])
    flipped = points.copy()
    flipped[..., 1] = rgb.shape[0] - 1 - flipped[..., 1]
    transforms = similarity_transforms(np.concatenate([points, flipped]), reference_points(256))
    crops = warp_faces(frames, owner, transforms, 256)
    restored = 255 - crops
    comp = Compositor(256)
    crop_to_frame = invert_affine(transforms)
    regions = comp._footprints(crop_to_frame, *rgb.shape[:2])
    overlaps = sum(max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1])) > 0
                   for i, a in enumerate(regions[: len(faces)]) for b in regions[i + 1 : len(faces)])
    assert len(faces) > 20 and overlaps > 5  # a real test of the overlap rule
    image, reached = comp.paste_batch(frames, restored, crop_to_frame, np.full(len(owner), 200.0), owner)
    masks = comp.mask[None].expand(len(owner), -1, -1, -1)
    expected = _paste_one_face_at_a_time(frames, restored, masks, crop_to_frame, owner, comp)
    assert torch.equal(image, expected)
    assert torch.equal(reached, (image != frames).any(1) | reached)  # every change lies in the reached mask


def test_strength_blends_the_restored_face_with_the_decoded_frame_itself(detector):
    """Strength 0 leaves the frame bit for bit; strength 0.5 lies half way between the frame and the
    full restoration on every pixel (within the rounding of each to whole levels), so the original's
    share is the decoded picture, not its crop warped there and back, which is softer (the face in
    this photo is larger than the 128 px crop)."""
    rgb = read_rgb("whole_two_people.jpg")
    faces = detector.detect(rgb[None])[0]
    assert max(f.size for f in faces) > 128
    full = _paste_identity(rgb, faces, 128, restore=lambda crop: 255 - crop, strength=1.0)[0].astype(int)
    half = _paste_identity(rgb, faces, 128, restore=lambda crop: 255 - crop, strength=0.5)[0].astype(int)
    none = _paste_identity(rgb, faces, 128, restore=lambda crop: 255 - crop, strength=0.0)[0]
    assert np.array_equal(none, rgb)
    assert np.abs(full - rgb).mean() > 10
    assert np.abs(half - (full + rgb) / 2).max() <= 1


def test_strength_outside_unit_interval_is_rejected():
    frame = torch.zeros(1, 3, 64, 64)
    with pytest.raises(ValueError, match="strength"):
        Compositor(32).paste_batch(frame, torch.zeros(1, 3, 32, 32), np.eye(2, 3)[None], np.array([32.0]),
                                   np.zeros(1, np.int64), strength=1.5)
