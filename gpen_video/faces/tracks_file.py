"""``--tracks-out``: what was found and used on every frame, as JSON, written as the video runs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from ..errors import OutputError, failures_as
from .track import TrackedFrame


def _points(array) -> list[list[float]]:
    return [[round(float(x), 3), round(float(y), 3)] for x, y in array]


#: A field picture's first line -> its name in the tracks file.
FIELD_NAMES = {0: "top", 1: "bottom"}


def frame_record(frame: TrackedFrame, field: int | None, restored: list[bool]) -> dict:
    """One frame of the tracks file (schema in the README), or one field (by its first line) of
    an interlaced frame, whose ``index`` then counts fields; ``restored`` says which of its faces
    were (not those outside ``--start``/``--end``, nor those ``--faces`` or ``--tracks`` left out,
    none in a --detect-only run)."""
    record = {"index": frame.index, "time": round(frame.time, 6)}
    if field is not None:
        record["field"] = FIELD_NAMES[field]
    return record | {
        "faces": [
            {
                "track": face.track,
                "score": None if face.score is None else round(float(face.score), 5),
                "interpolated": face.interpolated,
                "box": [round(float(v), 3) for v in face.box],
                "landmarks_raw": _points(face.landmarks_raw),
                "landmarks": _points(face.landmarks),
                "restored": was_restored,
            }
            for face, was_restored in zip(frame.faces, restored, strict=True)
        ],
    }


class TracksWriter:
    """Streams frame records into a temp file beside ``path``; :meth:`close` moves it into place."""

    def __init__(self, path: Path, tracks: Callable[[], dict] | None = None) -> None:
        self.path = path
        self.tracks = tracks  # what the file says of each track once every frame is in (--qc's flicker)
        self.tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
        self.failing = f"cannot write the tracks file {path}"
        with failures_as(OutputError, self.failing):
            self.file = open(self.tmp, "w", encoding="utf-8")
            self.file.write('{"frames": [')
        self.first = True

    def add(self, frame: TrackedFrame, field: int | None, in_range: bool, restored: list[bool]) -> None:
        with failures_as(OutputError, self.failing):
            self.file.write(("\n" if self.first else ",\n") + json.dumps(frame_record(frame, field, restored)))
        self.first = False

    def close(self) -> None:
        with failures_as(OutputError, self.failing):
            tracks = f',\n"tracks": {json.dumps(self.tracks())}' if self.tracks is not None else ""
            self.file.write(f"\n]{tracks}}}\n")
            self.file.close()
            os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)
