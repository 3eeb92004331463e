"""Shared fixtures: the read-only reference data in ../shared, the GPU switch, and the checks
that compare restored videos."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

SHARED = Path(os.environ.get("GPEN_VIDEO_SHARED") or Path(__file__).resolve().parents[2] / "shared")
REQUIRE_SHARED = os.environ.get("GPEN_VIDEO_REQUIRE_SHARED") == "1"
#: The few reference files a clone carries, by the same relative paths (tests/data/SOURCES.md).
CARRIED = Path(__file__).resolve().parent / "data"

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def shared_file(relative: str) -> Path:
    """A reference file: from ../shared, else from the clone's own tests/data; skips when it is in
    neither, or fails under GPEN_VIDEO_REQUIRE_SHARED=1 (CI)."""
    for root in (SHARED, CARRIED):
        if (root / relative).exists():
            return root / relative
    message = f"reference data {SHARED / relative} is absent (set GPEN_VIDEO_SHARED to the shared/ folder)"
    if REQUIRE_SHARED:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def golden() -> dict:
    """The official GPEN's output on random weights and inputs (see shared/gpen_reference/README.md)."""
    return torch.load(shared_file("gpen_reference/golden_small.pt"), weights_only=True)


@pytest.fixture(scope="session")
def official_layouts() -> dict:
    import json

    return json.loads(shared_file("gpen_reference/state_dict_layout.json").read_text())["configs"]


@pytest.fixture(scope="session")
def detector():
    """The real RetinaFace (MobileNet-0.25) from the reference data, on the CPU."""
    from gpen_video.faces.detect import FaceDetector

    return FaceDetector("retinaface-mobile", weights=shared_file("weights/retinaface_mobilenet0.25.pth"))


def read_rgb(relative: str):
    """A photo from ../shared/media/images as upright RGB uint8 (OpenCV applies EXIF orientation)."""
    import cv2

    return cv2.cvtColor(cv2.imread(str(shared_file(f"media/images/{relative}")), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


SMALL_GPEN_SIZE = 64  # the face size of the golden GPEN that ``small_gpen`` holds


@pytest.fixture(scope="session")
def small_gpen(tmp_path_factory) -> Path:
    """The golden GPEN (64 px, random weights) as a checkpoint file: a real GPEN, fast on a CPU.
    Without ../shared, one of the same configuration with seeded random weights (as their init
    draws them), so that a clone tests the command line on real faces all the same."""
    path = tmp_path_factory.mktemp("weights") / "gpen_small.pth"
    golden = SHARED / "gpen_reference" / "golden_small.pt"
    if golden.exists() or REQUIRE_SHARED:
        torch.save(torch.load(shared_file("gpen_reference/golden_small.pt"), weights_only=True)["state_dict"], path)
        return path
    from gpen_video.model.reference import GPEN

    torch.manual_seed(0)
    model = GPEN(SMALL_GPEN_SIZE, channel_multiplier=1, narrow=0.125)
    with torch.no_grad():  # as the golden file draws them: biases and noise weights off their constant init
        for name, tensor in model.state_dict().items():
            if name.endswith("noise.weight"):
                tensor.normal_(0, 0.5)
            elif name.endswith(".bias"):
                tensor.add_(torch.randn_like(tensor) * 0.1)
    torch.save(model.state_dict(), path)
    return path


def write_clip(path: Path, frames, rate: int = 25, pix_fmt: str = "yuv420p", options: dict | None = None,
               tags: dict | None = None, convert=None) -> None:
    """Encode RGB ``frames`` with libx264 (ultrafast unless ``options`` say otherwise), one pts per frame.
    ``tags`` set codec-context colour fields; ``convert`` turns each RGB VideoFrame into ``pix_fmt``."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], pix_fmt
        for name, value in (tags or {}).items():
            setattr(stream.codec_context, name, value)
        stream.codec_context.options = {"preset": "ultrafast", **(options or {})}
        for i, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            if convert is not None:
                frame = convert(frame)
            frame.pts = i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def paste_region(faces: list[dict], crop_size: int, height: int, width: int) -> np.ndarray:
    """(H, W) bool: the pixels that the ``faces`` of one tracks-file frame can reach when pasted
    back (each face's footprint from its smoothed landmarks), in the upright frame."""
    from gpen_video.faces.align import invert_affine, reference_points, similarity_transforms
    from gpen_video.worker.compose import Compositor

    region = np.zeros((height, width), bool)
    if not faces:
        return region
    landmarks = np.array([face["landmarks"] for face in faces], dtype=np.float64)
    crop_to_frame = invert_affine(similarity_transforms(landmarks, reference_points(crop_size)))
    for x0, y0, x1, y1 in Compositor(crop_size)._footprints(crop_to_frame, height, width):
        region[y0:y1, x0:x1] = True
    return region


def decoded_planes(path: Path) -> list[list[np.ndarray]]:
    """Every frame of ``path`` as its decoded planes (Y, Cb, Cr), copied out of FFmpeg's buffers."""
    import av

    from gpen_video.media.colour import frame_planes

    with av.open(str(path)) as container:
        return [[plane.copy() for plane in frame_planes(frame)] for frame in container.decode(video=0)]


def plane_region(region: np.ndarray, plane: np.ndarray) -> np.ndarray:
    """``region`` (luma resolution) on a possibly subsampled plane: a sample counts as inside when
    any pixel it covers is, as the paste-back's merge counts it."""
    step_y, step_x = -(-region.shape[0] // plane.shape[0]), -(-region.shape[1] // plane.shape[1])  # odd sizes round up
    padded = np.zeros((plane.shape[0] * step_y, plane.shape[1] * step_x), bool)
    padded[: region.shape[0], : region.shape[1]] = region
    return padded.reshape(plane.shape[0], step_y, plane.shape[1], step_x).any(axis=(1, 3))


def assert_same_restoration(reference: Path, reference_tracks: Path, other: Path, other_tracks: Path,
                            crop_size: int) -> None:
    """Two restorations of one unrotated clip that differ only in how the work was split: the GPEN
    batch size, the number of workers, the device. Floating-point convolution is not batch
    invariant on every CPU, library build and GPU (its summation order follows the batch, the
    thread count and the chosen kernel), so GPEN's outputs may differ by ~1e-5 and round a level
    apart; nothing else may differ. So: the same frames; the same faces on each, at the same
    timestamps, on the same tracks (landmarks to the tracks file's 1e-3 px rounding); every
    sample outside the faces' paste regions bit-identical; inside them, within one level."""
    frames_a = json.loads(Path(reference_tracks).read_text())["frames"]
    frames_b = json.loads(Path(other_tracks).read_text())["frames"]
    assert [(f["index"], f["time"]) for f in frames_a] == [(f["index"], f["time"]) for f in frames_b]
    for a, b in zip(frames_a, frames_b):
        assert [face["track"] for face in a["faces"]] == [face["track"] for face in b["faces"]], a["index"]
        for face_a, face_b in zip(a["faces"], b["faces"]):
            np.testing.assert_allclose(face_a["landmarks"], face_b["landmarks"], atol=2e-3)
    planes_a, planes_b = decoded_planes(reference), decoded_planes(other)
    assert len(planes_a) == len(planes_b) == len(frames_a)
    for record_a, record_b, a, b in zip(frames_a, frames_b, planes_a, planes_b):
        region = paste_region(record_a["faces"] + record_b["faces"], crop_size, *a[0].shape)
        for plane_a, plane_b in zip(a, b, strict=True):
            inside = plane_region(region, plane_a)
            assert np.array_equal(plane_a[~inside], plane_b[~inside]), f"frame {record_a['index']} outside its faces"
            difference = np.abs(plane_a.astype(np.int32) - plane_b.astype(np.int32))
            assert difference.max(initial=0) <= 1, f"frame {record_a['index']}: {difference.max()} levels apart"
