"""Decoding: the video's frames as planar YUV, as decoded (the devices convert them for the face
stages), plus what the encoder needs to leave the rest of the file as it was (timestamps, the
other streams' packets)."""

from __future__ import annotations

import bisect
import dataclasses
import logging
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import torch

from .colour import (
    FieldLines,
    Orientation,
    PlaneLayout,
    as_planar_yuv,
    display_matrix,
    frame_planes,
    planes_to_frame,
    shown_width,
    to_rgb,
)
from .decoders import CPU_DECODING, CpuDecoder, DecoderChoice, StreamTraits
from .fields import FieldOrder, field_frame
from .hdr import HdrMetadata
from .streams import is_cover_art

log = logging.getLogger(__name__)

#: Frame side data that encoders write back from each frame: closed captions, the active format
#: description, SMPTE timecode. Restored frames are given the decoded frames' (media/writer.py).
CARRIED_SIDE_DATA = frozenset({av.sidedata.sidedata.Type.A53_CC, av.sidedata.sidedata.Type.AFD,
                               av.sidedata.sidedata.Type.S12M_TIMECODE})


class InputError(RuntimeError):
    """The input cannot be read as a video (or image). The message is one line."""


class FrameBuffers:
    """A picture's copies beside its decoded frame, with one lifecycle, each step taken by one stage:

    - ``decoded``: none yet;
    - ``staged``: its planes packed into one buffer for a GPU worker's single asynchronous copy:
      pinned host memory filled by the decode thread (worker.device.stage_planes), or GPU memory
      filled by NVDEC's decoder; or a slot of shared memory that worker processes read where it
      lies, and that stays staged until the frame is released (worker.shared.SharedFrames);
    - ``uploaded``: taken by the worker that detects it;
    - ``kept``: its planes (h, w) and upright RGB (3, H, W, uint8 whole levels) kept on that
      worker's device until restoration, so it crosses to the device and converts to RGB once;
    - ``released``: restored, or found to hold no face to restore.

    A step out of order raises: no two stages ever hold the same buffers."""

    def __init__(self) -> None:
        self.state = "decoded"
        self._host: torch.Tensor | None = None
        self._kept: tuple[list[torch.Tensor], torch.Tensor] | None = None
        self._give_back: weakref.finalize | None = None

    def _step(self, allowed: tuple[str, ...], to: str) -> None:
        if self.state not in allowed:
            raise RuntimeError(f"frame buffers: cannot go from {self.state} to {to}")
        self.state = to

    def stage(self, host: torch.Tensor, give_back: Callable[[], None] | None = None) -> None:
        """Staged in ``host``; ``give_back`` returns it to its owner on release (or when this
        picture is dropped unreleased: a shared slot outlives no frame)."""
        self._step(("decoded",), "staged")
        self._host = host
        if give_back is not None:
            self._give_back = weakref.finalize(self, give_back)

    @property
    def staged(self) -> torch.Tensor | None:
        """The staged buffer, left staged: a worker process reads it, and writes the restored
        planes back, where it lies."""
        return self._host if self.state == "staged" else None

    def take_staged(self) -> torch.Tensor | None:
        """The staged buffer for an upload, or None (never staged, or kept and let go)."""
        if self.state in ("decoded", "staged"):
            self.state = "uploaded"
        host, self._host = self._host, None
        return host

    def keep(self, planes: list[torch.Tensor], rgb: torch.Tensor) -> None:
        self._step(("uploaded",), "kept")
        self._kept = planes, rgb

    @property
    def device(self) -> torch.device | None:
        """The device that keeps the picture, if one does."""
        return self._kept[1].device if self._kept is not None else None

    def take_kept(self) -> tuple[list[torch.Tensor], torch.Tensor] | None:
        """The kept planes and RGB, for the restoration (None when not kept); the picture lets go of them."""
        kept, self._kept = self._kept, None
        self.state = "released"
        return kept

    def release(self) -> None:
        """Nothing more of this picture will be restored: its buffers go."""
        self._host = self._kept = None
        self.state = "released"
        if self._give_back is not None:
            self._give_back()


@dataclass(frozen=True)
class FieldOf:
    """Where a field picture comes from: its decoded frame, whose lines it holds, and how long
    after the frame's time it was taken (0 for the first field, half a frame for the second)."""

    whole: SourceFrame
    parity: int
    delay: float


@dataclass
class SourceFrame:
    """One decoded video frame, or one field of an interlaced one, and where it sits in time."""

    index: int  # in decoding order; an interlaced video's fields are numbered, two per frame
    frame: av.VideoFrame  # planar YUV as decoded: the encoder keeps its samples wherever no face changed
    layout: PlaneLayout  # how its planes become upright RGB
    #: "" for a clean frame; "corrupt" if the decoder concealed errors in it; "repeated" if its
    #: packet could not be decoded and the previous frame stands in, at this frame's time.
    damage: str = ""
    buffers: FrameBuffers = field(default_factory=FrameBuffers)  # its copies in pinned and device memory
    field: FieldOf | None = None  # set for a field of an interlaced frame (split_fields)

    @property
    def time(self) -> float:
        return float(self.frame.time or 0.0) + (self.field.delay if self.field is not None else 0.0)

    def rgb(self) -> np.ndarray:
        """Upright RGB24, converted on the CPU (for tests and tools; the pipeline converts on its devices)."""
        return to_rgb(self.frame, self.layout)


@dataclass
class VideoInfo:
    path: Path
    width: int  # upright
    height: int
    display_matrix: tuple[int, ...] | None  # as the input has it (turn and mirroring), written back unchanged
    time_base: Fraction
    average_rate: Fraction | None
    frames: int | None  # from the container header; may be missing or approximate
    duration: float | None
    pix_fmt: str
    #: Why the file is cut short, from its index (MP4/MOV list every packet's place in the file),
    #: or "" when every indexed packet is there; a cut that only decoding reveals is found by demux.
    truncated: str = ""
    hdr: HdrMetadata | None = None  # HDR10 static metadata of the first frame
    fields: FieldOrder | None = None  # an interlaced video's field order; None when progressive
    first_time: float = 0.0  # the first frame's time, seconds: where --start and --end count from
    traits: StreamTraits | None = None  # what decides whether NVDEC may decode it
    captions: bool = False  # the first frame carries closed captions (A53 side data), as broadcast video does
    sar: Fraction | None = None  # non-square pixels: the sample aspect ratio (HDV's 4:3, DV 16:9's 64:45)
    spatial: tuple[str, ...] = ()  # "360°" (a spherical projection), "stereo 3D": how players must map the picture
    #: what of CARRIED_SIDE_DATA the first frame holds: the restored frames take it on, for the encoder
    frame_side_data: frozenset[av.sidedata.sidedata.Type] = frozenset()

    @property
    def shown(self) -> tuple[int, int]:
        """(height, width) as players show the picture: upright, and stretched by the SAR, where
        face work happens (the stored size is ``width`` x ``height`` turned)."""
        turned = Orientation.of_matrix(self.display_matrix).transpose
        stored_width = self.height if turned else self.width
        shown = shown_width(stored_width, self.sar)
        return (shown, self.width) if turned else (self.height, shown)

    @property
    def fps(self) -> float:
        return float(self.average_rate) if self.average_rate else 25.0


def split_fields(source: SourceFrame, order: FieldOrder, field_time: float) -> list[SourceFrame]:
    """The two field pictures of a decoded frame, in the order they were taken, numbered on from
    twice the frame's index; ``field_time`` is the time between them. Each has buffers of its own."""
    pictures = []
    for n, parity in enumerate(order.parities):
        layout = dataclasses.replace(source.layout, field=FieldLines(parity, source.frame.height))
        pictures.append(dataclasses.replace(source, index=2 * source.index + n, frame=field_frame(source.frame, parity),
                                            layout=layout, buffers=FrameBuffers(),
                                            field=FieldOf(source, parity, n * field_time)))
    return pictures


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
    try:
        stream = video_stream(container)
    except InputError:
        container.close()
        raise
    stream.thread_type = "AUTO"  # frame and slice threads: decoding is a CPU stage
    return container


def video_stream(container: av.container.Container) -> av.video.stream.VideoStream:
    """The video to restore: the first video stream that is not cover art (an MP3's or an MP4's
    artwork is a one-picture "video" stream)."""
    for stream in container.streams.video:
        if not is_cover_art(stream):
            return stream
    artwork = " (only cover art)" if container.streams.video else ""
    raise InputError(f"{container.name} has no video stream{artwork}")


def probe(path: str | Path) -> VideoInfo:
    """Geometry and timing of the first video stream, read from its first frame.

    Probing uses a container of its own: seeking the main one back would make the demuxer skip
    packets before time zero (such as AAC priming), and they must be copied too.
    """
    with open_input(path) as container:
        stream = video_stream(container)
        try:
            first = next(CpuDecoder(stream).frames(container, stream))
        except (StopIteration, av.FFmpegError) as exc:
            raise InputError(f"{path} has no decodable video frame ({exc or 'empty stream'})") from None
        matrix = display_matrix(first)
        turned = Orientation.of_matrix(matrix).transpose
        width, height = (first.height, first.width) if turned else (first.width, first.height)
        duration = float(stream.duration * stream.time_base) if stream.duration else None
        fields = FieldOrder.of(stream, first)
        captions = first.side_data.get(av.sidedata.sidedata.Type.A53_CC) is not None
        carried = frozenset(kind for kind in CARRIED_SIDE_DATA if first.side_data.get(kind) is not None)
        sar = stream.sample_aspect_ratio if stream.sample_aspect_ratio not in (None, 0, 1) else None
        spatial = tuple(name for kind, name in ((av.sidedata.sidedata.Type.SPHERICAL, "360°"),
                                                (av.sidedata.sidedata.Type.STEREO3D, "stereo 3D"))
                        if first.side_data.get(kind) is not None)
        traits = StreamTraits(stream.codec_context.name, first.format.name, first.width, first.height,
                              fields is not None, captions)
        return VideoInfo(Path(path), width, height, matrix, stream.time_base, stream.average_rate,
                         stream.frames or None, duration, first.format.name, _cut_from_index(stream, path),
                         HdrMetadata.of(first), fields, float(first.time or 0.0), traits, captions, sar, spatial,
                         carried)


def _cut_from_index(stream: av.video.stream.VideoStream, path: str | Path) -> str:
    """How much of the video the file's index lists beyond its end (a copy or download that
    stopped half-way), in words; "" when all of it is there or the container keeps no index."""
    entries = stream.index_entries
    size = Path(path).stat().st_size
    if not entries or entries[-1].pos + entries[-1].size <= size:
        return ""
    whole = sum(entry.pos + entry.size <= size for entry in entries)
    missing = len(entries) - whole
    return (f"{path} is truncated: {missing} of its {len(entries)} video frames lie past the end of the file "
            f"({size} bytes of at least {entries[-1].pos + entries[-1].size})")


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
    for packet in container.demux(streams):
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


def read_frames(path: str | Path, limit: int | None = None) -> Iterator[SourceFrame]:
    """Every video frame of the first video stream, in presentation order (for tests and tools)."""
    with open_input(path) as container:
        for item in demux(container, set()):
            if limit is not None and item.index >= limit:
                break
            yield item


@dataclass
class SeekReport:
    """How many frames :func:`frames_at` decoded to reach its frames."""

    decoded: int = 0


def frames_at(path: str | Path, times: list[float], report: SeekReport | None = None) -> list[SourceFrame]:
    """The first frame at or after each of ``times`` (seconds of the stream's clock, ascending;
    the last frame for a time past the end). It seeks to the keyframe before each time and
    decodes from there, or decodes on from the frame before when no keyframe lies between (the
    file's index lists them): a few frames each, never more than the video up to the last time
    (``report`` counts them). Each is a picture of its own, numbered 0 as a photo is."""
    report = report if report is not None else SeekReport()
    found: list[SourceFrame] = []
    with open_input(path) as container:
        video = video_stream(container)
        keyframes = sorted(e.timestamp for e in video.index_entries if e.flags & 1)  # empty without an index
        decoding: Iterator[av.VideoFrame] | None = None
        last: av.VideoFrame | None = None  # the latest frame decoded
        for time in times:
            target = time / video.time_base
            before = bisect.bisect_right(keyframes, target)  # keyframes at or before the target
            key = keyframes[before - 1] if before else None
            reached = last is not None and last.time is not None and last.time >= time - 1e-6
            if not reached and (decoding is None or key is None or last is None or key > last.pts):
                container.seek(int(target), backward=True, any_frame=False, stream=video)
                decoding = CpuDecoder(video).frames(container, video)
            try:
                while not reached:
                    frame = next(decoding, None)
                    if frame is None:  # the end: the last frame stands for any time past it
                        break
                    report.decoded += 1
                    last = frame
                    reached = frame.time is None or frame.time >= time - 1e-6
            except av.FFmpegError as exc:
                raise InputError(f"{path}: cannot decode the frame at {time:.3f} s ({exc.strerror or exc})") from None
            if last is None:
                raise InputError(f"{path} has no decodable frame at or after {time:.3f} s")
            planar = as_planar_yuv(last)
            found.append(SourceFrame(0, planar, PlaneLayout.of(planar, Orientation.of_matrix(display_matrix(last)),
                                                               video.sample_aspect_ratio)))
    return found
