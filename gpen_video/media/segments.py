"""Resumable encoding (``--resume``): the video is encoded in segments of whole frames, each saved
in a work directory beside OUTPUT as soon as it is complete. A job that crashed or was killed
starts again at its first missing segment; OUTPUT is assembled from the segments and the source's
other streams only at the end, so it is never partial.

Every segment is encoded by a fresh encoder configured as the output's own stream, so each
starts with a key frame and all share one set of codec parameters: their packets join into one
stream. A segment file holds its packets' timestamps, flags and bytes, nothing else.
"""

from __future__ import annotations

import bisect
import json
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import av

from ..errors import OutputError, failures_as
from .demux import SeekPoint
from .frames import SourceFrame
from .opening import open_input, video_stream
from .outputs import write_atomically
from .writer import WRITE_FAILURES, VideoWriter

_RECORD = struct.Struct("<qqqBI")  # pts, dts, duration, key frame, payload size
_NONE = -(2**63)  # a missing timestamp


def work_dir_for(output: Path) -> Path:
    """Where the segments of the job writing ``output`` live: a hidden directory beside it."""
    return output.with_name(f".{output.name}.gpen-work")


class SegmentStore:
    """The finished segments of one job. ``job.json`` ties the directory to its input and
    options: segments of another job are never mixed in."""

    def __init__(self, directory: Path, job: dict) -> None:
        self.directory = directory
        manifest = directory / "job.json"
        try:
            directory.mkdir(exist_ok=True)
            if manifest.exists():
                if json.loads(manifest.read_text()) != job:
                    raise OutputError(f"{directory} holds the work of another job (other input or options); "
                                      f"delete it, or rerun with the options it was started with")
            else:
                write_atomically(manifest, json.dumps(job, indent=1).encode())
        except OSError as exc:
            raise OutputError(f"cannot use the work directory {directory}: {exc.strerror or exc}") from None

    @classmethod
    def for_job(cls, input: Path, output: Path, segment_frames: int, options: dict) -> SegmentStore:
        """The work directory of the segmented job writing ``output`` (``--resume``, or a long video
        split across a cluster), tied to the input file, the segments' length and ``options``
        (every option that shapes the result)."""
        stat = input.stat()
        return SegmentStore(work_dir_for(output), {"input": str(input.resolve()), "size": stat.st_size,
                                                   "mtime_ns": stat.st_mtime_ns, "segment_frames": segment_frames,
                                                   "options": options})

    def _path(self, index: int) -> Path:
        return self.directory / f"segment-{index:06d}.bin"

    def complete(self) -> int:
        """How many segments, counted from the first, are finished."""
        count = 0
        while self._path(count).exists():
            count += 1
        return count

    def finished(self) -> set[int]:
        """Every finished segment (segments done apart, on a cluster, finish in any order)."""
        return {int(p.stem.removeprefix("segment-")) for p in self.directory.glob("segment-*.bin")}

    def save(self, index: int, packets: list[av.Packet]) -> None:
        chunks = []
        for p in packets:
            payload = bytes(p)
            chunks += [_RECORD.pack(_NONE if p.pts is None else p.pts, _NONE if p.dts is None else p.dts,
                                    p.duration or 0, int(p.is_keyframe), len(payload)), payload]
        write_atomically(self._path(index), b"".join(chunks))

    def load(self, index: int) -> list[av.Packet]:
        data = self._path(index).read_bytes()
        packets, offset = [], 0
        while offset < len(data):
            pts, dts, duration, key, size = _RECORD.unpack_from(data, offset)
            offset += _RECORD.size
            packet = av.Packet(data[offset : offset + size])
            offset += size
            packet.pts = None if pts == _NONE else pts
            packet.dts = None if dts == _NONE else dts
            packet.duration = duration
            packet.is_keyframe = bool(key)
            packets.append(packet)
        return packets

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass(frozen=True)
class SegmentUnit:
    """One segment of a long video as a unit of work of its own: frames ``start`` to ``stop``
    (presentation order) encoded as segment ``segment``, decoded from ``seek`` (a key frame at
    least the tracker's context before ``start``; None: from the beginning), so that tracks and
    smoothing reach ``start`` as in a run over the whole video."""

    segment: int
    start: int
    stop: int
    seek: SeekPoint | None


def plan_segments(path: Path, segment_frames: int, context: int) -> list[SegmentUnit] | None:
    """The video's ``segment_frames`` segments as units, each decoded from the last key frame at
    least ``context`` frames before it; None when it has no more than one segment, or its frames
    cannot be counted exactly from its packets (a packet without a time, or damaged), which
    splitting needs. Reads the packets only, without decoding."""
    with open_input(path) as container:
        video = video_stream(container)
        times, keys = [], []
        for packet in container.demux(video):
            if not packet.size or packet.is_discard:
                continue
            if packet.pts is None or packet.is_corrupt:
                return None
            times.append(packet.pts)
            if packet.is_keyframe:
                keys.append(packet.pts)
    order = sorted(times)
    if len(order) <= segment_frames or len(set(order)) != len(order):
        return None
    index = {pts: i for i, pts in enumerate(order)}
    key_indices = sorted(index[pts] for pts in keys)
    units = []
    for segment, start in enumerate(range(0, len(order), segment_frames)):
        before = bisect.bisect_right(key_indices, start - context)  # key frames at or before start - context
        seek = SeekPoint(order[key_indices[before - 1]], key_indices[before - 1]) if start and before else None
        units.append(SegmentUnit(segment, start, min(start + segment_frames, len(order)), seek))
    return units


class SegmentedWriter:
    """Takes the pipeline's frames like a :class:`VideoWriter`, from frame ``first_frame`` on,
    encoding them segment by segment; :meth:`close` assembles OUTPUT through ``writer``.

    With ``unit``, it encodes that one segment only, for a cluster's driver to assemble
    (:func:`assemble`): ``writer`` then only configures the encoder, and its file is thrown away."""

    def __init__(self, writer: VideoWriter, store: SegmentStore, source: Path, segment_frames: int,
                 unit: int | None = None) -> None:
        self.writer = writer
        self.store = store
        self.source = source
        self.segment_frames = segment_frames
        self.unit = unit
        self.segment = store.complete() if unit is None else unit
        self.first_frame = self.segment * segment_frames
        self.warnings = writer.warnings
        self.output = writer.output
        self._encoder: av.codec.context.CodecContext | None = None
        self._packets: list[av.Packet] = []
        self._frames = 0  # in the current segment

    @property
    def copied_streams(self) -> set[int]:
        return set()  # the other streams are copied from the source when OUTPUT is assembled

    def write(self, source: SourceFrame, restored: av.VideoFrame | None = None) -> None:
        if self._encoder is None:
            self._encoder = self.writer.new_encoder()
            self._encoder.open()
        with failures_as(OutputError, f"encoding failed at frame {source.index}", WRITE_FAILURES):
            self._packets += self._encoder.encode(self.writer.encoder_frame(source, restored))
            self._frames += 1
            if self._frames == self.segment_frames:
                self._finish_segment()

    def _finish_segment(self) -> None:
        self._packets += self._encoder.encode(None)
        self.store.save(self.segment, self._packets)
        self.segment += 1
        self._encoder, self._packets, self._frames = None, [], 0

    def close(self) -> None:
        """Save the last segment, assemble OUTPUT from all of them, and drop the work directory
        (a unit: save its segment, and leave the rest to the driver)."""
        if self._frames:
            with failures_as(OutputError, f"cannot save the last segment in {self.store.directory}", WRITE_FAILURES):
                self._finish_segment()
        if self.unit is not None:
            self.writer.abort()
            return
        try:
            with open_input(self.source) as source:
                assemble(self.writer, self.store, source, self.segment)
        except BaseException:
            self.writer.abort()
            raise
        self.store.remove()

    def abort(self) -> None:
        """Drop the unfinished segment and the partial OUTPUT; finished segments stay for --resume."""
        self._encoder, self._packets = None, []
        self.writer.abort()


def assemble(writer: VideoWriter, store: SegmentStore, source: av.container.InputContainer, segments: int) -> None:
    """OUTPUT from the first ``segments`` segments and the source's other streams, each packet
    muxed in time order; ``writer`` is closed (its file moved into place)."""
    time_base = writer.info.time_base
    streams = [s for s in source.streams if s.index in writer.copied_streams]
    others = (p for p in source.demux(streams) if p.dts is not None) if streams else iter(())
    waiting = next(others, None)
    last_dts: int | None = None
    for index in range(segments):
        for packet in store.load(index):
            packet.time_base = time_base
            if packet.dts is not None:
                # A segment's encoder starts its decoding clock afresh; it must still run on.
                if last_dts is not None and packet.dts <= last_dts:
                    packet.dts = last_dts + 1
                last_dts = packet.dts
                now = float(packet.dts * time_base)
                while waiting is not None and float(waiting.dts * waiting.time_base) <= now:
                    writer.write_packet(waiting)
                    waiting = next(others, None)
            writer.write_encoded([packet])
    while waiting is not None:
        writer.write_packet(waiting)
        waiting = next(others, None)
    writer.close()
