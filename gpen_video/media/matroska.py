"""Edits of a finished Matroska/WebM file's video track that FFmpeg's muxer makes only from stream
fields PyAV cannot set: HDR10 static metadata (``MasteringMetadata``, ``MaxCLL`` and ``MaxFALL``
in the track's ``Colour``), the shown size of non-square pixels (``DisplayWidth``,
``DisplayHeight``), and 360° video's ``Projection`` and ``StereoMode``; and the reading of an
input's video track elements, which FFmpeg does not show through PyAV.

The elements go into the video track's ``Video``. The space they take comes out of the ``Void``
that FFmpeg's muxer leaves after the front ``SeekHead``, which lies before ``Tracks``: the
elements between the two move back by as much, and nothing after the insertion moves (clusters,
cues, tags), so the file keeps its length and only its first few hundred bytes are rewritten: the
``SeekHead``'s positions of the moved elements, and the CRC-32 of every element that changed.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from .hdr import HdrMetadata

SEGMENT, SEEK_HEAD, SEEK, SEEK_ID, SEEK_POSITION = 0x18538067, 0x114D9B74, 0x4DBB, 0x53AB, 0x53AC
VOID, CRC32, TRACKS, TRACK_ENTRY, TRACK_TYPE, VIDEO, COLOUR = 0xEC, 0xBF, 0x1654AE6B, 0xAE, 0x83, 0xE0, 0x55B0
CLUSTER = 0x1F43B675
MASTERING, MAX_CLL, MAX_FALL = 0x55D0, 0x55BC, 0x55BD
DISPLAY_WIDTH, DISPLAY_HEIGHT, DISPLAY_UNIT = 0x54B0, 0x54BA, 0x54B2
#: MasteringMetadata's children in order: R, G, B and white xy chromaticities, luminance max, min.
_MASTERING_IDS = (0x55D1, 0x55D2, 0x55D3, 0x55D4, 0x55D5, 0x55D6, 0x55D7, 0x55D8, 0x55D9, 0x55DA)


class MatroskaError(ValueError):
    """The file is not laid out as FFmpeg's Matroska muxer writes it, or has no room left."""


def _width(data: bytes, at: int, most: int, what: str) -> int:
    """The length of the EBML variable-length number at ``at``: one more than its leading zero bits."""
    width = 1
    while width <= most and not data[at] & (0x80 >> (width - 1)):
        width += 1
    if width > most:
        raise MatroskaError(f"no element {what} at byte {at}")
    return width


def _read_id(data: bytes, at: int) -> tuple[int, int]:
    width = _width(data, at, 4, "ID")
    return int.from_bytes(data[at : at + width], "big"), width


def _read_size(data: bytes, at: int) -> tuple[int, int]:
    width = _width(data, at, 8, "size")
    return int.from_bytes(data[at : at + width], "big") & ((1 << 7 * width) - 1), width


def _size(value: int, width: int = 0) -> bytes:
    """``value`` as an EBML size of ``width`` bytes (the fewest that hold it when 0)."""
    width = width or next(w for w in range(1, 9) if value < (1 << 7 * w) - 1)
    if value >= (1 << 7 * width) - 1:
        raise MatroskaError(f"{value} does not fit a {width}-byte size")
    return (value | 1 << 7 * width).to_bytes(width, "big")


def element(element_id: int, payload: bytes) -> bytes:
    """One EBML element: its ID, its size in the fewest bytes, its payload."""
    return _id_bytes(element_id) + _size(len(payload)) + payload


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(ID, offset, header size, payload size) of the elements in ``data[start:end]``."""
    found = []
    while start < end:
        element_id, id_width = _read_id(data, start)
        size, size_width = _read_size(data, start + id_width)
        found.append((element_id, start, id_width + size_width, size))
        start += id_width + size_width + size
    if start != end:
        raise MatroskaError("an element runs past its parent")
    return found


def _with_crc(payload: bytes) -> bytes:
    """``payload`` with its leading CRC-32 element (if any) computed again over the rest."""
    children = _children(payload, 0, len(payload))
    if children and children[0][0] == CRC32:
        _, _, header, _ = children[0]
        rest = payload[header + 4 :]
        payload = payload[:header] + struct.pack("<I", zlib.crc32(rest)) + rest
    return payload


def _id_bytes(element_id: int) -> bytes:
    return element_id.to_bytes((element_id.bit_length() + 7) // 8, "big")


def _rebuilt(found: tuple[int, int, int, int], payload: bytes) -> bytes:
    """``found`` with a new ``payload``: its size in the width it had where that still holds it,
    and its CRC-32 (if it has one) made right."""
    element_id, _, header, _ = found
    id_bytes = _id_bytes(element_id)
    try:
        size = _size(len(payload), header - len(id_bytes))
    except MatroskaError:
        size = _size(len(payload))
    return id_bytes + size + _with_crc(payload)


def _without_voids(payload: bytes) -> bytes:
    """``payload`` less its Void elements: space a muxer reserved, free to use once the file is done."""
    return b"".join(payload[at : at + header + size] for element_id, at, header, size
                    in _children(payload, 0, len(payload)) if element_id != VOID)


def _replaced(data: bytes, chain: list[tuple[int, int, int, int]], leaf_payload: bytes) -> bytes:
    """The outermost element of ``chain`` (outermost first, each the next one's parent) rebuilt
    with the innermost one's payload replaced by ``leaf_payload``; the Voids inside the elements
    below the outermost go (FFmpeg reserves one in a video track entry), to make room."""
    rebuilt = _rebuilt(chain[-1], leaf_payload)
    for parent, child in zip(reversed(chain[:-1]), reversed(chain)):
        _, parent_at, parent_header, parent_size = parent
        _, child_at, child_header, child_size = child
        start = parent_at + parent_header
        payload = data[start:child_at] + rebuilt + data[child_at + child_header + child_size : start + parent_size]
        rebuilt = _rebuilt(parent, payload if parent is chain[0] else _without_voids(payload))
    return rebuilt


def hdr_elements(hdr: HdrMetadata) -> bytes:
    """The Colour children that hold ``hdr``: MasteringMetadata (chromaticities and luminance
    as 32-bit floats), MaxCLL and MaxFALL."""
    elements = b""
    primaries = (hdr.red, hdr.green, hdr.blue, hdr.white)
    if all(p is not None for p in primaries) and hdr.luminance is not None:
        low, high = hdr.luminance
        values = [float(v) for xy in primaries for v in xy] + [float(high), float(low)]
        elements += element(MASTERING, b"".join(element(i, struct.pack(">f", v))
                                                 for i, v in zip(_MASTERING_IDS, values)))
    if hdr.light_level is not None:
        for element_id, value in zip((MAX_CLL, MAX_FALL), hdr.light_level):
            elements += element(element_id, value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))
    return elements


def add_hdr_metadata(path: Path, hdr: HdrMetadata) -> None:
    """Write ``hdr`` into the video track's Colour of the Matroska/WebM file at ``path``, in place;
    a track that has such elements already is left as it is."""

    def edit(head: bytes, video: tuple[int, int, int, int]) -> tuple[list, bytes] | None:
        colour = [c for c in _children(head, video[1] + video[2], video[1] + video[2] + video[3]) if c[0] == COLOUR]
        if colour:
            present = {c[0] for c in _children(head, colour[0][1] + colour[0][2],
                                               colour[0][1] + colour[0][2] + colour[0][3])}
            if present & {MASTERING, MAX_CLL, MAX_FALL}:
                return None
            return [colour[0]], _payload(head, colour[0]) + hdr_elements(hdr)
        return [], _payload(head, video) + element(COLOUR, hdr_elements(hdr))

    _edit_video_track(path, edit)


def add_display_size(path: Path, width: int, height: int) -> None:
    """The video track's DisplayWidth and DisplayHeight in pixels (the picture as shown, for
    non-square pixels: FFmpeg's muxer writes them only from a stream field PyAV cannot set, and
    marks the unit unknown otherwise), in place; a track that has them already is left as it is."""

    def edit(head: bytes, video: tuple[int, int, int, int]) -> tuple[list, bytes] | None:
        children = _children(head, video[1] + video[2], video[1] + video[2] + video[3])
        if {c[0] for c in children} & {DISPLAY_WIDTH, DISPLAY_HEIGHT}:
            return None
        kept = b"".join(head[at : at + header + size] for element_id, at, header, size in children
                        if element_id != DISPLAY_UNIT)  # the default unit is pixels
        added = b"".join(element(i, v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big"))
                         for i, v in ((DISPLAY_WIDTH, width), (DISPLAY_HEIGHT, height)))
        return [], kept + added

    _edit_video_track(path, edit)


def add_video_elements(path: Path, elements: dict[int, bytes]) -> None:
    """``elements`` (ID -> payload) into the video track's Video of the file at ``path``, in place;
    an ID the track has already is left as it is."""

    def edit(head: bytes, video: tuple[int, int, int, int]) -> tuple[list, bytes] | None:
        present = {c[0] for c in _children(head, video[1] + video[2], video[1] + video[2] + video[3])}
        added = b"".join(element(i, v) for i, v in elements.items() if i not in present)
        return ([], _payload(head, video) + added) if added else None

    _edit_video_track(path, edit)


def children_payloads(data: bytes) -> dict[int, bytes]:
    """The payloads of the elements laid one after another in ``data``, by ID (the first of each)."""
    found: dict[int, bytes] = {}
    for element_id, at, header, size in _children(data, 0, len(data)):
        found.setdefault(element_id, data[at + header : at + header + size])
    return found


def read_video_elements(path: Path) -> dict[int, bytes]:
    """The children of the first video track's Video in the Matroska/WebM file at ``path``, by ID
    (their payloads); empty where the track list is not found before the first cluster."""
    with open(path, "rb") as file:
        head = file.read(1 << 12)
        try:
            _, width = _read_id(head, 0)
            size, size_width = _read_size(head, width)
            at = width + size_width + size
            segment_id, id_width = _read_id(head, at)
            _, size_width = _read_size(head, at + id_width)
        except (MatroskaError, IndexError):
            return {}
        if segment_id != SEGMENT:
            return {}
        at += id_width + size_width
        while True:  # the Segment's children, up to Tracks
            file.seek(at)
            header = file.read(12)
            if len(header) < 2:
                return {}
            try:
                element_id, id_width = _read_id(header, 0)
                size, size_width = _read_size(header, id_width)
            except (MatroskaError, IndexError):
                return {}
            if element_id == CLUSTER:
                return {}
            if element_id == TRACKS:
                file.seek(at + id_width + size_width)
                tracks = file.read(size)
                break
            at += id_width + size_width + size
    try:
        for entry in _children(tracks, 0, len(tracks)):
            if entry[0] == TRACK_ENTRY and _is_video(tracks, entry):
                fields = children_payloads(_payload(tracks, entry))
                return children_payloads(fields[VIDEO]) if VIDEO in fields else {}
    except MatroskaError:
        pass
    return {}


def _payload(data: bytes, found: tuple[int, int, int, int]) -> bytes:
    _, at, header, size = found
    return data[at + header : at + header + size]


def _edit_video_track(path: Path, edit: Callable[[bytes, tuple[int, int, int, int]], tuple[list, bytes] | None]
                      ) -> None:
    """Rewrite the video track's Video element of the file at ``path`` in place: ``edit(head,
    video)`` gives the elements below Video to descend into and the innermost one's new payload
    (None: nothing to do). The growth comes out of the Void after the front SeekHead."""
    with open(path, "r+b") as file:
        head = file.read(1 << 16)
        _, width = _read_id(head, 0)
        size, size_width = _read_size(head, width)
        segment_at = width + size_width + size
        segment_id, id_width = _read_id(head, segment_at)
        if segment_id != SEGMENT:
            raise MatroskaError("no Segment after the EBML header")
        _, size_width = _read_size(head, segment_at + id_width)
        segment_data = segment_at + id_width + size_width
        top, at = [], segment_data
        while not top or top[-1][0] != TRACKS:  # the front elements, up to Tracks
            if at + 12 > len(head):
                raise MatroskaError("no Tracks element near the start")
            element_id, id_width = _read_id(head, at)
            size, size_width = _read_size(head, at + id_width)
            top.append((element_id, at, id_width + size_width, size))
            at += id_width + size_width + size
        tracks = top[-1]
        end = tracks[1] + tracks[2] + tracks[3]
        if end > len(head):
            file.seek(0)
            head = file.read(end)
        voids = [i for i, e in enumerate(top) if e[0] == VOID]
        if top[0][0] != SEEK_HEAD or not voids:
            raise MatroskaError("no SeekHead and Void before Tracks")
        void = top[voids[0]]
        chain = [tracks]
        for wanted in (TRACK_ENTRY, VIDEO):
            parent = chain[-1]
            found = [c for c in _children(head, parent[1] + parent[2], parent[1] + parent[2] + parent[3])
                     if c[0] == wanted and (wanted != TRACK_ENTRY or _is_video(head, c))]
            if not found:
                raise MatroskaError("no video track")
            chain.append(found[0])
        edited = edit(head, chain[-1])
        if edited is None:
            return
        below, leaf = edited
        new_tracks = _replaced(head, chain + below, leaf)
        grown = len(new_tracks) - (tracks[2] + tracks[3])
        void_total = void[2] + void[3]
        room = void_total - grown
        if room < 0 or room == 1:  # a Void is at least two bytes
            raise MatroskaError(f"the Void before Tracks has {void_total} bytes; {grown} are needed")
        new_void = b"" if room == 0 else bytes([VOID]) + (_size(room - 2, 1) if room <= 128 else _size(room - 9, 8))
        new_void += bytes(room - len(new_void))
        moved_from, moved_to = void[1] + void_total, tracks[1]  # Info and the rest, up to Tracks
        region = new_void + head[moved_from:moved_to] + new_tracks
        if len(region) != end - void[1]:
            raise MatroskaError("the rewritten front of the file changed its length")
        seek_head = _moved_positions(head, top[0], segment_data, moved_from, end, grown)
        file.seek(top[0][1])
        file.write(seek_head)
        file.seek(void[1])
        file.write(region)


def _is_video(data: bytes, entry: tuple[int, int, int, int]) -> bool:
    _, offset, header, size = entry
    for element_id, at, child_header, child_size in _children(data, offset + header, offset + header + size):
        if element_id == TRACK_TYPE:
            return int.from_bytes(data[at + child_header : at + child_header + child_size], "big") == 1
    return False


def _moved_positions(data: bytes, seek_head: tuple[int, int, int, int], segment_data: int, start: int, end: int,
                     by: int) -> bytes:
    """The SeekHead with every position of an element in ``[start, end)`` moved back ``by`` bytes
    (each in the width it had), and its CRC-32 made right."""
    _, offset, header, size = seek_head
    patched = bytearray(data[offset : offset + header + size])
    for element_id, at, child_header, child_size in _children(data, offset + header, offset + header + size):
        if element_id != SEEK:
            continue
        for field, field_at, field_header, field_size in _children(data, at + child_header,
                                                                   at + child_header + child_size):
            if field != SEEK_POSITION:
                continue
            value_at = field_at + field_header
            position = int.from_bytes(data[value_at : value_at + field_size], "big")
            if start <= segment_data + position < end:
                patched[value_at - offset : value_at - offset + field_size] = (position - by).to_bytes(field_size,
                                                                                                      "big")
    return bytes(patched[:header]) + _with_crc(bytes(patched[header:]))
