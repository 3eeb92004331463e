"""What a video is before it is decoded in full: the input opened with one clear error for every
way it can fail, its first video stream, and its geometry, timing and traits, read from its first
frame (:func:`probe`)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from ..errors import InputError
from .colour import Orientation, display_matrix, shown_width
from .decoders import CpuDecoder, StreamTraits
from .fields import FieldOrder
from .hdr import HdrMetadata
from .opening import open_input, video_stream

#: Frame side data that encoders write back from each frame: closed captions, the active format
#: description, SMPTE timecode. Restored frames are given the decoded frames' (media/writer.py).
CARRIED_SIDE_DATA = frozenset({av.sidedata.sidedata.Type.A53_CC, av.sidedata.sidedata.Type.AFD,
                               av.sidedata.sidedata.Type.S12M_TIMECODE})



@dataclass(frozen=True)
class Pictures:
    """What a job's pictures are, as probed: how many (None: unknown), their upright size as
    players show it, and a video's fields and rate (a photo is one picture)."""

    frames: int | None
    height: int
    width: int
    fields: FieldOrder | None = None
    fps: float = 25.0


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

    @property
    def pictures(self) -> Pictures:
        return Pictures(self.frames, *self.shown, self.fields, self.fps)



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
        # Matroska and WebM give the length only for the whole file (FFmpeg's header, no per-stream one).
        duration = (float(stream.duration * stream.time_base) if stream.duration
                    else float(container.duration) / 1e6 if container.duration else None)
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
