"""Opening an input: the one place a media file is opened for reading, with one clear error for
every way it can fail, and the video stream a job restores."""

from __future__ import annotations

from pathlib import Path

import av

from ..errors import InputError


def is_cover_art(stream: av.stream.Stream) -> bool:
    """A still picture shown as the file's artwork (MP3 and MP4 cover art), not a video."""
    return stream.type == "video" and bool(stream.disposition & av.stream.Disposition.attached_pic)


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
