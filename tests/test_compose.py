"""Paste-back: only the faces change, and the warp/inverse-warp round trip is faithful."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpen_video.compose import Compositor, face_mask
from gpen_video.faces.align import invert_affine, reference_points, similarity_transforms, warp_faces

from .conftest import read_rgb


def _paste_identity(rgb: np.ndarray, faces, size: int, restore=lambda crop: crop, strength: float = 1.0):
    """Crop every face, 'restore' it, paste it back; returns the new frame, the mask of the pixels
    the pasted faces reach, each face's crop -> frame transform, and the compositor."""
    frame = torch.from_numpy(rgb).permute(2, 0, 1)[None].float()
    owner = np.zeros(len(faces), dtype=np.int64)
    transforms = similarity_transforms(np.stack([f.landmarks for f in faces]), reference_points(size))
    crops = warp_faces(frame, owner, transforms, size)
    comp = Compositor(size, strength=strength)
    crop_to_frame = invert_affine(transforms)
    image, reached = comp.paste_batch(frame, restore(crops), crops, crop_to_frame, np.array([f.size for f in faces]),
                                      owner)
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
    for m in crop_to_frame:
        x0, y0, x1, y1 = comp._footprint(m, *rgb.shape[:2])
        inside[y0 + 40 : y1 - 40, x0 + 40 : x1 - 40] = True
    diff = np.abs(out.astype(int) - rgb.astype(int))[inside]
    assert diff.mean() < 2.0


def test_strength_zero_pastes_the_original_crop(detector):
    rgb = read_rgb("whole_two_people.jpg")
    faces = detector.detect(rgb[None])[0]
    full = _paste_identity(rgb, faces, 512, restore=lambda crop: 255 - crop, strength=1.0)[0]
    none = _paste_identity(rgb, faces, 512, restore=lambda crop: 255 - crop, strength=0.0)[0]
    assert np.abs(none.astype(int) - rgb).mean() < 0.2 < np.abs(full.astype(int) - rgb).mean()


def test_strength_outside_unit_interval_is_rejected():
    with pytest.raises(ValueError, match="strength"):
        Compositor(512, strength=1.5)
