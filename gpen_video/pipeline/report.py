"""``--report FILE.json``: what became of each file, for scripts and render managers. The schema
is in the README ("Reports"); its ``version`` changes whenever a field's meaning does."""

from __future__ import annotations

import json
from pathlib import Path

from .. import __version__
from ..errors import OutputError, failures_as
from ..media.outputs import write_atomically
from .flicker import flicker_records
from .summary import Summary

#: The schema's version: 1 is the first.
SCHEMA = 1


def file_record(input: Path, output: Path | None, summary: Summary | None = None, error: str = "",
                skipped: bool = False) -> dict:
    """One file's record: ``result`` is done, skipped or failed (with ``error``, the one line the
    command printed)."""
    record = {"input": str(input), "output": str(output) if output is not None else None,
              "result": "skipped" if skipped else "failed" if error else "done", "error": error or None}
    if summary is None:
        return record
    tracks = sorted(summary.tracks_found.frames) if summary.tracks_found is not None else summary.chosen
    return record | {
        "frames": summary.frames, "faces": summary.faces, "frames_with_faces": summary.frames_with_faces,
        "tracks": tracks, "damaged_frames": summary.damaged, "resumed_at_frame": summary.resumed_at,
        "warnings": [*([summary.truncated] if summary.truncated else []), *summary.warnings],
        "seconds": round(summary.seconds, 3), "fps": round(summary.fps, 3),
        "startup_seconds": {name: round(seconds, 3) for name, seconds in summary.startup.items()},
        "decoder": summary.decoder or None,
        "flicker": flicker_records(summary.flicker) if summary.flicker is not None else None}


def write_report(path: Path, records: list[dict]) -> None:
    """The report at ``path``, whole or not at all: written beside it, then renamed into place."""
    document = {"tool": "gpen-video", "version": __version__, "schema": SCHEMA, "files": records}
    with failures_as(OutputError, f"cannot write the report {path}"):
        write_atomically(path, (json.dumps(document, indent=1) + "\n").encode())
