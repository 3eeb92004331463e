"""NVDEC, the GPU's video decoder, through NVIDIA's PyNvVideoCodec: the packets PyAV demuxes
go to it (length-prefixed streams filtered to Annex B first), and its pictures come back packed
as the CPU decoder's planes, on the GPU, with a host copy queued on the decoder's stream."""

from __future__ import annotations

import collections
import ctypes
import functools
import importlib
from types import ModuleType
from typing import NamedTuple

import av
import numpy as np
import torch

from ..errors import error_line
from .colour import packed_to_frame
from .frames import Decoded

#: codec -> (PyNvVideoCodec's name for it, the decoded formats NVDEC gives exactly, with their bit depth)
NVDEC_CODECS: dict[str, tuple[str, dict[str, int]]] = {
    "h264": ("H264", {"yuv420p": 8, "yuvj420p": 8}),
    "hevc": ("HEVC", {"yuv420p": 8, "yuvj420p": 8, "yuv420p10le": 10}),
}


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
        name = NVDEC_CODECS[stream.codec_context.name][0]
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
