"""Photos as one-picture jobs: read into the pipeline's planar form, and written back, so a photo
runs through the same engine, pipeline and workers as a video. Planar RGB holds a photo's samples
exactly, so every pixel no face reaches comes back as it was read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from .colour import Orientation, PlaneLayout
from .outputs import OutputClaim, partial_path
from .source import InputError, SourceFrame
from .writer import OutputError

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


def read_image(path: Path) -> SourceFrame:
    """The photo as upright planar RGB (EXIF orientation applied, as OpenCV reads it)."""
    if not path.is_file():
        raise InputError(f"input not found: {path}")
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise InputError(f"cannot read {path} as an image")
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(bgr[:, :, ::-1]), format="rgb24").reformat(format="gbrp")
    frame.pts, frame.time_base = 0, Fraction(1, 1)
    return SourceFrame(0, frame, PlaneLayout.of(frame, Orientation()))


def photo_source(picture: SourceFrame) -> Callable[[set[int]], Iterator[SourceFrame]]:
    """A frame source (pipeline.FrameSource) of one picture and no other streams."""
    def source(streams: set[int]) -> Iterator[SourceFrame]:
        yield picture
    return source


class ImageWriter:
    """Writes the one picture to OUTPUT through a temporary file beside it, renamed into place by
    :meth:`close`; OUTPUT is claimed for the job as a video's is."""

    copied_streams: set[int] = set()  # a photo has no other streams

    def __init__(self, output: Path, overwrite: bool) -> None:
        self.output = output
        self.warnings: list[str] = []
        self.claim = OutputClaim(output, overwrite)
        self.tmp = partial_path(output)

    def write(self, source: SourceFrame, restored: av.VideoFrame | None = None) -> None:
        self.write_rgb((restored if restored is not None else source.frame).reformat(format="rgb24").to_ndarray())

    def write_rgb(self, rgb: np.ndarray) -> None:
        """The picture from (H, W, 3) RGB24 samples."""
        if not cv2.imwrite(str(self.tmp), np.ascontiguousarray(rgb[:, :, ::-1])):
            raise OutputError(f"cannot write {self.output}")

    def close(self) -> None:
        try:
            self.claim.publish(self.tmp)
        finally:
            self.tmp.unlink(missing_ok=True)

    def abort(self) -> None:
        self.tmp.unlink(missing_ok=True)
        self.claim.release()
