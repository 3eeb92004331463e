"""Shared fixtures: the read-only reference data in ../shared, and the GPU switch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

SHARED = Path(os.environ.get("GPEN_VIDEO_SHARED") or Path(__file__).resolve().parents[2] / "shared")
REQUIRE_SHARED = os.environ.get("GPEN_VIDEO_REQUIRE_SHARED") == "1"

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def shared_file(relative: str) -> Path:
    """A file from ../shared; skips when it is absent, or fails under GPEN_VIDEO_REQUIRE_SHARED=1 (CI)."""
    path = SHARED / relative
    if not path.exists():
        message = f"reference data {path} is absent (set GPEN_VIDEO_SHARED to the shared/ folder)"
        if REQUIRE_SHARED:
            pytest.fail(message)
        pytest.skip(message)
    return path


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


@pytest.fixture(scope="session")
def small_gpen(golden, tmp_path_factory) -> Path:
    """The golden GPEN (64 px, random weights) as a checkpoint file: a real GPEN, fast on a CPU."""
    path = tmp_path_factory.mktemp("weights") / "gpen_small.pth"
    torch.save(golden["state_dict"], path)
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
