"""MP4/MOV boxes that FFmpeg's demuxer and muxer do not show through PyAV.

Read: what each track of an input is (its handler, its sample entry's format, the tracks it names
as chapters, a video sample entry's extra boxes), so that a data track is told apart by what it
is (chapters, telemetry, camera metadata) rather than by the container alone.

Written: boxes added to a finished file's video sample entry, such as HDR10 static metadata
(``mdcv``, ``clli``: players read them from the container whatever the codec; ProRes has no
place for them in its bitstream) and 360° video's ``sv3d``/``st3d``. The muxer writes its
``moov`` box last, after the media data, so growing it moves no sample: the boxes are added to the
video track's first sample entry, and every box around it grows by as much. Last, the ``moov``
box moves to the front, its chunk offsets shifted, so that players can start at once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

#: The boxes between ``moov`` and the sample descriptions, in order.
_PATH = (b"trak", b"mdia", b"minf", b"stbl", b"stsd")
#: A visual sample entry's fields before its child boxes (ISO/IEC 14496-12 VisualSampleEntry,
#: QuickTime's video sample description: the same 78 bytes after the box header).
_VISUAL_ENTRY_FIELDS = 78
_STSD_FIELDS = 8  # version, flags and entry count


class BoxError(ValueError):
    """The file is not laid out as FFmpeg's MP4/MOV muxer writes it."""


def _header(data: bytes | bytearray, at: int, room: int) -> tuple[bytes, int, int]:
    """The type, size and header size of the box whose header begins at ``data[at]``, in a parent
    with ``room`` bytes left from there (a size of 0 means all of them)."""
    size, kind = struct.unpack_from(">I4s", data, at)
    header = 8
    if size == 1:
        size, header = struct.unpack_from(">Q", data, at + 8)[0], 16
    elif size == 0:
        size = room
    if size < header or size > room:
        raise BoxError(f"a {kind!r} box runs past its parent")
    return kind, size, header


def _children(data: bytes | bytearray, start: int, end: int) -> list[tuple[bytes, int, int, int]]:
    """The boxes in ``data[start:end]``: (type, offset, size, header size)."""
    boxes = []
    while start + 8 <= end:
        kind, size, header = _header(data, start, end - start)
        boxes.append((kind, start, size, header))
        start += size
    return boxes


def _grow(data: bytearray, offset: int, header: int, by: int) -> None:
    """Add ``by`` bytes to the size of the box at ``offset``."""
    if header == 16:
        struct.pack_into(">Q", data, offset + 8, struct.unpack_from(">Q", data, offset + 8)[0] + by)
    else:
        struct.pack_into(">I", data, offset, struct.unpack_from(">I", data, offset)[0] + by)


def _video_sample_entry(moov: bytearray) -> list[tuple[int, int]]:
    """(offset, header size) of every box from ``moov`` down to the first sample entry of its first
    video track (the one whose media header is a video one), the sample entry last."""
    _, _, header = _header(moov, 0, len(moov))
    for _, offset, size, head in (b for b in _children(moov, header, len(moov)) if b[0] == b"trak"):
        chain = [(0, header), (offset, head)]
        for kind in _PATH[1:]:
            found = [b for b in _children(moov, offset + head, offset + size) if b[0] == kind]
            if not found:
                break
            _, offset, size, head = found[0]
            if kind == b"minf" and not any(b[0] == b"vmhd" for b in _children(moov, offset + head, offset + size)):
                break
            chain.append((offset, head))
        else:
            entries = _children(moov, offset + head + _STSD_FIELDS, offset + size)
            if entries:
                return [*chain, (entries[0][1], entries[0][3])]
    raise BoxError("no video track with a sample entry")


def _top_level(file: BinaryIO) -> list[tuple[bytes, int, int]]:
    """The file's top-level boxes: (type, offset, size), read header by header."""
    top, end = [], file.seek(0, 2)
    position = 0
    while position + 8 <= end:
        file.seek(position)
        kind, size, _ = _header(file.read(16), 0, end - position)
        top.append((kind, position, size))
        position += size
    return top


def _first(data: bytes | bytearray, start: int, end: int, kind: bytes) -> tuple[int, int, int] | None:
    """(offset, size, header size) of the first ``kind`` box in ``data[start:end]``, or None."""
    for found, offset, size, header in _children(data, start, end):
        if found == kind:
            return offset, size, header
    return None


@dataclass(frozen=True)
class Track:
    """What one track of an MP4/MOV is, as its boxes say. FFmpeg makes one stream of each track,
    in the file's order, so a track's position is its stream's index."""

    track_id: int
    handler: bytes  # the media handler: b"vide", b"soun", b"text", b"sbtl", b"meta", b"tmcd", b"clcp", ...
    sample_entry: bytes  # the first sample description's format: b"avc1", b"gpmd", b"text", b"mebx", b"c608", ...
    chapters: tuple[int, ...] = ()  # the ids of the tracks this one names as its chapter list (tref/chap)
    entry_boxes: dict[bytes, bytes] = field(default_factory=dict)  # a video sample entry's extra boxes


def _track(moov: bytes, offset: int, size: int, head: int) -> Track:
    start, end = offset + head, offset + size
    tkhd = _first(moov, start, end, b"tkhd")
    track_id = 0
    if tkhd is not None:
        version = moov[tkhd[0] + tkhd[2]]
        track_id = struct.unpack_from(">I", moov, tkhd[0] + tkhd[2] + (20 if version == 1 else 12))[0]
    chapters: tuple[int, ...] = ()
    tref = _first(moov, start, end, b"tref")
    if tref is not None:
        chap = _first(moov, tref[0] + tref[2], tref[0] + tref[1], b"chap")
        if chap is not None:
            count = (chap[1] - chap[2]) // 4
            chapters = struct.unpack_from(f">{count}I", moov, chap[0] + chap[2])
    handler, entry, boxes = b"", b"", {}
    mdia = _first(moov, start, end, b"mdia")
    if mdia is not None:
        hdlr = _first(moov, mdia[0] + mdia[2], mdia[0] + mdia[1], b"hdlr")
        if hdlr is not None:
            handler = bytes(moov[hdlr[0] + hdlr[2] + 8 : hdlr[0] + hdlr[2] + 12])
        box = mdia
        for kind in _PATH[2:]:
            box = _first(moov, box[0] + box[2], box[0] + box[1], kind) if box is not None else None
        if box is not None:
            entries = _children(moov, box[0] + box[2] + _STSD_FIELDS, box[0] + box[1])
            if entries:
                entry, entry_offset, entry_size, entry_head = entries[0]
                if handler == b"vide":
                    inner = entry_offset + entry_head + _VISUAL_ENTRY_FIELDS
                    boxes = {kind: bytes(moov[o + h : o + s])
                             for kind, o, s, h in _children(moov, inner, entry_offset + entry_size)}
    return Track(track_id, handler, entry, chapters, boxes)


def read_tracks(path: Path) -> list[Track]:
    """The tracks of the MP4/MOV at ``path``, in the file's order."""
    with open(path, "rb") as file:
        moov_box = next(((offset, size) for kind, offset, size in _top_level(file) if kind == b"moov"), None)
        if moov_box is None:
            raise BoxError("no moov box")
        file.seek(moov_box[0])
        moov = file.read(moov_box[1])
    _, _, header = _header(moov, 0, len(moov))
    return [_track(moov, offset, size, head) for kind, offset, size, head in _children(moov, header, len(moov))
            if kind == b"trak"]


def add_sample_entry_boxes(path: Path, boxes: dict[bytes, bytes]) -> None:
    """Append ``boxes`` (type -> payload) to the video sample entry of the MP4/MOV at ``path``,
    in place; a type the entry holds already is left as it is."""
    with open(path, "r+b") as file:
        top = _top_level(file)
        if not top or top[-1][0] != b"moov":
            raise BoxError("the moov box is not the file's last")
        _, start, size = top[-1]
        file.seek(start)
        moov = bytearray(file.read(size))
        chain = _video_sample_entry(moov)
        entry, entry_header = chain[-1]
        entry_size = struct.unpack_from(">I", moov, entry)[0]
        present = {kind for kind, *_ in _children(moov, entry + entry_header + _VISUAL_ENTRY_FIELDS,
                                                  entry + entry_size)}
        added = b"".join(struct.pack(">I4s", 8 + len(payload), kind) + payload
                         for kind, payload in boxes.items() if kind not in present)
        if not added:
            return
        for offset, header in chain:
            _grow(moov, offset, header, len(added))
        moov[entry + entry_size : entry + entry_size] = added
        file.seek(start)
        file.write(moov)


def _chunk_offset_tables(moov: bytearray) -> list[tuple[bytes, int, int]]:
    """(type, offset, header size) of every track's chunk offset table (``stco``, ``co64``)."""
    _, _, header = _header(moov, 0, len(moov))
    tables = []
    for _, offset, size, head in (b for b in _children(moov, header, len(moov)) if b[0] == b"trak"):
        box: tuple[int, int, int] | None = (offset, size, head)
        for kind in (b"mdia", b"minf", b"stbl"):
            box = _first(moov, box[0] + box[2], box[0] + box[1], kind) if box is not None else None
        if box is not None:
            tables += [(kind, o, h) for kind, o, _, h in _children(moov, box[0] + box[2], box[0] + box[1])
                       if kind in (b"stco", b"co64")]
    return tables


def move_index_to_front(path: Path, chunk: int = 1 << 24) -> None:
    """Move the ``moov`` box of the MP4/MOV at ``path`` from the end to just after ``ftyp``
    ("faststart", where FFmpeg's own option puts it), in place: a player can then start before the
    whole file has arrived. Every chunk offset grows by the box's size, since the media data moves
    by that much."""
    with open(path, "r+b") as file:
        top = _top_level(file)
        kinds = [kind for kind, _, _ in top]
        if b"moov" not in kinds or b"mdat" not in kinds:
            raise BoxError("no moov or no mdat box")
        if kinds.index(b"moov") < kinds.index(b"mdat"):
            return
        if kinds[-1] != b"moov":
            raise BoxError("the moov box is not the file's last")
        _, start, size = top[-1]
        file.seek(start)
        moov = bytearray(file.read(size))
        for kind, offset, head in _chunk_offset_tables(moov):
            count = struct.unpack_from(">I", moov, offset + head + 4)[0]
            code = ">%dI" % count if kind == b"stco" else ">%dQ" % count
            moved = [o + size for o in struct.unpack_from(code, moov, offset + head + 8)]
            if kind == b"stco" and moved and max(moved) >= 1 << 32:
                raise BoxError("its chunk offsets would pass 4 GiB")
            struct.pack_into(code, moov, offset + head + 8, *moved)
        begin = top[1][1] if kinds[0] == b"ftyp" else 0  # right after the file type, as FFmpeg places it
        position = start  # what follows moves toward the end by the index's size, from its end back
        while position > begin:
            step = min(chunk, position - begin)
            position -= step
            file.seek(position)
            data = file.read(step)
            file.seek(position + size)
            file.write(data)
        file.seek(begin)
        file.write(moov)
