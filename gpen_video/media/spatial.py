"""360° and stereo-3D layout between containers: how players must map the picture.

MP4/MOV hold it in the video sample entry's ``sv3d`` (projection, pose) and ``st3d`` (stereo
mode) boxes, as Google's spherical video specification lays them out; Matroska/WebM in the video
track's ``Projection`` and ``StereoMode`` elements, whose ``ProjectionPrivate`` is by definition
the payload of the MP4 projection box (``equi``, ``cbmp`` or ``mshp``). FFmpeg reads both but PyAV
cannot hand either to the muxer, so the layout is read from the input's own boxes or elements and
written into the finished output's (:mod:`.isobmff`, :mod:`.matroska`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .matroska import children_payloads, element

#: MP4 projection box <-> Matroska ProjectionType.
_PROJECTION_BOXES = {b"equi": 1, b"cbmp": 2, b"mshp": 3}
#: MP4 st3d stereo_mode <-> Matroska StereoMode (left eye first): mono, top-bottom, side by side.
_STEREO_TO_MATROSKA = {0: 0, 1: 3, 2: 1}
#: Matroska's element IDs in a track's Video.
PROJECTION, PROJECTION_TYPE, PROJECTION_PRIVATE = 0x7670, 0x7671, 0x7672
POSE_IDS = (0x7673, 0x7674, 0x7675)  # yaw, pitch, roll: floats, degrees
STEREO_MODE = 0x53B8


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def _boxes(data: bytes) -> dict[bytes, bytes]:
    """The payloads of the boxes laid one after another in ``data``, by type."""
    found, at = {}, 0
    while at + 8 <= len(data):
        size, kind = struct.unpack_from(">I4s", data, at)
        if size < 8 or at + size > len(data):
            break
        found[kind] = data[at + 8 : at + size]
        at += size
    return found


def _ebml_uint(value: int) -> bytes:
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


@dataclass(frozen=True)
class SpatialLayout:
    """A video's 360° projection and stereo mode, as both container families can state them."""

    projection: int | None  # Matroska's ProjectionType: 1 equirectangular, 2 cubemap, 3 mesh; None: flat
    projection_data: bytes = b""  # the MP4 projection box's payload: Matroska's ProjectionPrivate
    pose: tuple[float, float, float] = (0.0, 0.0, 0.0)  # yaw, pitch, roll in degrees
    stereo: int | None = None  # Matroska's StereoMode (0 mono, 1 side by side, 3 top-bottom, ...); None: unsaid

    @classmethod
    def from_mp4(cls, entry_boxes: dict[bytes, bytes]) -> SpatialLayout | None:
        """From a video sample entry's extra boxes (:attr:`.isobmff.Track.entry_boxes`); None without either box."""
        projection, data, pose = None, b"", (0.0, 0.0, 0.0)
        if b"sv3d" in entry_boxes:
            proj = _boxes(_boxes(entry_boxes[b"sv3d"]).get(b"proj", b""))
            if len(proj.get(b"prhd", b"")) >= 16:
                pose = tuple(v / 65536 for v in struct.unpack_from(">iii", proj[b"prhd"], 4))
            for kind, number in _PROJECTION_BOXES.items():
                if kind in proj:
                    projection, data = number, proj[kind]
        stereo = None
        if len(entry_boxes.get(b"st3d", b"")) >= 5:
            stereo = _STEREO_TO_MATROSKA.get(entry_boxes[b"st3d"][4])
        if projection is None and stereo is None:
            return None
        return cls(projection, data, pose, stereo)

    @classmethod
    def from_matroska(cls, video: dict[int, bytes]) -> SpatialLayout | None:
        """From a Matroska video track's ``Video`` children (ID -> payload); None without either element."""
        projection, data, pose = None, b"", [0.0, 0.0, 0.0]
        if PROJECTION in video:
            fields = children_payloads(video[PROJECTION])
            projection = int.from_bytes(fields.get(PROJECTION_TYPE, b"\0"), "big") or None
            data = fields.get(PROJECTION_PRIVATE, b"")
            for n, element_id in enumerate(POSE_IDS):
                value = fields.get(element_id, b"")
                if len(value) in (4, 8):
                    pose[n] = struct.unpack(">f" if len(value) == 4 else ">d", value)[0]
        stereo = int.from_bytes(video[STEREO_MODE], "big") if STEREO_MODE in video else None
        if projection is None and stereo is None:
            return None
        return cls(projection, data, (pose[0], pose[1], pose[2]), stereo)

    def mp4_boxes(self) -> dict[bytes, bytes] | None:
        """The sv3d and st3d boxes' payloads; None where MP4 cannot state this stereo mode."""
        boxes = {}
        if self.projection is not None:
            kind = next(k for k, v in _PROJECTION_BOXES.items() if v == self.projection)
            prhd = bytes(4) + struct.pack(">iii", *(round(v * 65536) for v in self.pose))
            boxes[b"sv3d"] = _box(b"svhd", bytes(4) + b"gpen-video\0") + _box(
                b"proj", _box(b"prhd", prhd) + _box(kind, self.projection_data))
        if self.stereo is not None:
            mode = next((k for k, v in _STEREO_TO_MATROSKA.items() if v == self.stereo), None)
            if mode is None:
                return None
            boxes[b"st3d"] = bytes(4) + bytes([mode])
        return boxes

    def matroska_elements(self) -> dict[int, bytes]:
        """The Video children that state it (ID -> payload): Projection and StereoMode."""
        elements = {}
        if self.projection is not None:
            fields = element(PROJECTION_TYPE, _ebml_uint(self.projection))
            if self.projection_data:
                fields += element(PROJECTION_PRIVATE, self.projection_data)
            fields += b"".join(element(i, struct.pack(">f", v)) for i, v in zip(POSE_IDS, self.pose) if v)
            elements[PROJECTION] = fields
        if self.stereo is not None:
            elements[STEREO_MODE] = _ebml_uint(self.stereo)
        return elements
