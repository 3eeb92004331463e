"""What an install leaves, as ``pip list`` and ``pip show`` tell a user."""

from __future__ import annotations

import importlib.metadata as metadata
from pathlib import Path

import gpen_video


def test_one_opencv_distribution_provides_cv2():
    """Two distributions of OpenCV (facexlib requires ``opencv-python`` beside the headless one the
    tool uses) write the same ``cv2`` files: whichever was installed last wins, and removing
    either breaks ``cv2`` for the other."""
    assert set(metadata.packages_distributions()["cv2"]) == {"opencv-python-headless"}


def test_the_version_and_the_licence_each_come_from_one_place():
    meta = metadata.metadata("gpen-video")
    assert meta["Version"] == gpen_video.__version__
    assert meta["License-Expression"] == "MIT"
    assert (Path(__file__).resolve().parents[1] / "LICENSE").read_text().startswith("MIT License\n")
