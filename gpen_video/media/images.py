"""Photos as one-picture jobs: read into the pipeline's planar form, and written back as what they
were, so a photo runs through the same engine, pipeline and workers as a video.

Planar RGB holds a photo's samples exactly (16-bit ones too, and alpha beside them), so every
pixel no face reaches comes back as it was read. A greyscale photo is restored in colour and
written back grey, by its luminance (exact where no face reached: R = G = B there). The ICC
profile and EXIF travel from the input to the output (EXIF's orientation set to upright, as the
pixels are stored upright). What the output format cannot hold (16 bits in JPEG, alpha in JPEG,
CMYK anywhere) is named in one warning, and refused with ``--strict``.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
from PIL import Image, UnidentifiedImageError

from ..errors import InputError, OutputError
from .colour import Orientation, PlaneLayout, frame_planes, writable_planes
from .frames import SourceFrame
from .outputs import AbortedOnError, OutputClaim, partial_path
from .probe import Pictures

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".avif", ".heic", ".heif"}


@dataclass(frozen=True)
class _ImageFormat:
    """What an output image format holds."""

    name: str  # Pillow's
    deep: bool  # 16-bit samples
    alpha: bool
    metadata: bool  # ICC profile and EXIF


_JPEG, _TIFF = _ImageFormat("JPEG", False, False, True), _ImageFormat("TIFF", True, True, True)
_FORMATS = {".jpg": _JPEG, ".jpeg": _JPEG, ".png": _ImageFormat("PNG", True, True, True), ".tif": _TIFF,
            ".tiff": _TIFF, ".webp": _ImageFormat("WEBP", False, True, True),
            ".avif": _ImageFormat("AVIF", False, True, True), ".bmp": _ImageFormat("BMP", False, False, False)}
#: JPEG, WebP and AVIF quality: OpenCV's JPEG default, visually lossless.
_QUALITY = 95
_EXIF_ORIENTATION = 0x0112
#: EXIF orientation -> the numpy steps that make stored pixels upright (Pillow's exif_transpose).
_UPRIGHT: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    2: lambda a: a[:, ::-1], 3: lambda a: a[::-1, ::-1], 4: lambda a: a[::-1],
    5: lambda a: a.swapaxes(0, 1), 6: lambda a: a.swapaxes(0, 1)[:, ::-1],
    7: lambda a: a.swapaxes(0, 1)[::-1, ::-1], 8: lambda a: a.swapaxes(0, 1)[::-1]}


@dataclass(frozen=True)
class PhotoTraits:
    """What a photo file is besides its pixels: what its output must keep."""

    mode: str  # Pillow's mode: "RGB", "RGBA", "L", "I;16", "CMYK", "P", ...
    deep: bool  # 16-bit samples
    grey: bool
    alpha: bool
    icc: bytes | None
    exif: bytes | None  # orientation set to upright
    orientation: int  # the file's EXIF orientation (1: stored upright)

    @classmethod
    def of(cls, path: Path) -> PhotoTraits:
        image = _open(path)
        with image:
            exif = image.getexif()
            orientation = exif.get(_EXIF_ORIENTATION, 1)
            exif_bytes = None
            if exif:
                exif[_EXIF_ORIENTATION] = 1
                exif_bytes = exif.tobytes()
            mode = image.mode
            deep = mode.startswith("I;16") or _bits(image) == 16
            grey = mode in ("L", "LA", "1", "I", "F") or mode.startswith("I;16")
            alpha = mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in image.info)
            return cls(mode, deep, grey, alpha, image.info.get("icc_profile") or None, exif_bytes, orientation)


@dataclass(frozen=True)
class Photo:
    """A photo as read: its upright samples as a frame, and what the file is besides them. A job
    reads it as it reads a video (media.video_input.VideoInput): one picture, no other stream."""

    path: Path
    frame: av.VideoFrame
    traits: PhotoTraits
    truncated = ""  # a photo that reads is whole

    @property
    def pictures(self) -> Pictures:
        return Pictures(1, self.frame.height, self.frame.width)

    def open(self) -> contextlib.nullcontext[None]:
        """Nothing to open: the photo is in memory."""
        return contextlib.nullcontext()

    def frames(self, opened: None, streams: set[int], start: object = None, end: int | None = None
               ) -> Iterator[SourceFrame]:
        """A pass over the photo: the one picture, with buffers of its own (a picture's buffers
        go through their lifecycle once)."""
        yield SourceFrame(0, self.frame, PlaneLayout.of(self.frame, Orientation()))

    def describe(self) -> str:
        """No decoder to name."""
        return ""


def _open(path: Path) -> Image.Image:
    try:
        return Image.open(path)
    except UnidentifiedImageError:
        kind = path.suffix.lower().lstrip(".").upper()
        if kind in ("HEIC", "HEIF"):
            raise InputError(f"cannot read {path}: HEIC/HEIF photos are not supported here; "
                             f"convert it to JPEG, PNG or TIFF first") from None
        raise InputError(f"cannot read {path} as an image") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}") from None


def _bits(image: Image.Image) -> int:
    """Bits per sample from the file's own header: Pillow opens 16-bit colour PNG and TIFF as 8-bit."""
    if image.format == "PNG":
        with open(image.filename, "rb") as file:
            header = file.read(26)
        return header[24] if len(header) == 26 else 8
    if image.format == "TIFF":
        bits = image.tag_v2.get(258, (8,))
        return max(bits) if isinstance(bits, tuple) else int(bits)
    return 8


def _pixels(path: Path) -> np.ndarray:
    """The stored samples, (H, W) grey or (H, W, 3/4) BGR(A), uint8 or uint16, as the file holds them."""
    pixels = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if pixels is None:  # a format this OpenCV lacks (AVIF on some builds): Pillow, at 8 bits
        with _open(path) as image:
            rgb = np.asarray(image.convert("RGBA" if "A" in image.mode else "RGB"))
        pixels = np.ascontiguousarray(rgb[..., [2, 1, 0, 3][: rgb.shape[2]]])
    if pixels.dtype not in (np.uint8, np.uint16):
        raise InputError(f"cannot read {path}: {pixels.dtype} samples are not supported (8 or 16 bits are)")
    return pixels


def read_image(path: Path) -> Photo:
    """The photo as upright planar RGB (G, B, R, and alpha if it has one), 8 or 16 bits as stored;
    EXIF orientation applied."""
    if not path.is_file():
        raise InputError(f"input not found: {path}")
    traits = PhotoTraits.of(path)
    pixels = _pixels(path)
    turn = _UPRIGHT.get(traits.orientation)
    if turn is not None:
        pixels = turn(pixels)
    if pixels.ndim == 2:  # grey: restored in colour, written back grey (ImageWriter)
        pixels = np.repeat(pixels[:, :, None], 3, axis=2)
    alpha = pixels.shape[2] == 4
    deep = pixels.dtype == np.uint16
    frame = av.VideoFrame(pixels.shape[1], pixels.shape[0], ("gbrap" if alpha else "gbrp") + ("16le" if deep else ""))
    order = [1, 0, 2, 3] if alpha else [1, 0, 2]  # BGR(A) -> G, B, R (, A)
    for dst, channel in zip(writable_planes(frame), order):
        samples = pixels[:, :, channel]
        dst[...] = samples.view(np.int16) if deep else samples
    frame.pts, frame.time_base = 0, Fraction(1, 1)
    return Photo(path, frame, traits)


def photo_source(picture: SourceFrame) -> Callable[[set[int]], Iterator[SourceFrame]]:
    """A frame source (pipeline.FrameSource) of one picture and no other streams."""
    def source(streams: set[int]) -> Iterator[SourceFrame]:
        yield picture
    return source


def _as_stored(frame: av.VideoFrame) -> np.ndarray:
    """A planar RGB frame as (H, W, 3/4) BGR(A) samples of its depth (uint8 or uint16)."""
    planes = frame_planes(frame)
    channels = [planes[1], planes[0], planes[2], *planes[3:]]  # G, B, R (, A) -> B, G, R (, A)
    pixels = np.stack(channels, axis=2)
    return pixels.view(np.uint16) if pixels.dtype == np.int16 else pixels


def _luminance(bgr: np.ndarray) -> np.ndarray:
    """BT.601 luma, in integers: exactly the grey level where B = G = R."""
    b, g, r = (bgr[:, :, i].astype(np.int64) for i in range(3))
    return ((299 * r + 587 * g + 114 * b + 500) // 1000).astype(bgr.dtype)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _add_png_metadata(path: Path, icc: bytes | None, exif: bytes | None) -> None:
    """The ICC profile (iCCP) and EXIF (eXIf) into a PNG that OpenCV wrote, after its header."""
    chunks = b""
    if icc:
        chunks += _png_chunk(b"iCCP", b"ICC profile\0\0" + zlib.compress(icc))
    if exif:
        chunks += _png_chunk(b"eXIf", exif.removeprefix(b"Exif\0\0"))
    if chunks:
        data = path.read_bytes()
        end_of_header = 8 + 8 + 13 + 4  # the signature, then IHDR: length and type, 13 bytes, CRC
        path.write_bytes(data[:end_of_header] + chunks + data[end_of_header:])


class ImageWriter(AbortedOnError):
    """Writes the one picture to OUTPUT through a temporary file beside it, renamed into place by
    :meth:`close`; OUTPUT is claimed for the job as a video's is. With ``traits``, those of the
    photo it was read from, the output keeps what that photo is (grey, depth, alpha, ICC, EXIF)
    where its format can, and names the rest (refused under ``strict``)."""

    copied_streams: set[int] = set()  # a photo has no other streams

    def __init__(self, output: Path, overwrite: bool, traits: PhotoTraits | None = None, strict: bool = False) -> None:
        self.output = output
        self.warnings: list[str] = []
        self.strict = strict
        ext = output.suffix.lower()
        if ext not in _FORMATS:
            raise OutputError(f"cannot write {ext or 'an extensionless'} images; use one of {', '.join(_FORMATS)}")
        self.format = _FORMATS[ext]
        self.traits = traits
        if traits is not None:
            self._check(traits, ext)
        self.claim = OutputClaim(output, overwrite)  # after the checks: a refusal claims nothing
        self.tmp = partial_path(output)

    def _check(self, traits: PhotoTraits, ext: str) -> None:
        """Name, before any work, what the output cannot keep of the input photo."""
        if traits.mode == "CMYK":
            self._warn("the photo's CMYK colours are written as RGB (gpen-video restores in RGB)")
        if traits.mode == "P":
            self._warn("the photo's palette is not kept: it is written in full colour")
        if traits.deep and not self.format.deep:
            self._warn(f"16-bit samples are stored as 8-bit: {ext} holds 8 bits (.png and .tif hold 16)")
        if traits.alpha and not self.format.alpha:
            self._warn(f"the alpha channel is left out: {ext} has none (.png, .tif and .webp have)")
        deep_colour_tiff = traits.deep and not traits.grey and self.format.name == "TIFF"
        if (traits.icc or traits.exif) and (not self.format.metadata or deep_colour_tiff):
            names = [name for name, value in (("ICC profile", traits.icc), ("EXIF", traits.exif)) if value]
            them = "them" if len(names) > 1 else "it"
            where = f"16-bit colour TIFF is written without {them} (.png keeps {them})" if deep_colour_tiff \
                else f"{ext} cannot hold {them}"
            self._warn(f"the photo's {' and '.join(names)} {'are' if len(names) > 1 else 'is'} left out: {where}")

    def _warn(self, message: str) -> None:
        """Something of the input the output cannot keep: said once, or refused with --strict."""
        if self.strict:
            raise OutputError(f"{message} (refused: --strict)")
        log.warning(message)
        self.warnings.append(message)

    def write(self, source: SourceFrame, restored: av.VideoFrame | None = None) -> None:
        pixels = _as_stored(restored if restored is not None else source.frame)
        traits = self.traits
        if traits is not None and traits.grey:
            alpha = pixels[:, :, 3:]
            pixels = _luminance(pixels) if not alpha.size else np.dstack([_luminance(pixels), alpha[:, :, 0]])
        self._save(pixels)

    def write_rgb(self, rgb: np.ndarray) -> None:
        """The picture from (H, W, 3) RGB24 samples (a contact sheet)."""
        self._save(np.ascontiguousarray(rgb[:, :, ::-1]))

    def _save(self, pixels: np.ndarray) -> None:
        """``pixels`` (grey, or BGR(A); 8 or 16 bits) into the output's format, with the input's
        ICC profile and EXIF. Pillow writes 8-bit pictures with their metadata; OpenCV writes
        16-bit colour, which Pillow cannot, and the PNG chunks are added after."""
        traits = self.traits
        icc, exif = (traits.icc, traits.exif) if traits is not None else (None, None)
        if pixels.ndim == 3 and pixels.shape[2] == 4 and not self.format.alpha:
            pixels = pixels[:, :, :3]
        if pixels.dtype == np.uint16 and not self.format.deep:
            pixels = ((pixels.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
        try:
            if pixels.dtype == np.uint16 and pixels.ndim == 3:
                if not cv2.imwrite(str(self.tmp), pixels):
                    raise OutputError(f"cannot write {self.output}")
                if self.format.name == "PNG":
                    _add_png_metadata(self.tmp, icc, exif)
                return
            image = self._pillow_image(pixels)
            options: dict = {"icc_profile": icc} if icc else {}
            if exif:
                options["exif"] = exif
            if self.format.name in ("JPEG", "WEBP", "AVIF"):
                options["quality"] = _QUALITY
            image.save(self.tmp, format=self.format.name, **options)
        except (OSError, ValueError) as exc:
            raise OutputError(f"cannot write {self.output}: {exc}") from None

    @staticmethod
    def _pillow_image(pixels: np.ndarray) -> Image.Image:
        """Grey (8 or 16 bits), grey and alpha, or BGR(A) samples as a Pillow image (RGB order)."""
        if pixels.ndim == 3 and pixels.shape[2] >= 3:
            pixels = pixels[:, :, [2, 1, 0, 3][: pixels.shape[2]]]
        return Image.fromarray(np.ascontiguousarray(pixels))

    def close(self) -> None:
        try:
            self.claim.publish(self.tmp)
        finally:
            self.tmp.unlink(missing_ok=True)

    def abort(self) -> None:
        self.tmp.unlink(missing_ok=True)
        self.claim.release()
