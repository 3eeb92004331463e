"""``--mask parse``: the label map's classes kept and dropped, ParseNet batched on real photos,
masks smoothed per track, pixels the mask leaves out bit-identical, the weights' download.

No official ParseNet weights can be downloaded here, so random-initialised ones stand in: they
run the real network, in the real batches, through the real paste-back; only what it labels is
arbitrary. The mask rules are checked on label maps given by hand."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from gpen_video.errors import WeightsError
from gpen_video.faces.align import invert_affine, reference_points, similarity_transforms, warp_faces
from gpen_video.faces.parse import DROPPED, LABELS, PARSE_URL, FaceParser, MaskSmoother, label_mask, soften
from gpen_video.faces.parsenet import ParseNet
from gpen_video.worker.compose import Compositor

from . import corpus
from . import facexlib_references as references
from .conftest import SMALL_GPEN_SIZE, decoded_planes, paste_region, plane_region, read_rgb, shared_file
from .test_preservation import gpen_video
from .test_weights import _Handler, server  # noqa: F401 (the local HTTP server fixture)


@pytest.fixture(scope="module")
def random_parser_weights(tmp_path_factory) -> Path:
    """ParseNet with seeded random weights, as a checkpoint file: the official ones cannot be had
    here, and this is the layout they come in."""
    path = tmp_path_factory.mktemp("parse") / "parsenet_random.pth"
    torch.save(references.seeded_weights(ParseNet(), seed=4), path)
    return path


def test_our_parsenet_computes_what_facexlibs_computes(random_parser_weights):
    """The checkpoint's keys, in its order (those of facexlib's ParseNet, which loaded these
    weights strictly when the stored scores were made), and facexlib's label scores."""
    state = torch.load(random_parser_weights, weights_only=True)
    ours = ParseNet().eval()
    ours.load_state_dict(state, strict=True)
    with torch.no_grad():
        scores = ours(references.parser_faces())
    np.testing.assert_allclose(scores.numpy(), references.load()["parsenet/scores"], rtol=1e-4, atol=1e-4)


def test_the_mask_keeps_the_face_hair_and_neck_and_drops_background_hat_and_clothes():
    labels = torch.arange(len(LABELS)).repeat_interleave(4).view(1, -1, 4)  # a row of 4 pixels per label
    mask = label_mask(labels)[0, :, 0]
    kept = {name for name, value in zip(LABELS, mask.tolist(), strict=True) if value == 1.0}
    assert DROPPED == {"background", "hat", "cloth"}
    assert kept == {"skin", "nose", "eye_g", "l_eye", "r_eye", "l_brow", "r_brow", "l_ear", "r_ear", "mouth",
                    "u_lip", "l_lip", "hair", "ear_r", "neck_l", "neck"}
    assert set(mask.tolist()) == {0.0, 1.0}


def test_the_soft_mask_is_whole_inside_and_nothing_where_the_crop_ends():
    """A face filling the crop: the outer 20 of 512 px cleared, then feathered, as GPEN does; the
    compositor bounds it by the feathered box, so it is zero at the crop's edge (no seam)."""
    mask = soften(torch.ones(1, 512, 512))[0]
    pasted = Compositor(512)._prepare(torch.zeros(1, 3, 512, 512), np.array([300.0]), mask[None], 1.0)[0, 3]
    edges = torch.cat([pasted[0], pasted[-1], pasted[:, 0], pasted[:, -1]])
    assert 0.04 < mask[:, 0].max() < 0.25 and edges.max() < 1e-3
    assert mask[200:312, 200:312].min() > 0.999 and pasted[200:312, 200:312].min() > 0.999
    assert ((mask >= 0) & (mask <= 1.0 + 1e-6)).all()
    hand = torch.ones(1, 512, 512)
    hand[:, 300:, :256] = 0  # a hand in front of the lower left of the face: labelled background
    assert soften(hand)[0, 420, 60] < 0.01 < 0.99 < soften(hand)[0, 150, 400]


def test_parsenet_runs_batched_on_real_faces(random_parser_weights):
    faces = [cv2.resize(read_rgb(f"cropped_ffhq_0000{i}.png"), (512, 512), interpolation=cv2.INTER_AREA)
             for i in range(3)]
    batch = torch.from_numpy(np.stack(faces)).permute(0, 3, 1, 2).float()
    parser = FaceParser(random_parser_weights)
    labels = parser.labels(batch)
    assert labels.shape == (3, 512, 512) and labels.dtype == torch.int64
    assert 0 <= labels.min() and labels.max() < len(LABELS)
    alone = torch.cat([parser.labels(batch[i : i + 1]) for i in range(3)])
    assert (labels == alone).float().mean() > 0.999  # each face's labels do not depend on its batch
    masks = parser.masks(batch[:, :, ::8, ::8])  # a 64 px GPEN's crops: masks at the crop's size
    assert masks.shape == (3, 64, 64) and 0 <= masks.min() and masks.max() <= 1


def test_a_tracks_masks_are_averaged_over_time_per_job():
    smooth = MaskSmoother(weight=0.5, gap=2, calls=2)
    zero, one = torch.zeros(1, 4, 4), torch.ones(1, 4, 4)
    assert smooth(1, [(0, 7)], zero).sum() == 0
    assert torch.allclose(smooth(1, [(1, 7)], one), torch.full((1, 4, 4), 0.5))  # halfway towards the new one
    assert torch.equal(smooth(2, [(2, 7)], one), one)  # another job's track 7 is another face
    assert torch.equal(smooth(1, [(9, 7)], zero), zero)  # not seen for 7 pictures: starts afresh
    assert torch.equal(smooth(1, [(10, -1)], one), one)  # a face without a track is never averaged
    smooth(3, [(0, 1)], one)
    assert set(smooth._last) == {(3, 1)}  # what the last calls did not use is forgotten


def test_pixels_the_mask_leaves_out_stay_bit_identical(detector):
    """The lower half of each crop's mask is zero (a hand, say): no frame pixel that only that
    half reaches changes, while the upper half is pasted."""
    rgb = read_rgb("whole_two_people.jpg")
    faces = detector.detect(rgb[None])[0]
    frames = torch.from_numpy(rgb[None].copy()).permute(0, 3, 1, 2).float()
    owner = np.zeros(len(faces), np.int64)
    transforms = similarity_transforms(np.stack([f.landmarks for f in faces]), reference_points(256))
    crops = warp_faces(frames, owner, transforms, 256)
    comp = Compositor(256)
    masks = comp.mask.expand(len(faces), -1, -1).clone()
    masks[:, 128:] = 0
    image, reached = comp.paste_batch(frames, 255 - crops, invert_affine(transforms), np.full(len(faces), 200.0),
                                      owner, masks)
    # Where each frame pixel falls in its face's crop: beyond the top half's reach (bicubic taps), nothing changed.
    ys, xs = np.mgrid[: rgb.shape[0], : rgb.shape[1]]
    lower, upper = np.zeros(rgb.shape[:2], bool), np.zeros(rgb.shape[:2], bool)
    for transform in transforms:
        crop_x = transform[0, 0] * xs + transform[0, 1] * ys + transform[0, 2]
        crop_y = transform[1, 0] * xs + transform[1, 1] * ys + transform[1, 2]
        inside = (crop_x > -3) & (crop_x < 259) & (crop_y > -3) & (crop_y < 259)
        lower |= inside & (crop_y > 132)
        upper |= inside & (crop_y <= 132)
    left_out = lower & ~upper
    changed = (image != frames).any(1)[0].numpy()
    assert left_out.sum() > 1000 and changed.any() and not (changed & left_out).any()
    assert not reached[0].numpy()[left_out].any()


def test_parse_weights_download_once_and_say_where_offline(server, tmp_path, monkeypatch):  # noqa: F811
    from gpen_video.faces import parse

    monkeypatch.setenv("GPEN_VIDEO_HOME", str(tmp_path / "cache"))
    _Handler.files = {"/parsing_parsenet.pth": b"not a checkpoint"}
    monkeypatch.setattr(parse, "PARSE_URL", f"{server}/parsing_parsenet.pth")
    with pytest.raises(WeightsError, match="is not a readable face-parser checkpoint"):
        FaceParser()  # downloaded into the cache, then refused as what it is
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["parsing_parsenet.pth"]
    monkeypatch.setenv("GPEN_VIDEO_HOME", str(tmp_path / "offline"))
    monkeypatch.setattr(parse, "PARSE_URL", "http://127.0.0.1:9/parsing_parsenet.pth")
    with pytest.raises(WeightsError) as info:
        FaceParser()
    assert "http://127.0.0.1:9/parsing_parsenet.pth" in str(info.value)
    assert str(tmp_path / "offline" / "parsing_parsenet.pth") in str(info.value)
    assert "--parse-weights" in str(info.value)
    assert PARSE_URL.startswith("https://github.com/xinntao/facexlib/releases/download/")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])])
def test_a_video_with_mask_parse_changes_only_inside_the_faces_reach(small_gpen, random_parser_weights, tmp_path,
                                                                      device):
    """Three frames of the real talking head, lossless: the parse mask lies within the crop, so
    every sample outside the faces' paste regions is the decoded one; and the faces changed."""
    clip = corpus.excerpt(tmp_path / "talk.mp4", shared_file(corpus.TALKING_HEAD), 0.1)
    out, tracks = tmp_path / "parsed.mkv", tmp_path / "faces.json"
    # The excerpt's B-frames lost the later frame they refer to (its packets are cut by time), and
    # the reference below is libavcodec's concealment of that: NVDEC conceals it its own way.
    run = gpen_video(small_gpen, clip, out, "--codec", "ffv1", "--mask", "parse", "--parse-weights",
                     random_parser_weights, "--tracks-out", tracks, "--decoder", "cpu", device=device)
    assert run.returncode == 0, run.stderr
    import json

    records = json.loads(tracks.read_text())["frames"]
    before, after = decoded_planes(clip), decoded_planes(out)
    assert len(records) == len(before) == len(after) == 3
    for record, planes_in, planes_out in zip(records, before, after):
        region = paste_region(record["faces"], SMALL_GPEN_SIZE, *planes_in[0].shape)
        for plane_in, plane_out in zip(planes_in, planes_out):
            outside = ~plane_region(region, plane_in)
            np.testing.assert_array_equal(plane_out[outside], plane_in[outside])
        assert (planes_out[0] != planes_in[0]).any()
