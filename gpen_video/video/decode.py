"""Decoding: the video's frames as planar YUV, as decoded (the devices convert them for the face
stages), plus what the encoder needs to leave the rest of the file as it was (timestamps, the
other streams' packets)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import torch

from .colour import PlaneLayout, as_planar_yuv, frame_planes, planes_to_frame, to_rgb


class InputError(RuntimeError):
    """The input cannot be read as a video (or image). The message is one line."""


@dataclass
class OnDevice:
    """A frame as the device that detected it holds it until restoration, so that it crosses to
    the device and is converted to RGB once: its planes (h, w), and its upright RGB (3, H, W) uint8
    (whole levels, so nothing is lost)."""

    planes: list[torch.Tensor]
    rgb: torch.Tensor


@dataclass
class SourceFrame:
    """One decoded video frame and where it sits in time."""

    index: int
    frame: av.VideoFrame  # planar YUV as decoded: the encoder keeps its samples wherever no face changed
    layout: PlaneLayout  # how its planes become upright RGB
    #: "" for a clean frame; "corrupt" if the decoder concealed errors in it; "repeated" if its
    #: packet could not be decoded and the previous frame stands in, at this frame's time.
    damage: str = ""
    #: Its planes packed into one pinned host buffer by the decode thread, ready for a GPU
    #: worker's asynchronous upload (restore.stage_planes); None once uploaded.
    staged: torch.Tensor | None = None
    #: Kept on the device that detected it; None once restored or when it has no face to restore.
    on_device: OnDevice | None = None

    @property
    def time(self) -> float:
        return float(self.frame.time or 0.0)

    def rgb(self) -> np.ndarray:
        """Upright RGB24, converted on the CPU (for tests and tools; the pipeline converts on its devices)."""
        return to_rgb(self.frame, self.layout)


@dataclass
class VideoInfo:
    path: Path
    width: int  # upright
    height: int
    rotation: int
    time_base: Fraction
    average_rate: Fraction | None
    frames: int | None  # from the container header; may be missing or approximate
    duration: float | None
    pix_fmt: str

    @property
    def fps(self) -> float:
        return float(self.average_rate) if self.average_rate else 25.0


def open_input(path: str | Path) -> av.container.InputContainer:
    """Open a media file, turning FFmpeg's many failure modes into one clear error."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"input not found: {path}")
    if path.is_dir():
        raise InputError(f"input is a directory, not a video: {path}")
    if path.stat().st_size == 0:
        raise InputError(f"input is an empty file: {path}")
    try:
        container = av.open(str(path))
    except av.FFmpegError as exc:
        raise InputError(f"cannot read {path} as a video: {exc.strerror or exc}") from None
    if not container.streams.video:
        container.close()
        raise InputError(f"{path} has no video stream")
    container.streams.video[0].thread_type = "AUTO"  # frame and slice threads: decoding is a CPU stage
    return container


def probe(path: str | Path) -> VideoInfo:
    """Geometry and timing of the first video stream, read from its first frame.

    Probing uses a container of its own: seeking the main one back would make the demuxer skip
    packets before time zero (such as AAC priming), and they must be copied too.
    """
    with open_input(path) as container:
        stream = container.streams.video[0]
        try:
            first = next(container.decode(stream))
        except (StopIteration, av.FFmpegError) as exc:
            raise InputError(f"{path} has no decodable video frame ({exc or 'empty stream'})") from None
        rotation = first.rotation
        width, height = (first.height, first.width) if round(rotation / 90) % 2 else (first.width, first.height)
        duration = float(stream.duration * stream.time_base) if stream.duration else None
        return VideoInfo(Path(path), width, height, rotation, stream.time_base, stream.average_rate,
                         stream.frames or None, duration, first.format.name)


def demux(container: av.container.InputContainer, copy_streams: set[int]) -> Iterator[SourceFrame | av.Packet]:
    """Decoded video frames of the first video stream, and the packets of ``copy_streams``, in file order.

    Damage does not stop decoding. A frame decoded with concealed errors is marked "corrupt". A
    frame whose packet could not be decoded is replaced by the previous frame at the lost frame's
    time (marked "repeated"), so the source's frame count and timing are kept. Frames come out in
    presentation order, so a packet time passed by without its frame was lost; it is stood in for
    only while decode failures are unaccounted for, since some packets carry no frame of their
    own (a second field, a skipped frame).
    """
    video = container.streams.video[0]
    streams = [video] + [s for s in container.streams if s.index in copy_streams]
    expected: list[int] = []  # presentation times of video packets whose frames have not come out
    last: SourceFrame | None = None
    failures = 0  # packets that failed to decode and have no stand-in yet
    stood_in: int | None = None  # the latest time a stand-in was shown at
    index = 0

    def stand_ins(before: int | None) -> Iterator[SourceFrame]:
        """The previous frame again for each expected time before ``before`` (None: all left)."""
        nonlocal index, failures, stood_in
        while expected and (before is None or expected[0] < before):
            pts = expected.pop(0)
            if not failures or last is None or last.frame.pts is None or pts <= last.frame.pts:
                continue  # a packet without a frame of its own, nothing to repeat yet, or a time shown
            failures -= 1
            copy = planes_to_frame(frame_planes(last.frame), last.frame)
            copy.pts, copy.time_base = pts, last.frame.time_base
            yield SourceFrame(index, copy, last.layout, damage="repeated")
            stood_in = pts
            index += 1

    for packet in container.demux(streams):
        if packet.stream.index != video.index:
            if packet.dts is not None:
                yield packet
            continue
        if packet.pts is not None and not packet.is_discard:
            bisect.insort(expected, packet.pts)
        try:
            frames = packet.decode()
        except av.InvalidDataError:
            failures += 1  # the frame it would have given is stood in for below
            continue
        for frame in frames:
            if frame.pts is not None:
                if stood_in is not None and frame.pts <= stood_in:
                    continue  # decoded late after damage: a stand-in already showed its time
                yield from stand_ins(frame.pts)
                if expected and expected[0] == frame.pts:
                    expected.pop(0)
            planar = as_planar_yuv(frame)
            last = SourceFrame(index, planar, PlaneLayout.of(planar, frame.rotation),
                               damage="corrupt" if frame.is_corrupt else "")
            yield last
            index += 1
    yield from stand_ins(None)


def read_frames(path: str | Path, limit: int | None = None) -> Iterator[SourceFrame]:
    """Every video frame of the first video stream, in presentation order (for tests and tools)."""
    with open_input(path) as container:
        for item in demux(container, set()):
            if limit is not None and item.index >= limit:
                break
            yield item
