"""Decoding a whole video, or from a key frame on: its frames as planar YUV, numbered in
presentation order, with the other streams' packets to copy, in file order; damage stood in for,
a cut file found (:func:`demux`)."""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av

from ..errors import InputError, failures_as
from .colour import Orientation, PlaneLayout, as_planar_yuv, frame_planes, planes_to_frame
from .decoders import CPU_DECODING, DecoderChoice
from .frames import SourceFrame
from .opening import open_input, video_stream

log = logging.getLogger(__name__)


@dataclass
class DecodeReport:
    """How the input turned out to end, filled in by :func:`demux`."""

    truncated: str = ""  # why the video ends before the container says it does (known beforehand, or found)


def _declared_end(container: av.container.InputContainer, video: av.video.stream.VideoStream) -> float | None:
    """Where the container says the video ends, in seconds: the stream's own duration (MP4, or
    Matroska's per-track DURATION tag), else the file's."""
    start = float(video.start_time * video.time_base) if video.start_time is not None else 0.0
    if video.duration:
        return start + float(video.duration * video.time_base)
    tag = video.metadata.get("DURATION")
    if tag:
        hours, minutes, seconds = tag.split(":")
        return float(hours) * 3600 + float(minutes) * 60 + float(seconds)
    if container.duration:
        return float(container.duration) / 1e6 + (float(container.start_time) / 1e6 if container.start_time else 0.0)
    return None


@dataclass(frozen=True)
class SeekPoint:
    """A key frame to start decoding at, part-way through a video: its packet's pts, and its
    index among the video's frames in presentation order."""

    pts: int
    index: int


def demux(container: av.container.InputContainer, copy_streams: set[int], allow_truncated: bool = False,
          report: DecodeReport | None = None, decoding: DecoderChoice = CPU_DECODING, start: SeekPoint | None = None
          ) -> Iterator[SourceFrame | av.Packet]:
    """Decoded video frames of the first video stream, and the packets of ``copy_streams``, in file
    order; ``decoding`` says which decoder (NVDEC's frames come with their planes already staged).
    From ``start`` (a key frame), the frames come from there on, numbered as in the whole video;
    frames shown before it (leading pictures, which need the frames before) are left out.

    Every frame must have the first one's size: a stream that changes size part-way is refused at
    the first frame that differs. A video that ends well before the container says it does (a
    cut file) is an :class:`InputError` at its end, or with ``allow_truncated`` noted in
    ``report``; the packet the cut runs through is dropped, whole frames are all kept.

    Damage does not stop decoding. A frame decoded with concealed errors is marked "corrupt". A
    frame whose packet could not be decoded is replaced by the previous frame at the lost frame's
    time (marked "repeated"), so the source's frame count and timing are kept. Frames come out in
    presentation order, so a packet time passed by without its frame was lost; it is stood in for
    only while decode failures are unaccounted for, since some packets carry no frame of their
    own (a second field, a skipped frame).
    """
    video = video_stream(container)
    decoder = decoding.open(video)
    streams = [video] + [s for s in container.streams if s.index in copy_streams]
    expected: list[int] = []  # presentation times of video packets whose frames have not come out
    last: SourceFrame | None = None
    failures = 0  # packets that failed to decode and have no stand-in yet
    stood_in: int | None = None  # the latest time a stand-in was shown at
    index = 0 if start is None else start.index
    if start is not None:
        container.seek(start.pts, stream=video, backward=True, any_frame=False)
    reached = start is None  # the seek lands on the key frame at ``start`` or one before it

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

    file_size = Path(container.name).stat().st_size
    size: tuple[int, int] | None = None
    orientation: Orientation | None = None
    last_end = 0.0  # where the latest frame's display ends, in seconds
    for packet in _packets(container, streams):
        if packet.stream.index != video.index:
            if packet.dts is not None:
                yield packet
            continue
        if packet.is_corrupt and packet.size and packet.pos + packet.size >= file_size:
            continue  # cut off by the end of the file: a frame threaded decoder would lose one before it too
        if not reached:
            assert start is not None
            reached = packet.is_keyframe and packet.pts == start.pts
            if not reached and packet.pts is not None and packet.pts > start.pts:
                raise InputError(f"{container.name}: no key frame at pts {start.pts} to start decoding at")
            if not reached:
                continue
        if packet.pts is not None and not packet.is_discard and (start is None or packet.pts >= start.pts):
            bisect.insort(expected, packet.pts)
        try:
            decoded = decoder.decode(packet)
        except av.InvalidDataError:
            failures += 1  # the frame it would have given is stood in for below
            continue
        except av.FFmpegError as exc:  # not damage: a feature this FFmpeg cannot decode, or no memory
            raise InputError(f"{container.name}: cannot decode frame {index}: {exc.strerror or exc}") from None
        for frame, staged, damaged in decoded:
            if start is not None and frame.pts is not None and frame.pts < start.pts:
                if expected and expected[0] == frame.pts:
                    expected.pop(0)
                continue  # a leading picture: its references lie before the key frame
            if frame.pts is not None:
                if stood_in is not None and frame.pts <= stood_in:
                    continue  # decoded late after damage: a stand-in already showed its time
                yield from stand_ins(frame.pts)
                if expected and expected[0] == frame.pts:
                    expected.pop(0)
            if size is None:
                size = (frame.width, frame.height)
            elif (frame.width, frame.height) != size:
                raise InputError(f"{container.name}: the video changes size from {size[0]}x{size[1]} to "
                                 f"{frame.width}x{frame.height} at {float(frame.time or 0):.3f} s (frame {index}); "
                                 f"cut it into parts of one size first")
            if orientation is None:  # one display matrix per stream: read once
                orientation = Orientation.of_matrix(decoder.display_matrix(frame))
            planar = as_planar_yuv(frame)
            last = SourceFrame(index, planar, PlaneLayout.of(planar, orientation, video.sample_aspect_ratio),
                               damage="corrupt" if frame.is_corrupt or damaged else "")
            if staged is not None:
                last.buffers.stage(staged)
            if frame.time is not None:
                last_end = max(last_end, float(frame.time) + float((frame.duration or 0) * frame.time_base))
            yield last
            index += 1
    yield from stand_ins(None)
    declared = _declared_end(container, video)
    frame_time = 1 / float(video.average_rate) if video.average_rate else 0.04
    already_known = report is not None and report.truncated
    if declared is not None and declared - last_end > 2 * frame_time + 0.05 and not already_known:
        message = (f"{container.name} is truncated: its video stops at {last_end:.3f} s, but the file says "
                   f"{declared:.3f} s ({declared - last_end:.3f} s missing)")
        if not allow_truncated:
            raise InputError(f"{message}; pass --allow-truncated to restore what is there")
        log.warning("%s; every frame that decodes was restored", message)
        if report is not None:
            report.truncated = message


def _packets(container: av.container.InputContainer, streams: list[av.stream.Stream]) -> Iterator[av.Packet]:
    """The container's packets of ``streams``; a read that fails (an I/O error, a file gone) is an
    :class:`InputError`, not damage to stand in for."""
    packets = container.demux(streams)
    while True:
        with failures_as(InputError, f"cannot read {container.name}", (OSError, av.FFmpegError)):
            packet = next(packets, None)
        if packet is None:
            return
        yield packet


def read_frames(path: str | Path, limit: int | None = None) -> Iterator[SourceFrame]:
    """Every video frame of the first video stream, in presentation order (for tests and tools)."""
    with open_input(path) as container:
        for item in demux(container, set()):
            if limit is not None and item.index >= limit:
                break
            yield item
