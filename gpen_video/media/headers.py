"""What the finished file's header says that FFmpeg's muxers cannot be told through PyAV,
written into it after the muxer closes it: HDR10 metadata, the 360° and stereo 3D layout, and a
Matroska file's shown size for non-square pixels; then an MP4/MOV's index goes to the front. A
header laid out otherwise keeps what the muxer wrote; each such loss is one warning."""

from __future__ import annotations

from pathlib import Path

from .isobmff import BoxError, add_sample_entry_boxes, move_index_to_front
from .matroska import MatroskaError, add_display_size, add_hdr_metadata, add_video_elements
from .probe import VideoInfo
from .spatial import SpatialLayout


def write_headers(path: Path, ext: str, info: VideoInfo, hdr_in_bitstream: bool, spatial: SpatialLayout | None,
                  shown: tuple[int, int] | None, faststart: bool) -> list[str]:
    """Write into ``path`` (an ``ext`` file) the input's HDR10 metadata, its ``spatial`` layout,
    and for Matroska/WebM the ``shown`` size (width, height) of non-square pixels; move an
    MP4/MOV's index to the front where ``faststart``. The warnings for what could not be done."""
    warnings = []
    if info.hdr is not None:
        hdr = info.hdr
        try:  # the video sample entry's boxes in MP4/MOV, the video track's Colour in Matroska/WebM
            if ext in (".mp4", ".mov"):
                add_sample_entry_boxes(path, hdr.sample_entry_boxes())
            else:
                add_hdr_metadata(path, hdr)
        except (BoxError, MatroskaError) as exc:
            kept = "it travels in the bitstream only" if hdr_in_bitstream else "it is left out"
            warnings.append(f"the HDR10 {hdr.describe()} metadata could not be written into the {ext} header "
                            f"({exc}); {kept}")
    if spatial is not None:
        try:  # sv3d and st3d in MP4/MOV, Projection and StereoMode in Matroska/WebM
            if ext in (".mp4", ".mov"):
                add_sample_entry_boxes(path, spatial.mp4_boxes())
            else:
                add_video_elements(path, spatial.matroska_elements())
        except (BoxError, MatroskaError) as exc:
            warnings.append(f"the {' and '.join(info.spatial)} metadata could not be written ({exc})")
    if shown is not None and ext in (".mkv", ".webm"):
        # The bitstream says it too where the codec has a place for it: H.264, HEVC, MPEG-2, FFV1 3, DV.
        try:
            add_display_size(path, *shown)
        except MatroskaError as exc:
            warnings.append(f"the sample aspect ratio could not be written into the Matroska header ({exc})")
    if faststart and ext in (".mp4", ".mov"):  # last: the boxes above grow the index where it ends the file
        try:
            move_index_to_front(path)
        except BoxError as exc:
            warnings.append(f"the file's index stays at its end, so players must fetch the whole file first ({exc})")
    return warnings
