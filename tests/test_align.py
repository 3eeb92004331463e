"""Alignment: GPEN's template, the least-squares similarity, and a warp that matches OpenCV."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from gpen_video.faces.align import invert_affine, reference_points, similarity_transforms, warp_faces

from .conftest import read_rgb


def _umeyama_svd(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Textbook Umeyama (SVD), independent of the closed form under test."""
    mu_s, mu_d = src.mean(0), dst.mean(0)
    s, d = src - mu_s, dst - mu_d
    u, sig, vt = np.linalg.svd(d.T @ s / len(src))
    e = np.diag([1.0, np.sign(np.linalg.det(u @ vt))])
    r = u @ e @ vt
    scale = (sig * np.diag(e)).sum() / s.var(0).sum()
    return np.hstack([scale * r, (mu_d - scale * r @ mu_s)[:, None]])


def test_reference_points_are_gpens_padded_square_template():
    ref = reference_points(512)
    # The official template point (30.29, 51.70) of 96x112, squared (+8 px in x), padded 28 px, scaled 512/168.
    np.testing.assert_allclose(ref[0], [(30.29459953 + 36) * 512 / 168, (51.69630051 + 28) * 512 / 168])
    np.testing.assert_allclose(reference_points(256), ref / 2)
    assert ref[0, 0] < ref[1, 0] and ref[2, 1] < ref[3, 1]  # left eye left of right eye, nose above mouth


def test_similarity_is_the_least_squares_optimum():
    rng = np.random.default_rng(3)
    ref = reference_points(512)
    points = rng.uniform(0, 1000, size=(20, 5, 2))
    ours = similarity_transforms(points, ref)
    for p, m in zip(points, ours):
        np.testing.assert_allclose(m, _umeyama_svd(p, ref), atol=1e-9)


def test_exact_similarity_is_recovered_and_inverted():
    ref = reference_points(512)
    angle, scale, shift = 0.3, 0.4, np.array([120.0, 80.0])
    rot = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    points = (ref @ rot.T + shift)[None]
    m = similarity_transforms(points, ref)[0]
    np.testing.assert_allclose(points[0] @ m[:, :2].T + m[:, 2], ref, atol=1e-9)
    inv = invert_affine(m[None])[0]
    np.testing.assert_allclose(ref @ inv[:, :2].T + inv[:, 2], points[0], atol=1e-9)


@pytest.mark.parametrize("image", ["whole_two_people.jpg", "whole_gfpgan_Blake_Lively.jpg", "whole_obama-240p.jpg",
                                   "whole_Solvay_conference_1927.png"])
def test_crops_match_opencv_bicubic_warp(detector, image):
    rgb = read_rgb(image)
    faces = detector.detect(rgb[None])[0]
    assert faces
    transforms = similarity_transforms(np.stack([f.landmarks for f in faces]), reference_points(512))
    frames = torch.from_numpy(rgb).permute(2, 0, 1)[None].float()
    crops = warp_faces(frames, np.zeros(len(faces), dtype=int), transforms, 512)
    for crop, m in zip(crops, transforms):
        expected = cv2.warpAffine(rgb, m, (512, 512), flags=cv2.INTER_CUBIC)
        ours = crop.permute(1, 2, 0).round().clamp(0, 255).numpy()
        assert np.abs(ours - expected.astype(np.float32)).mean() < 1.0
