"""Single frames at given times, found by seeking to the key frame before each (``--preview``)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av

from ..errors import InputError
from .colour import Orientation, PlaneLayout, as_planar_yuv, display_matrix
from .decoders import CpuDecoder
from .frames import SourceFrame
from .opening import open_input, video_stream


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
