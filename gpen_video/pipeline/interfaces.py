"""What a job takes from the engine: where its pictures come from, where they go, and what hears
each tracked picture."""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import Protocol

import av

from ..faces.track import TrackedFrame
from ..media.frames import SourceFrame
from ..media.images import ImageWriter
from ..media.segments import SegmentedWriter
from ..media.writer import VideoWriter

#: Where pictures come from: given the streams the writer takes, a generator of decoded pictures
#: and those streams' packets, in file order (media.demux.demux; a photo; later a GPU decoder).
#: The decode thread closes it, however the run ends.
FrameSource = Callable[[set[int]], Generator[SourceFrame | av.Packet, None, None]]


class NoOutput:
    """The writer of a job that makes no picture (--detect-only, the pass that chooses tracks):
    the encoder thread only counts what it is given."""

    copied_streams: set[int] = set()

    def __init__(self, output: Path) -> None:
        self.output = output  # what the job's summary names
        self.warnings: list[str] = []

    def write(self, source: SourceFrame, restored: av.VideoFrame | None = None) -> None:
        """Nothing to encode."""

    def close(self) -> None:
        """Nothing to finish."""

    def abort(self) -> None:
        """Nothing to remove."""


Writer = VideoWriter | SegmentedWriter | ImageWriter | NoOutput


class FaceLog(Protocol):
    """What hears each tracked picture, in order: the tracks file, or a survey of the tracks
    (faces.select). ``in_range`` says whether the picture lies where faces are restored,
    ``restored`` which of its faces were."""

    def add(self, frame: TrackedFrame, field: int | None, in_range: bool, restored: list[bool]) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...
