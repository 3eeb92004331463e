"""A video a job reads: probed once, with the checks that come before any work, and its decoder
chosen (with why); every pass over it opens a container of its own, and may start at a key frame."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import av

from ..errors import InputError
from .decoders import DecoderChoice, choose_decoder
from .demux import DecodeReport, SeekPoint, demux
from .frames import SourceFrame
from .opening import open_input
from .probe import Pictures, VideoInfo, probe
from .seek import SeekReport, frames_at

if TYPE_CHECKING:
    from ..options import RestoreOptions

log = logging.getLogger(__name__)


class VideoInput:
    """``path`` as probed; ``decoder`` is ``--decoder``'s request, ``gpu`` the first GPU a job's
    workers in this process use (None: NVDEC is not possible). Raises InputError when the range
    starts past the end, or the file is cut off and ``allow_truncated`` is not given, and
    UsageError for an impossible ``--decoder nvdec``."""

    def __init__(self, path: Path, decoder: str, gpu: int | None, start: float | None = None,
                 allow_truncated: bool = False) -> None:
        self.path = path
        self.allow_truncated = allow_truncated
        self.info: VideoInfo = probe(path)
        info = self.info
        if start is not None and info.duration is not None and start >= info.duration:
            raise InputError(f"--start {start:g} s is not inside {path.name}, which lasts {info.duration:.3f} s")
        if info.truncated:
            if not allow_truncated:
                raise InputError(f"{info.truncated}; pass --allow-truncated to restore what is there")
            log.warning("%s; restoring every frame that decodes", info.truncated)
        assert info.traits is not None
        self.decoding: DecoderChoice = choose_decoder(decoder, info.traits, gpu, info.display_matrix)
        self.report = DecodeReport(info.truncated)  # how the video ended, once a pass has read it

    @classmethod
    def for_job(cls, path: Path, options: RestoreOptions, gpu: int | None) -> VideoInput:
        """``path`` probed and checked before any work, as ``options`` ask: their decoder, the start
        of their time range, whether a cut-off file is allowed."""
        return VideoInput(path, options.decoder, gpu, options.start, options.allow_truncated)

    @property
    def pictures(self) -> Pictures:
        return self.info.pictures

    @property
    def truncated(self) -> str:
        """Why the video ended early (``--allow-truncated``), once a pass has read it; else ""."""
        return self.report.truncated

    def open(self) -> av.container.InputContainer:
        """A container of the video's own, for a pass and the writer that copies its other streams."""
        return open_input(self.path)

    def frames(self, container: av.container.InputContainer, streams: set[int], start: SeekPoint | None = None,
               end: int | None = None) -> Iterator[SourceFrame | av.Packet]:
        """The pass's pictures and the packets of ``streams``, in file order (media.demux), from
        the key frame ``start`` (None: the first frame) to before the frame ``end`` (None: the end)."""
        with contextlib.closing(demux(container, streams, self.allow_truncated, self.report, self.decoding,
                                      start)) as items:
            for item in items:
                if end is not None and isinstance(item, SourceFrame) and item.index >= end:
                    return
                yield item

    def frames_at(self, times: list[float], report: SeekReport) -> list[SourceFrame]:
        """The frames at ``times``, each decoded after a seek (media.seek)."""
        return frames_at(self.path, times, report)

    def describe(self) -> str:
        """Which decoder ran, and why the CPU where NVDEC was allowed."""
        return self.decoding.describe()
