"""Which decoder turns the video's packets into pictures: libavcodec on the CPU (PyAV), or NVDEC,
the GPU's video decoder (NVIDIA's PyNvVideoCodec, ``pip install 'gpen-video[nvdec]'``).

PyAV opens the file and demuxes either way; only the video packets' decoding moves. NVDEC is
chosen only where its pictures are those libavcodec gives, sample for sample: H.264 and HEVC
decoding is exact by specification, and this module limits NVDEC to the streams whose exactness
the GPU tests prove (progressive 4:2:0, 8-bit, or 10-bit HEVC, even sizes). Everything else, and
every machine without a GPU, NVDEC or the package, decodes on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType

import av

from ..errors import UsageError, error_line
from .colour import display_matrix
from .frames import Decoded
from .nvdec import NVDEC_CODECS, NvdecDecoder, decoder_caps, nvdec_module

NVDEC_EXTRA = "pip install 'gpen-video[nvdec]'"

@dataclass(frozen=True)
class StreamTraits:
    """What decides whether NVDEC can decode a video stream exactly, read from its parameters."""

    codec: str  # libavcodec's name: "h264", "hevc", "vp8", ...
    pix_fmt: str  # the format libavcodec decodes it to
    width: int
    height: int
    interlaced: bool
    captions: bool = False  # closed captions in the frames' side data, which NVDEC's pictures lack


def stream_refusal(traits: StreamTraits) -> str:
    """Why NVDEC may not decode this stream ("" when it may), from the stream alone."""
    if traits.codec not in NVDEC_CODECS:
        return f"NVDEC does not decode {traits.codec} here (only H.264 and HEVC)"
    formats = NVDEC_CODECS[traits.codec][1]
    if traits.pix_fmt not in formats:
        return f"NVDEC does not decode {traits.codec} in {traits.pix_fmt or 'an unknown format'} exactly here"
    if traits.interlaced:
        return "interlaced video decodes on the CPU (NVDEC's fields are not proven exact)"
    if traits.width % 2 or traits.height % 2:
        return f"an odd size ({traits.width}x{traits.height}) decodes on the CPU"
    if traits.captions:
        return "closed captions travel on the CPU decoder's frames (NVDEC's pictures come without them)"
    return ""


def gpu_refusal(traits: StreamTraits, gpu: int, nvc: ModuleType) -> str:
    """Why this GPU's NVDEC cannot decode the stream ("" when it can), from its capabilities."""
    name, formats = NVDEC_CODECS[traits.codec]
    try:
        caps = decoder_caps(nvc, gpu, name, formats[traits.pix_fmt])
    except Exception as exc:  # the driver's own words: no libnvcuvid, a MIG slice without decoders
        return f"GPU {gpu} has no NVDEC for {traits.codec} ({error_line(exc)})"
    if not caps.get("supported", 0) or not caps.get("num_decoder_engines", 0):
        return f"GPU {gpu} has no NVDEC engine for {traits.codec} {formats[traits.pix_fmt]}-bit 4:2:0"
    low = (caps.get("width_min", 0), caps.get("height_min", 0))
    high = (caps.get("width_max", traits.width), caps.get("height_max", traits.height))
    blocks = ((traits.width + 15) // 16) * ((traits.height + 15) // 16)
    if not (low[0] <= traits.width <= high[0] and low[1] <= traits.height <= high[1]) or \
            blocks > caps.get("mb_num_max", blocks):
        return f"GPU {gpu}'s NVDEC decodes {traits.codec} up to {high[0]}x{high[1]}, not {traits.width}x{traits.height}"
    return ""


@dataclass(frozen=True)
class DecoderChoice:
    """The decoder a video gets, and why (for the summary)."""

    name: str = "cpu"  # "cpu" or "nvdec"
    gpu: int | None = None  # NVDEC's GPU
    why: str = ""  # why the CPU, where NVDEC was allowed
    matrix: tuple[int, ...] | None = None  # the stream's display matrix, which NVDEC's pictures lack

    def describe(self) -> str:
        if self.name == "nvdec":
            return f"decoded by NVDEC on GPU {self.gpu}"
        return "decoded on the CPU" + (f" ({self.why})" if self.why else "")

    def open(self, stream: av.video.stream.VideoStream) -> CpuDecoder | NvdecDecoder:
        """A decoder for the stream's packets."""
        if self.name == "nvdec":
            assert self.gpu is not None
            return NvdecDecoder(stream, self.gpu, self.matrix)
        return CpuDecoder(stream)


CPU_DECODING = DecoderChoice()


def choose_decoder(requested: str, traits: StreamTraits, gpu: int | None, matrix: tuple[int, ...] | None = None,
                   module: Callable[[], ModuleType | None] = nvdec_module) -> DecoderChoice:
    """``--decoder``'s choice for a stream: ``cpu`` always the CPU; ``nvdec`` NVDEC, or a
    :class:`~gpen_video.options.UsageError` saying why it cannot (before any work); ``auto``
    NVDEC where it can, else the CPU. ``gpu`` is the first GPU the job runs on (None: the CPU only)."""
    if requested == "cpu":
        return CPU_DECODING
    why = stream_refusal(traits)
    nvc = None
    if not why and gpu is None:
        why = "no CUDA GPU to decode on"
    if not why:
        nvc = module()
        if nvc is None:
            why = f"PyNvVideoCodec is not installed ({NVDEC_EXTRA})"
    if not why and nvc is not None and gpu is not None:
        why = gpu_refusal(traits, gpu, nvc)
    if why:
        if requested == "nvdec":
            raise UsageError(f"--decoder nvdec: {why}")
        return DecoderChoice("cpu", why=why if gpu is not None else "")
    return DecoderChoice("nvdec", gpu, matrix=matrix)


def has_alpha_layer(stream: av.video.stream.VideoStream) -> bool:
    """A WebM/Matroska VP9 stream with an alpha channel: its alpha is a second VP9 picture in
    each block's additions, which only libvpx decodes (FFmpeg's own VP9 decoder shows the colour alone)."""
    tags = {key.lower(): value for key, value in stream.metadata.items()}
    return stream.codec_context.name == "vp9" and tags.get("alpha_mode") == "1"


class CpuDecoder:
    """libavcodec, through PyAV: each packet decoded as it comes (an empty packet flushes), by the
    stream's own decoder, or by libvpx for VP9 with alpha (:func:`has_alpha_layer`)."""

    def __init__(self, stream: av.video.stream.VideoStream) -> None:
        self.context = stream.codec_context
        if has_alpha_layer(stream):
            self.context = av.CodecContext.create("libvpx-vp9", "r")
            self.context.thread_type = "AUTO"

    def decode(self, packet: av.Packet) -> list[Decoded]:
        return [Decoded(frame) for frame in self.context.decode(packet)]

    def frames(self, container: av.container.InputContainer,
               stream: av.video.stream.VideoStream) -> Iterator[av.VideoFrame]:
        """Every frame of ``stream`` from where ``container`` stands, its decoder flushed at the end."""
        for packet in container.demux(stream):
            for decoded in self.decode(packet):
                yield decoded.frame

    @staticmethod
    def display_matrix(frame: av.VideoFrame) -> tuple[int, ...] | None:
        return display_matrix(frame)
