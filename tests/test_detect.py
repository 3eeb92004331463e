"""Detection with the real RetinaFace on real photos and videos."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from gpen_video.errors import WeightsError
from gpen_video.faces import detect as detect_module
from gpen_video.faces.detect import FaceDetector
from gpen_video.faces.retinaface import RetinaFace, anchors, decode_boxes, decode_landmarks, suppress
from gpen_video.faces.track import track_faces
from gpen_video.media.demux import read_frames

from . import facexlib_references as references
from .conftest import read_rgb, shared_file


def _upright(face) -> bool:
    """Eyes side by side above the nose, nose above the mouth: the face is the right way up."""
    (lx, ly), (rx, ry), (_, ny), (_, my1), (_, my2) = face.landmarks
    return lx < rx and max(ly, ry) < ny < min(my1, my2) and abs(ly - ry) < (rx - lx)


def test_solvay_1927_finds_at_least_25_faces(detector):
    faces = detector.detect(read_rgb("whole_Solvay_conference_1927.png")[None])[0]
    assert len(faces) >= 25
    assert all(f.landmarks.shape == (5, 2) and f.score > 0.9 for f in faces)


def test_two_people_finds_exactly_two_upright_faces(detector):
    faces = detector.detect(read_rgb("whole_two_people.jpg")[None])[0]
    assert len(faces) == 2
    assert all(_upright(f) for f in faces)
    assert faces[0].score >= faces[1].score


def test_batched_detection_equals_single_images(detector):
    a = read_rgb("whole_two_people.jpg")
    b = np.ascontiguousarray(a[:, ::-1])  # a mirrored copy: same size, different faces
    together = detector.detect(np.stack([a, b]))
    for image, faces in zip((a, b), together):
        alone = detector.detect(image[None])[0]
        assert len(alone) == len(faces)
        for f, g in zip(alone, faces):
            np.testing.assert_allclose(f.landmarks, g.landmarks, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_detection_replayed_as_a_cuda_graph_finds_the_same_faces_without_waiting():
    """A GPU worker captures the detector for full batches and pads shorter ones to them: the
    padding must not reach the faces, and a replay must not wait for the GPU.

    The boxes agree to 0.1 px, not bit for bit. cuDNN picks a convolution algorithm per input
    shape (here batch 4 in the graph against 2 eagerly) and different algorithms sum in different
    orders; and fp32 convolutions run in TF32 on Ampere and later (torch's default
    ``cudnn.allow_tf32``), whose operands keep 10 mantissa bits, a relative error of 2^-11. A box
    edge is its anchor's centre plus the regressed offset times 0.1 x the anchor's size (up to
    512 px), and the offsets are of order one: a relative error of ~1e-3 in them moves an edge by
    up to ~0.05 px (0.012 px was seen on an H200). 0.1 px is twice that, and a thousandth of a
    100 px face: no crop moves visibly."""
    solvay = read_rgb("whole_Solvay_conference_1927.png")
    frames = torch.as_tensor(np.stack([solvay, np.ascontiguousarray(solvay[:, ::-1])])).cuda().permute(0, 3, 1, 2)
    weights = shared_file("weights/retinaface_mobilenet0.25.pth")
    eager = FaceDetector("retinaface-mobile", weights=weights, device="cuda").detect_rgb(frames)
    graphed = FaceDetector("retinaface-mobile", weights=weights, device="cuda")
    graphed.fix_batch(4, *frames.shape[2:], graph=True)
    torch.cuda.set_sync_debug_mode("error")  # any host wait for the device raises
    try:
        pending = graphed.queue_rgb(frames)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    found = pending.result()
    assert [len(fs) for fs in found] == [len(fs) for fs in eager] and len(found[0]) >= 25
    for faces, reference in zip(found, eager):
        np.testing.assert_allclose([f.box for f in faces], [f.box for f in reference], atol=0.1)
        np.testing.assert_allclose([f.landmarks for f in faces], [f.landmarks for f in reference], atol=0.1)


def _mobile_retinaface() -> RetinaFace:
    """The mobile RetinaFace with the reference weights, as loaded: its batch norms not folded."""
    state = torch.load(shared_file("weights/retinaface_mobilenet0.25.pth"), map_location="cpu", weights_only=True)
    net = RetinaFace("mobile0.25")
    net.load_state_dict({k.removeprefix("module."): v for k, v in state.items()}, strict=True)
    return net.eval()


def test_folded_batch_norms_leave_the_networks_outputs(detector):
    image = torch.from_numpy(read_rgb("whole_two_people.jpg")).permute(2, 0, 1)[None].float() - 117
    with torch.no_grad():
        expected, got = _mobile_retinaface()(image), detector.net(image)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in detector.net.modules())
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("photo", references.DETECTED_PHOTOS)
def test_faces_are_those_of_facexlibs_own_detection(detector, photo):
    """The host-side suppression over the candidates that come back finds what facexlib's
    reference path (every box over the threshold, suppressed in NumPy) found, in the same order."""
    expected = references.load()[f"detected/{photo}"]
    faces = detector.detect(read_rgb(photo)[None])[0]
    assert len(faces) == len(expected) > 3
    for face, row in zip(faces, expected):
        assert abs(face.score - row[4]) < 1e-3
        np.testing.assert_allclose(face.box, row[:4], atol=0.1)
        np.testing.assert_allclose(face.landmarks, row[5:].reshape(5, 2), atol=0.1)


def test_a_frame_with_more_candidates_than_come_back_loses_no_face(detector, monkeypatch):
    """Each face gives several boxes over the threshold; with room for only 8 to come back, the
    crowded photo's candidates are all brought back for it, and every face is still found."""
    image = read_rgb("whole_Solvay_conference_1927.png")
    two = np.stack([image, np.ascontiguousarray(image[:, ::-1])])
    expected = detector.detect(two)
    monkeypatch.setattr(detect_module, "CANDIDATES", 8)
    found = detector.detect(two)
    for faces, reference in zip(found, expected, strict=True):
        assert len(faces) == len(reference) > 8
        for f, g in zip(faces, reference):
            np.testing.assert_array_equal(f.box, g.box)


def test_large_frames_are_detected_downscaled_and_mapped_back(detector):
    small = read_rgb("whole_two_people.jpg")  # 1126 px wide: detected at full size
    large = cv2.resize(small, None, fx=2, fy=2, interpolation=cv2.INTER_CUBIC)  # 2252 px: detected at 1000
    faces_small = detector.detect(small[None])[0]
    faces_large = detector.detect(large[None])[0]
    assert len(faces_small) == len(faces_large) == 2
    for f, g in zip(faces_small, faces_large):
        eye_distance = np.linalg.norm(f.landmarks[1] - f.landmarks[0])
        assert np.abs(g.landmarks / 2 - f.landmarks).max() < 0.15 * eye_distance


def test_min_size_and_max_faces(detector):
    image = read_rgb("whole_Solvay_conference_1927.png")[None]
    all_faces = detector.detect(image)[0]
    detector.max_faces = 3
    try:
        assert len(detector.detect(image)[0]) == 3
    finally:
        detector.max_faces = None
    detector.min_size = np.median([f.size for f in all_faces])
    try:
        big = detector.detect(image)[0]
    finally:
        detector.min_size = 0.0
    assert 0 < len(big) < len(all_faces) and all(f.size >= detector.min_size for f in big) is True


# The selfie's face is steadily in view for its first 100 frames; a whip pan follows (frames
# 103-113: the face moves 6 eye distances in 4 frames and is missed in 3, too far to bridge
# safely), and after ~5 s the camera turns to the landscape. The portrait clip shows its face throughout.
@pytest.mark.parametrize(("video", "face_visible_frames"), [("phone_selfie_rotation90_new_face_video-90.mp4", 100),
                                                           ("phone_portrait_selfie_liveportrait_d13.mp4", None)])
def test_phone_videos_give_upright_faces_on_every_frame(detector, video, face_visible_frames):
    frames = list(read_frames(shared_file(f"media/videos/{video}"), limit=face_visible_frames))[::2]
    found = []
    for i in range(0, len(frames), 8):
        found += detector.detect(np.stack([f.rgb() for f in frames[i : i + 8]]))
    assert all(_upright(faces[0]) for faces in found if faces)
    # A motion-blurred frame may score under the 0.9 threshold; tracking bridges such gaps, so
    # every frame the tool restores has its face.
    tracked = track_faces((f.index, f.time, faces, f.rgb()) for f, faces in zip(frames, found))
    assert all(t.faces for t in tracked)


def test_rotation_tag_is_applied_to_frames(detector):
    path = shared_file("media/videos/phone_selfie_rotation90_new_face_video-90.mp4")
    frame = next(read_frames(path))
    assert frame.rgb().shape == (480, 640, 3)  # stored 480x640 sideways, shown 640x480
    sideways = np.ascontiguousarray(np.rot90(frame.rgb(), k=1))  # as stored in the file
    assert not any(_upright(f) for f in detector.detect(sideways[None])[0])


def test_detector_weights_path_is_used_as_given(tmp_path):
    with pytest.raises(WeightsError, match="detector weights not found"):
        FaceDetector("retinaface-mobile", weights=tmp_path / "missing.pth")
    wrong = tmp_path / "wrong.pth"
    torch.save({"layer.weight": torch.zeros(2)}, wrong)
    with pytest.raises(WeightsError, match="does not fit retinaface-mobile"):
        FaceDetector("retinaface-mobile", weights=wrong)
    with pytest.raises(WeightsError, match="unknown detector"):
        FaceDetector("yolo", weights=wrong)


@pytest.mark.parametrize("backbone", ["mobile0.25", "resnet50"])
def test_the_network_computes_what_facexlibs_retinaface_computes(backbone):
    """The detector's own RetinaFace (which loads no torchvision) gives facexlib's outputs, with
    the reference weights (ResNet-50's seeded: the official file is too large to ship); its
    anchors and decoding likewise."""
    stored = references.load()
    ours = _mobile_retinaface() if backbone == "mobile0.25" else RetinaFace(backbone).eval()
    if backbone == "resnet50":
        ours.load_state_dict(references.seeded_weights(ours, seed=3), strict=True)
    with torch.no_grad():
        outputs = ours(references.detector_frames())
    for name, got in zip(("boxes", "scores", "landmarks"), outputs, strict=True):
        np.testing.assert_allclose(got.numpy(), stored[f"{backbone}/{name}"], rtol=1e-5, atol=1e-5, err_msg=name)
    for height, width in references.ANCHOR_SIZES:
        assert np.array_equal(anchors(height, width).numpy(), stored[f"anchors/{height}x{width}"])
    priors = anchors(150, 190)[None].expand(2, -1, -1)
    offsets = references.decoder_offsets(priors.shape[1])
    np.testing.assert_allclose(decode_boxes(offsets[..., :4], priors).numpy(), stored["decoded/boxes"],
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(decode_landmarks(offsets[..., 4:], priors).numpy(), stored["decoded/landmarks"],
                               rtol=1e-6, atol=1e-6)


def test_the_suppression_keeps_the_boxes_torchvisions_nms_keeps():
    stored = references.load()
    kept = np.split(stored["nms/kept"], np.cumsum(stored["nms/counts"])[:-1])
    cases = references.nms_cases()
    assert len(kept) == len(cases)
    for (boxes, scores, overlap), want in zip(cases, kept):
        assert suppress(boxes, scores, overlap) == want.tolist()


def test_a_detector_start_loads_neither_torchvision_nor_dynamo():
    """Importing torchvision brings torch._dynamo and sympy: seconds of every process's start."""
    import subprocess
    import sys

    code = ("import sys; from gpen_video.faces.detect import FaceDetector; "
            "FaceDetector('retinaface-mobile', sys.argv[1], progress=False); "
            "print(sorted(m for m in ('torchvision', 'torch._dynamo', 'facexlib') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code, str(shared_file("weights/retinaface_mobilenet0.25.pth"))],
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]", run.stdout
