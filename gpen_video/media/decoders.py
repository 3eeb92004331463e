"""Which decoder turns the video's packets into pictures: libavcodec on the CPU (PyAV), or NVDEC,
the GPU's video decoder (NVIDIA's PyNvVideoCodec, ``pip install 'gpen-video[nvdec]'``).

PyAV opens the file and demuxes either way; only the video packets' decoding moves. NVDEC is
chosen only where its pictures are those libavcodec gives, sample for sample: H.264 and HEVC
decoding is exact by specification, and this module limits NVDEC to the streams whose exactness
the GPU tests prove (progressive 4:2:0, 8-bit, or 10-bit HEVC, even sizes). Everything else, and
every machine without a GPU, NVDEC or the package, decodes on the CPU.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import NamedTuple

import av
import numpy as np
import torch

from ..errors import UsageError, error_line
from .colour import display_matrix, packed_to_frame

NVDEC_EXTRA = "pip install 'gpen-video[nvdec]'"

#: codec -> (PyNvVideoCodec's name for it, the decoded formats NVDEC gives exactly, with their bit depth)
_NVDEC_CODECS: dict[str, tuple[str, dict[str, int]]] = {
    "h264": ("H264", {"yuv420p": 8, "yuvj420p": 8}),
    "hevc": ("HEVC", {"yuv420p": 8, "yuvj420p": 8, "yuv420p10le": 10}),
}


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
    if traits.codec not in _NVDEC_CODECS:
        return f"NVDEC does not decode {traits.codec} here (only H.264 and HEVC)"
    formats = _NVDEC_CODECS[traits.codec][1]
    if traits.pix_fmt not in formats:
        return f"NVDEC does not decode {traits.codec} in {traits.pix_fmt or 'an unknown format'} exactly here"
    if traits.interlaced:
        return "interlaced video decodes on the CPU (NVDEC's fields are not proven exact)"
    if traits.width % 2 or traits.height % 2:
        return f"an odd size ({traits.width}x{traits.height}) decodes on the CPU"
    if traits.captions:
        return "closed captions travel on the CPU decoder's frames (NVDEC's pictures come without them)"
    return ""


def nvdec_module() -> ModuleType | None:
    """PyNvVideoCodec, or None where it is not installed or cannot load (no NVIDIA driver)."""
    try:
        return importlib.import_module("PyNvVideoCodec")
    except (ImportError, OSError, RuntimeError):
        return None


@functools.cache
def decoder_caps(nvc: ModuleType, gpu: int, codec: str, bitdepth: int) -> dict:
    """What this GPU's NVDEC decodes of a codec at a bit depth (4:2:0), asked once per process:
    the driver took 0.4 s to answer on an H200 (run BK), which a warm engine would
    otherwise pay for every clip."""
    return dict(nvc.GetDecoderCaps(gpuid=gpu, codec=getattr(nvc.cudaVideoCodec, codec),
                                   chromaformat=nvc.cudaVideoChromaFormat.__members__["420"], bitdepth=bitdepth))


def gpu_refusal(traits: StreamTraits, gpu: int, nvc: ModuleType) -> str:
    """Why this GPU's NVDEC cannot decode the stream ("" when it can), from its capabilities."""
    name, formats = _NVDEC_CODECS[traits.codec]
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


class Decoded(NamedTuple):
    """A decoded picture, and (from NVDEC) its planes already packed on the GPU for the workers,
    and whether its packet came flagged as damaged by the container (NVDEC reports no concealment
    of its own; libavcodec's frames say so themselves)."""

    frame: av.VideoFrame
    staged: torch.Tensor | None = None
    damaged: bool = False


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


def needs_annexb(stream: av.video.stream.VideoStream) -> bool:
    """Whether the container stores the stream's NAL units length-prefixed (MP4, MOV, Matroska:
    their extradata is an avcC / hvcC record, which starts with version 1), which NVDEC's parser
    cannot read: they go through the ``*_mp4toannexb`` filter. MPEG-TS and raw streams are Annex B already."""
    extradata = stream.codec_context.extradata
    return bool(extradata) and extradata[0] == 1


def picture_template(stream: av.video.stream.VideoStream) -> av.VideoFrame:
    """A frame with the format, size and colour tags libavcodec's frames of this stream carry."""
    context = stream.codec_context
    like = av.VideoFrame(context.width, context.height, context.format.name)
    like.colorspace, like.color_range = context.colorspace, context.color_range
    like.color_primaries, like.color_trc = context.color_primaries, context.color_trc
    return like


def nv12_to_planes(surface: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """NVDEC's picture ((H * 3/2, W): luma, then interleaved chroma; 16-bit samples with the value
    in the top bits for more than 8 bits) as the CPU decoder's planes packed one after another
    (Y, U, V; for 10 bits, int16 holding the value, as :func:`~.colour.frame_planes` reads them)."""
    if surface.dtype == torch.uint8 and surface.shape[-1] == 2 * width:
        surface = surface.view(torch.int16)  # 16-bit samples handed over as bytes
    if surface.dtype != torch.uint8:
        surface = surface.view(torch.int16)
        surface = (surface >> 6) & 0x3FF
    luma = surface[:height]
    chroma = surface[height : height + height // 2].reshape(height // 2, width // 2, 2)
    return torch.cat([luma.reshape(-1), chroma[..., 0].reshape(-1), chroma[..., 1].reshape(-1)])


#: Packets whose bytes NVDEC may still read: far more than a stream reorders pictures by (16 at most).
_KEPT_PACKETS = 256
_NO_PTS = -1  # what a packet without a pts goes to NVDEC with


class _InFlight(NamedTuple):
    """Pictures whose copy to the host is queued on the decoder's stream: (pts, planes on the GPU,
    pinned host buffer) each, and the event that marks the copies done."""

    pictures: list[tuple[int, torch.Tensor, torch.Tensor]]
    copied: torch.cuda.Event


def _primary_context(device: torch.device) -> int:
    """The handle of ``device``'s primary CUDA context, torch's, which NVDEC must share to use its streams."""
    with torch.cuda.device(device):
        torch.cuda.current_stream(device).query()  # the context exists and is this thread's
        context = ctypes.c_void_p()
        ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(context))
    if not context.value:
        raise RuntimeError(f"no CUDA context on {device}")
    return context.value


class NvdecDecoder:
    """NVDEC on one GPU, fed PyAV's packets (in Annex B). Its pictures come back in presentation
    order as the CPU decoder's would, the same samples and timestamps, one packet late: each
    picture is packed on the GPU, where the workers take it without an upload, and copied once into
    pinned memory for the encoder (the frame shares that buffer). The copies of one packet's
    pictures run while the next packet decodes; only the packing, which reads the decoder's
    surfaces, is waited for before the decoder may reuse them."""

    def __init__(self, stream: av.video.stream.VideoStream, gpu: int, matrix: tuple[int, ...] | None) -> None:
        from av.bitstream import BitStreamFilterContext

        self.nvc = nvdec_module()
        name = _NVDEC_CODECS[stream.codec_context.name][0]
        self.filter = BitStreamFilterContext(f"{stream.codec_context.name}_mp4toannexb", stream) \
            if needs_annexb(stream) else None
        self.device = torch.device("cuda", gpu)
        # NVDEC's own copies run on this stream too. Left on PyNvVideoCodec's default stream, each
        # packet waited behind GPEN's queued work: the decode thread spun 3.5 CPU s on the 20 s
        # crowd clip (0.8 s here) and the crowd ran 15-18 % slower (run BK). High priority: a
        # frame's few copies go before the next batch's kernels.
        self.stream = torch.cuda.Stream(self.device, priority=-1)
        self.decoder = self.nvc.CreateDecoder(gpuid=gpu, codec=getattr(self.nvc.cudaVideoCodec, name),
                                              cudacontext=_primary_context(self.device),
                                              cudastream=self.stream.cuda_stream, usedevicememory=True)
        self.like = picture_template(stream)
        self.time_base = stream.time_base
        self.matrix = matrix
        # Each packet goes in with its pts, which NVDEC hands to the pictures in presentation
        # order (it gives the smallest pts waiting to the next picture shown, so the numbers must
        # be the real times: run BI); a packet without one goes in as -1. Its duration and
        # corrupt flag wait here for its picture.
        self.packets: dict[int, tuple[int, bool]] = {}
        # The decoder reads a packet's bytes after Decode() returns, so each is a copy of our own,
        # kept a while: the filter reuses its output buffers (run BI: reading them in place lost
        # every picture after the first).
        self.kept: collections.deque[np.ndarray] = collections.deque(maxlen=_KEPT_PACKETS)
        self.in_flight: list[_InFlight] = []

    def display_matrix(self, frame: av.VideoFrame) -> tuple[int, ...] | None:
        """The stream's display matrix (NVDEC's pictures carry no side data)."""
        return self.matrix

    def _send(self, data: np.ndarray | None, pts: int) -> list:
        """One packet to the decoder (None: the end of the stream)."""
        packet = self.nvc.PacketData()
        if data is not None:
            packet.bsl_data, packet.bsl, packet.pts = data.ctypes.data, data.size, pts
        return list(self.decoder.Decode(packet))

    def decode(self, packet: av.Packet) -> list[Decoded]:
        """The pictures the packets before this one completed (an empty packet: all that are
        left). A packet NVDEC refuses raises :class:`av.InvalidDataError`, as libavcodec's would;
        the pictures already decoded still come out with the next packet."""
        flushing = not packet.size
        pts = packet.pts if packet.pts is not None else _NO_PTS  # read first: the filter takes the packet
        if not flushing:
            self.packets[pts] = (packet.duration or 0, packet.is_corrupt)
        try:
            filtered = self.filter.filter(None if flushing else packet) if self.filter else \
                ([] if flushing else [packet])
            surfaces = []
            for part in filtered:
                self.kept.append(np.frombuffer(bytes(part), np.uint8))
                surfaces += self._send(self.kept[-1], pts)
            if flushing:
                surfaces += self._send(None, 0)
            self._queue_copies(surfaces)
        except av.InvalidDataError:
            raise
        except Exception as exc:  # NVDEC's own errors: handled as a packet that did not decode
            raise av.InvalidDataError(0, f"NVDEC: {error_line(exc)}") from exc
        # One packet late: the newest pictures' copies run while the next packet decodes.
        return self._finished(len(self.in_flight) if flushing else max(len(self.in_flight) - 1, 0))

    def _queue_copies(self, surfaces: list) -> None:
        """Pack each surface on the decoder's stream and queue its copy to pinned memory; return
        once the surfaces have been read, so the decoder may reuse them."""
        if not surfaces:
            return
        pictures = []
        with torch.cuda.stream(self.stream):
            for surface in surfaces:
                planes = nv12_to_planes(torch.from_dlpack(surface), self.like.height, self.like.width)
                pictures.append((surface.getPTS(), planes, torch.empty(planes.shape, dtype=planes.dtype,
                                                                        pin_memory=True)))
            packed = self._recorded()
            for _, planes, host in pictures:
                host.copy_(planes, non_blocking=True)
            self.in_flight.append(_InFlight(pictures, self._recorded()))
        packed.synchronize()

    def _recorded(self) -> torch.cuda.Event:
        """An event recorded on the decoder's stream, whose waits sleep rather than spin, as
        every wait of the pipeline's does (``transfer.Pending``): the cores are the encoder's."""
        event = torch.cuda.Event(blocking=True)
        event.record(self.stream)
        return event

    def _finished(self, count: int) -> list[Decoded]:
        """The oldest ``count`` packets' pictures, once their copies are done, as the encoder's frames."""
        finished, self.in_flight = self.in_flight[:count], self.in_flight[count:]
        decoded = []
        for done in finished:
            done.copied.synchronize()
            for pts, planes, host in done.pictures:
                frame = packed_to_frame(host.numpy(), self.like)  # with the template's colour tags
                duration, damaged = self.packets.pop(pts, (0, False))
                frame.pts = None if pts == _NO_PTS else pts
                frame.time_base, frame.duration = self.time_base, duration
                decoded.append(Decoded(frame, planes, damaged))
        return decoded
