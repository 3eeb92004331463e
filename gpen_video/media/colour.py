"""YUV <-> RGB on any torch device, with the frame's own matrix, range, bit depth and orientation.

Frames travel through the pipeline as their decoded YUV planes: the GPU converts them for the
face stages and converts the restored pixels back, so the CPU only decodes, copies and encodes
(swscale's RGB conversions of a 1080p frame cost more CPU time than x264's encoding of it).
Samples no face touched are taken from the decoded planes unchanged, so they stay bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

import av
import numpy as np
import torch
import torch.nn.functional as F

Packed = TypeVar("Packed", np.ndarray, torch.Tensor)

#: AVColorSpace tag -> the matrix's (Kr, Kb) luma weights.
_LUMA_WEIGHTS = {1: (0.2126, 0.0722), 4: (0.30, 0.11), 5: (0.299, 0.114), 6: (0.299, 0.114),
                 7: (0.212, 0.087), 9: (0.2627, 0.0593), 10: (0.2627, 0.0593)}
_BT709, _BT601 = 1, 6
_FULL_RANGE = 2  # AVColorRange: 1 limited (MPEG), 2 full (JPEG), 0 unspecified (limited)
#: Decoded formats the device cannot take as they are -> the planar format they are converted to
#: first, losslessly where one exists (NV12's planes, interleaved chroma, are a plain 4:2:0).
_PLANAR_EQUIVALENT = {"nv12": "yuv420p", "nv21": "yuv420p", "nv16": "yuv422p", "p010le": "yuv420p10le",
                      "p016le": "yuv420p16le"}


def matrix_tag(frame: av.VideoFrame) -> int:
    """The frame's matrix as players pick it: its own tag, else BT.709 from 720 lines up and
    BT.601 below (what players assume for untagged video)."""
    if frame.colorspace in _LUMA_WEIGHTS:
        return frame.colorspace
    return _BT709 if min(frame.width, frame.height) >= 720 else _BT601


def is_planar(fmt: av.VideoFormat) -> bool:
    """Three planes Y, Cb, Cr (or G, B, R) of native-endian integers, and maybe a fourth of alpha:
    what :class:`PlaneLayout` handles (alpha passes through untouched: faces change colour, not opacity)."""
    components = fmt.components
    planes = [c.plane for c in components]
    native = not fmt.name.endswith("be") and all(c.bits <= 16 for c in components)
    if fmt.name.startswith("gbr"):
        return native and planes in ([2, 0, 1], [2, 0, 1, 3])
    return (fmt.name.startswith("yuv") and native and planes in ([0, 1, 2], [0, 1, 2, 3])
            and not components[2].is_alpha)


def as_planar_yuv(frame: av.VideoFrame) -> av.VideoFrame:
    """``frame`` itself if planar (YUV, or planar RGB), else converted on the CPU (packed RGB and
    grey sources become YUV 4:4:4, with alpha if they have it) with the frame's matrix, tagged so
    the conversion back uses the same one."""
    if is_planar(frame.format):
        return frame
    name = frame.format.name
    deep = max(c.bits for c in frame.format.components) > 8
    alpha = "a" if any(c.is_alpha for c in frame.format.components) else ""
    target = _PLANAR_EQUIVALENT.get(name, f"yuv{alpha}444p16le" if deep else f"yuv{alpha}444p")
    matrix = matrix_tag(frame)
    full = frame.color_range == _FULL_RANGE or frame.format.is_rgb
    converted = frame.reformat(format=target, src_colorspace=matrix, dst_colorspace=matrix,
                               src_color_range=_FULL_RANGE if full else 1, dst_color_range=_FULL_RANGE if full else 1)
    converted.pts, converted.time_base = frame.pts, frame.time_base
    return converted


def frame_planes(frame: av.VideoFrame) -> list[np.ndarray]:
    """The three planes of a planar YUV frame as (H, W) arrays: views, no copy. Samples over
    8 bits come as int16 holding the unsigned bit pattern: torch's uint16 lacks most GPU kernels."""
    dtype = np.int16 if frame.format.components[0].bits > 8 else np.uint8
    return [np.frombuffer(p, dtype).reshape(p.height, -1)[:, : p.width] for p in frame.planes]


def _samples(plane: torch.Tensor) -> torch.Tensor:
    """Sample values as float, undoing the int16 bit pattern of deep formats."""
    if plane.dtype == torch.int16:
        return (plane.int() & 0xFFFF).float()
    return plane.float()


def writable_planes(frame: av.VideoFrame) -> list[np.ndarray]:
    """:func:`frame_planes` of a frame this code made (not a decoder's), as arrays to write into."""
    dtype = np.int16 if frame.format.components[0].bits > 8 else np.uint8
    return [np.frombuffer(memoryview(p), dtype).reshape(p.height, -1)[:, : p.width] for p in frame.planes]


def planes_to_frame(planes: list[np.ndarray], like: av.VideoFrame, format: str | None = None) -> av.VideoFrame:
    """A new frame of ``like``'s size and colour tags (and format, unless ``format`` names another
    with the same planes) holding ``planes``."""
    frame = av.VideoFrame(like.width, like.height, format or like.format.name)
    for dst, samples in zip(writable_planes(frame), planes):
        np.copyto(dst, samples)
    return copy_colour_tags(like, frame)


def copy_colour_tags(like: av.VideoFrame, frame: av.VideoFrame) -> av.VideoFrame:
    """``frame`` tagged with ``like``'s matrix, range, primaries and transfer: encoders write each
    frame's tags into its header (ProRes does), so a restored frame must carry the decoded one's."""
    frame.colorspace, frame.color_range = like.colorspace, like.color_range
    frame.color_primaries, frame.color_trc = like.color_primaries, like.color_trc
    return frame


def unpack_planes(packed: Packed, like: av.VideoFrame) -> list[Packed]:
    """Views of each plane, (..., h, w), in buffers (..., total) holding a frame of ``like``'s format
    and size as its planes one after another, trimmed to their width (the layout of an upload)."""
    views, offset = [], 0
    for plane in like.planes:
        size = plane.height * plane.width
        views.append(packed[..., offset : offset + size].reshape(*packed.shape[:-1], plane.height, plane.width))
        offset += size
    return views


_TORCH_DTYPE = {np.dtype(np.uint8): torch.uint8, np.dtype(np.int16): torch.int16}


def packed_size(frame: av.VideoFrame) -> tuple[torch.dtype, int]:
    """The dtype and length of a buffer that holds ``frame``'s planes packed (:func:`pack_planes`)."""
    planes = frame_planes(frame)
    return _TORCH_DTYPE[planes[0].dtype], sum(p.size for p in planes)


def pack_planes(frame: av.VideoFrame, into: np.ndarray) -> np.ndarray:
    """``into``, (total,), filled with ``frame``'s planes in the layout :func:`unpack_planes` reads."""
    for dst, plane in zip(unpack_planes(into, frame), frame_planes(frame)):
        np.copyto(dst, plane)
    return into


def packed_to_frame(packed: np.ndarray, like: av.VideoFrame) -> av.VideoFrame:
    """A frame of ``like``'s format, size and colour tags holding one packed buffer
    (:func:`unpack_planes`). For 8-bit 4:2:0 with an even height and a width that is a multiple of
    64 (1080p, 720p, 4K) the frame is the buffer itself: its planes and rows then start 32-byte
    aligned, as in FFmpeg's own frames, and the encoder reads it in place. That saves a 3 MB copy
    per 1080p frame, CPU time and memory traffic the encoder's threads share. Other layouts are
    copied into a new frame."""
    if like.format.name in ("yuv420p", "yuvj420p") and like.width % 64 == 0 and like.height % 2 == 0:
        return copy_colour_tags(like, av.VideoFrame.from_numpy_buffer(packed.reshape(-1, like.width), like.format.name))
    return planes_to_frame(unpack_planes(packed, like), like)


@dataclass(frozen=True)
class Orientation:
    """How stored pixels become the picture players show, from the display matrix: one of the
    eight turns and mirrorings. Applied in this order: transpose, then flip rows, then columns."""

    transpose: bool = False
    flip_rows: bool = False
    flip_cols: bool = False

    @classmethod
    def of_matrix(cls, matrix: tuple[int, ...] | None) -> Orientation:
        """From FFmpeg's 3x3 display matrix (row vector convention: a displayed point is
        ``[x y 1] @ M``), whose upper 2x2 part holds the turn and the mirroring."""
        if matrix is None:
            return cls()
        a, b, c, d = matrix[0], matrix[1], matrix[3], matrix[4]
        if abs(b) > abs(a):  # x' follows y and y' follows x: a quarter turn, maybe mirrored
            return cls(True, b < 0, c < 0)
        return cls(False, d < 0, a < 0)

    def upright(self, image: torch.Tensor) -> torch.Tensor:
        """(..., h, w) stored -> (..., H, W) as displayed."""
        if self.transpose:
            image = image.transpose(-2, -1)
        dims = [d for d, flip in ((-2, self.flip_rows), (-1, self.flip_cols)) if flip]
        return image.flip(dims) if dims else image

    def stored(self, image: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`upright`."""
        dims = [d for d, flip in ((-2, self.flip_rows), (-1, self.flip_cols)) if flip]
        if dims:
            image = image.flip(dims)
        return image.transpose(-2, -1) if self.transpose else image


def shown_width(width: int, sar: Fraction | None) -> int:
    """A stored width as players show it, stretched by the sample aspect ratio (1440 at 4:3: 1920)."""
    return max(1, round(width * sar)) if sar else width


def display_matrix(frame: av.VideoFrame) -> tuple[int, ...] | None:
    """The frame's display matrix (nine 16.16 / 2.30 fixed-point integers), or None."""
    # Looked up by kind: PyAV 18.1.1 iterates the side data's kinds, where 18.1.0 iterated the data.
    side_data = frame.side_data.get(av.sidedata.sidedata.Type.DISPLAYMATRIX)
    return tuple(int(v) for v in np.frombuffer(bytes(side_data), np.int32)) if side_data is not None else None


@dataclass(frozen=True)
class FieldLines:
    """One field of an interlaced frame, held as a picture of its own (its lines alone, stored
    orientation): every other line of the frame, from row ``parity`` (0 top field, 1 bottom)."""

    parity: int
    lines: int  # the whole frame's height

    def doubled(self, image: torch.Tensor) -> torch.Tensor:
        """(..., field lines, w) -> (..., frame lines, w): the field made whole by line doubling,
        each missing line the mean of the field's lines above and below it (the nearest at the edges)."""
        rows = (torch.arange(self.lines, device=image.device) - self.parity) / 2
        last = image.shape[-2] - 1
        above, below = rows.floor().long().clamp(0, last), rows.ceil().long().clamp(0, last)
        return (image.index_select(-2, above) + image.index_select(-2, below)) / 2

    def own(self, image: torch.Tensor) -> torch.Tensor:
        """(..., frame lines, w) -> the field's own lines: the inverse of :meth:`doubled`."""
        return image[..., self.parity :: 2, :]


@dataclass(frozen=True)
class PlaneLayout:
    """How one video's samples map to RGB: what a conversion needs to know, read from a frame."""

    bits: int
    chroma_shift: tuple[int, int]  # log2 subsampling of Cb/Cr: (y, x); (1, 1) for 4:2:0
    kr: float
    kb: float
    full_range: bool
    orientation: Orientation  # from stored to upright
    field: FieldLines | None = None  # an interlaced frame's field: face work sees it line-doubled
    rgb: bool = False  # planar RGB (G, B, R planes, as photos are read): no matrix, no subsampling
    #: Non-square pixels (anamorphic HDV, DV 16:9): (stored width, shown width). Face work sees the
    #: picture stretched to its shown width, as players show it, so faces keep their proportions.
    stretch: tuple[int, int] | None = None

    @classmethod
    def of(cls, frame: av.VideoFrame, orientation: Orientation, sar: Fraction | None = None) -> PlaneLayout:
        """The layout of a planar YUV ``frame`` shown with ``orientation`` (from the decoded
        frame's display matrix: a converted frame no longer carries it) and the stream's sample
        aspect ratio ``sar``."""
        luma = frame.format.components[0]
        chroma = av.VideoFormat(frame.format.name, 64, 64).components[1]  # an even size: odd ones round up
        shift = ((64 // chroma.height).bit_length() - 1, (64 // chroma.width).bit_length() - 1)
        kr, kb = _LUMA_WEIGHTS[matrix_tag(frame)]
        full = frame.color_range == _FULL_RANGE or frame.format.name.startswith("yuvj") or frame.format.is_rgb
        shown = shown_width(frame.width, sar)
        stretch = (frame.width, shown) if shown != frame.width else None
        return cls(luma.bits, shift, kr, kb, full, orientation, rgb=frame.format.is_rgb, stretch=stretch)

    def _to_width(self, image: torch.Tensor, width: int) -> torch.Tensor:
        """(N, C, h, w) resampled to ``width`` columns (bilinear; area-weighted when narrowing)."""
        return F.interpolate(image, size=(image.shape[-2], width), mode="bilinear", align_corners=False,
                             antialias=width < image.shape[-1])

    def _scale(self) -> tuple[float, float, float, float]:
        """(luma offset, luma span, chroma centre, chroma span) in sample units."""
        top = float(2**self.bits - 1)
        if self.full_range:
            return 0.0, top, float(2 ** (self.bits - 1)), top
        step = float(2 ** (self.bits - 8))
        return 16 * step, 219 * step, 128 * step, 224 * step

    def to_rgb(self, planes: list[torch.Tensor]) -> torch.Tensor:
        """Upright RGB (N, 3, H, W), float in [0, 255] rounded to whole levels, from (N, h, w)
        planes in stored orientation; chroma is interpolated bilinearly at the sample centres.
        A field comes out whole, as high as its frame (:meth:`FieldLines.doubled`)."""
        if self.rgb:
            g, b, r = (_samples(p) / (2**self.bits - 1) for p in planes[:3])
            rgb = torch.stack([r, g, b], 1)
        else:
            rgb = self._yuv_to_rgb(planes)
        if self.field is not None:
            rgb = self.field.doubled(rgb)
        if self.stretch is not None:
            rgb = self._to_width(rgb, self.stretch[1])
        return self.orientation.upright((rgb * 255).round_().clamp_(0, 255))

    def _yuv_to_rgb(self, planes: list[torch.Tensor]) -> torch.Tensor:
        """(N, 3, h, w) RGB in [0, 1], not yet rounded, from YUV planes."""
        luma_offset, luma_span, chroma_centre, chroma_span = self._scale()
        y = (_samples(planes[0]) - luma_offset) / luma_span
        height, width = y.shape[-2:]
        chroma = torch.stack([_samples(planes[1]), _samples(planes[2])], 1)
        if self.chroma_shift != (0, 0):
            chroma = F.interpolate(chroma, size=(height, width), mode="bilinear", align_corners=False)
        pb, pr = ((chroma - chroma_centre) / chroma_span).unbind(1)
        kg = 1.0 - self.kr - self.kb
        r = y + 2 * (1 - self.kr) * pr
        b = y + 2 * (1 - self.kb) * pb
        g = (y - self.kr * r - self.kb * b) / kg
        return torch.stack([r, g, b], 1)

    def to_planes(self, rgb: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
        """The inverse of :meth:`to_rgb`: (N, 3, H, W) upright RGB in [0, 255] -> stored-orientation
        planes of ``dtype`` (that of :func:`frame_planes`); chroma is the mean of the samples it covers.
        A field keeps only its own lines."""
        rgb = self.orientation.stored(rgb)
        if self.stretch is not None:
            rgb = self._to_width(rgb, self.stretch[0])
        if self.field is not None:
            rgb = self.field.own(rgb)
        top = 2**self.bits - 1
        if self.rgb:
            r, g, b = (rgb * (top / 255)).round_().clamp_(0, top).unbind(1)
            return [p.to(torch.int32).to(dtype) for p in (g, b, r)]
        luma_offset, luma_span, chroma_centre, chroma_span = self._scale()
        r, g, b = (rgb / 255).unbind(1)
        y = self.kr * r + (1 - self.kr - self.kb) * g + self.kb * b
        chroma = torch.stack([(b - y) / (2 * (1 - self.kb)), (r - y) / (2 * (1 - self.kr))], 1)
        if self.chroma_shift != (0, 0):
            kernel = (2 ** self.chroma_shift[0], 2 ** self.chroma_shift[1])
            chroma = F.avg_pool2d(chroma, kernel, ceil_mode=True)
        out = [(y * luma_span + luma_offset).round_().clamp_(0, top)]
        out += list((chroma * chroma_span + chroma_centre).round_().clamp_(0, top).unbind(1))
        return [p.to(torch.int32).to(dtype) for p in out]  # through int32: 16-bit values wrap into int16

    def merge(self, new: list[torch.Tensor], old: list[torch.Tensor], changed: torch.Tensor) -> list[torch.Tensor]:
        """``new`` samples where ``changed`` (N, H, W upright bool) reaches them, else ``old``: a
        chroma sample counts as changed when any pixel it covers changed. An alpha plane is ``old``'s."""
        changed = self.orientation.stored(changed)
        if self.stretch is not None:  # a stored sample changed if any shown pixel it makes changed
            changed = self._to_width(changed[:, None].float(), self.stretch[0])[:, 0] > 0
        if self.field is not None:
            changed = self.field.own(changed)
        mask = changed[:, None].float()
        kernel = (2 ** self.chroma_shift[0], 2 ** self.chroma_shift[1])
        cover = F.max_pool2d(mask, kernel, ceil_mode=True)[:, 0] > 0 if kernel != (1, 1) else changed
        return ([torch.where(changed, new[0], old[0])] + [torch.where(cover, n, o) for n, o in zip(new[1:3], old[1:3])]
                + old[3:])


def to_rgb(frame: av.VideoFrame, layout: PlaneLayout | None = None) -> np.ndarray:
    """Upright RGB24 (H, W, 3) of a decoded frame on the CPU, the same conversion the devices use."""
    planar = as_planar_yuv(frame)
    layout = layout or PlaneLayout.of(planar, Orientation.of_matrix(display_matrix(frame)))
    planes = [torch.from_numpy(p.copy())[None] for p in frame_planes(planar)]
    return layout.to_rgb(planes)[0].permute(1, 2, 0).to(torch.uint8).numpy()
