"""The one edit of a finished MP4/MOV file that FFmpeg's muxer cannot be asked for through PyAV:
HDR10 static metadata as the video sample entry's ``mdcv`` (mastering display colour volume) and
``clli`` (content light level) boxes, which players read from the container whatever the codec
(ProRes has no place for them in its bitstream; HEVC and AV1 carry them there as well).

The muxer writes its ``moov`` box last, after the media data, so growing it moves no sample: the
boxes are added to the video track's first sample entry, and every box around it grows by as much.
"""

from __future__ import annotations

import struct
from pathlib import Path

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


def add_sample_entry_boxes(path: Path, boxes: dict[bytes, bytes]) -> None:
    """Append ``boxes`` (type -> payload) to the video sample entry of the MP4/MOV at ``path``,
    in place; a type the entry holds already is left as it is."""
    with open(path, "r+b") as file:
        top, end = [], file.seek(0, 2)
        position = 0
        while position < end:
            file.seek(position)
            kind, size, _ = _header(file.read(16), 0, end - position)
            top.append((kind, position, size))
            position += size
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
