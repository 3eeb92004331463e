"""HDR10 static metadata: the mastering display and the content light levels an HDR10 master
carries beside its PQ transfer tag, read from the decoded frames, handed to the encoders that
can write them (x265, x264, SVT-AV1) as their own parameters, and written into the finished
file's header (media/isobmff.py, media/matroska.py) whatever the codec.

Without them a player tone-maps an HDR10 file by guesswork; the transfer and primaries tags
alone travel with every encoder (see writer.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np

_SIDE = av.sidedata.sidedata.Type
#: Encoder -> the option that takes colon-separated parameters of its own.
PARAMS_OPTION = {"libx265": "x265-params", "libx264": "x264-params", "libsvtav1": "svtav1-params"}


@dataclass(frozen=True)
class HdrMetadata:
    """SMPTE ST 2086 mastering display (CIE 1931 xy chromaticities, luminance in cd/m²) and
    CTA-861.3 content light levels (MaxCLL, MaxFALL in cd/m²); a part the input lacks is None."""

    red: tuple[Fraction, Fraction] | None = None
    green: tuple[Fraction, Fraction] | None = None
    blue: tuple[Fraction, Fraction] | None = None
    white: tuple[Fraction, Fraction] | None = None
    luminance: tuple[Fraction, Fraction] | None = None  # (min, max)
    light_level: tuple[int, int] | None = None  # (MaxCLL, MaxFALL)

    @classmethod
    def of(cls, frame: av.VideoFrame) -> HdrMetadata | None:
        """From the frame's side data (FFmpeg's AVMasteringDisplayMetadata and
        AVContentLightMetadata), or None when it has neither."""
        fields: dict = {}
        # Looked up by kind: PyAV 18.1.1 iterates the side data's kinds, where 18.1.0 iterated the data.
        mastering = frame.side_data.get(_SIDE.MASTERING_DISPLAY_METADATA)
        if mastering is not None:
            v = np.frombuffer(bytes(mastering), np.int32)
            ratio = [Fraction(int(n), int(d)) if d else Fraction(0) for n, d in zip(v[0:20:2], v[1:20:2])]
            has_primaries, has_luminance = int(v[20]), int(v[21])
            if has_primaries:
                fields.update(red=tuple(ratio[0:2]), green=tuple(ratio[2:4]), blue=tuple(ratio[4:6]),
                              white=tuple(ratio[6:8]))
            if has_luminance:
                fields["luminance"] = (ratio[8], ratio[9])
        light = frame.side_data.get(_SIDE.CONTENT_LIGHT_LEVEL)
        if light is not None:
            max_cll, max_fall = np.frombuffer(bytes(light), np.uint32)[:2]
            fields["light_level"] = (int(max_cll), int(max_fall))
        return cls(**fields) if fields else None

    def describe(self) -> str:
        parts = []
        if self.red is not None or self.luminance is not None:
            parts.append("mastering display")
        if self.light_level is not None:
            parts.append("content light level")
        return " and ".join(parts)

    def sample_entry_boxes(self) -> dict[bytes, bytes]:
        """The MP4/MOV boxes of this metadata (ISO/IEC 23001-8 as ISO BMFF and QuickTime hold
        it): ``mdcv``, primaries in green, blue, red order and the white point in 1/50000,
        luminance max then min in 1/10000 cd/m²; ``clli``, MaxCLL then MaxFALL."""
        boxes = {}
        primaries = (self.green, self.blue, self.red, self.white)
        if all(p is not None for p in primaries) and self.luminance is not None:
            low, high = self.luminance
            boxes[b"mdcv"] = struct.pack(">8H2I", *(round(v * 50000) for xy in primaries for v in xy),
                                         round(high * 10000), round(low * 10000))
        if self.light_level is not None:
            boxes[b"clli"] = struct.pack(">2H", *self.light_level)
        return boxes

    def encoder_params(self, encoder: str) -> list[str]:
        """The parameters that make ``encoder`` write this metadata (in its own units), or []
        when it cannot (see :data:`PARAMS_OPTION`)."""
        params = []
        primaries = (self.green, self.blue, self.red, self.white)
        if encoder in ("libx265", "libx264"):  # chromaticity in 1/50000, luminance in 1/10000 cd/m²
            if all(p is not None for p in primaries) and self.luminance is not None:
                xy = "".join(f"{name}({round(x * 50000)},{round(y * 50000)})"
                             for name, (x, y) in zip(("G", "B", "R", "WP"), primaries))
                low, high = self.luminance
                key = "master-display" if encoder == "libx265" else "mastering-display"
                params.append(f"{key}={xy}L({round(high * 10000)},{round(low * 10000)})")
            if self.light_level is not None:
                key = "max-cll" if encoder == "libx265" else "cll"
                params.append(f"{key}={self.light_level[0]},{self.light_level[1]}")
            if encoder == "libx265" and params:
                params.append("hdr10=1")
        elif encoder == "libsvtav1":  # plain numbers
            if all(p is not None for p in primaries) and self.luminance is not None:
                xy = "".join(f"{name}({float(x):.5f},{float(y):.5f})"
                             for name, (x, y) in zip(("G", "B", "R", "WP"), primaries))
                low, high = self.luminance
                params.append(f"mastering-display={xy}L({float(high):.4f},{float(low):.4f})")
            if self.light_level is not None:
                params.append(f"content-light={self.light_level[0]},{self.light_level[1]}")
        return params
