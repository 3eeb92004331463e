"""Where a job writes: the checks on OUTPUT before any work, and the work directory of a job
encoded in segments."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import UsageError
from ..media.segments import SegmentStore, work_dir_for
from ..options import JobOptions, RestoreOptions


def segment_store(input: Path, output: Path, job: JobOptions, options: RestoreOptions) -> SegmentStore:
    """The work directory of the segmented job writing ``output`` (``--resume``, or a long video
    split across a cluster), tied to the input file and every option that shapes the result."""
    stat = input.stat()
    fingerprint = {"input": str(input.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                   "segment_frames": job.segment_frames, "options": options.fingerprint()}
    return SegmentStore(work_dir_for(output), fingerprint)


def check_paths(input: Path, output: Path, overwrite: bool, extensions: set[str] | dict) -> None:
    """OUTPUT can be written, is not the input, and replaces nothing unasked."""
    if not output.suffix and not output.is_dir():
        raise UsageError(f"OUTPUT {output} has no extension: name a file such as {output}.mp4 (the container "
                         f"follows the extension), or end it with / to write into that folder")
    if output.suffix.lower() not in extensions:
        raise UsageError(f"unsupported output extension {output.suffix!r}; use one of {', '.join(sorted(extensions))}")
    if input.exists() and output.exists() and os.path.samefile(input, output):
        raise UsageError("OUTPUT is the input file; choose another path")
    if output.resolve() == input.resolve():
        raise UsageError("OUTPUT is the input file; choose another path")
    if output.is_dir():
        raise UsageError(f"OUTPUT is a directory: {output}")
    if output.exists() and not overwrite:
        raise UsageError(f"{output} exists; pass --overwrite to replace it")
    parent = output.resolve().parent
    if not parent.is_dir():
        raise UsageError(f"output directory does not exist: {parent}")
    try:  # a real probe: permissions, read-only file systems and ACLs all answer the same way
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError:
        raise UsageError(f"output directory is not writable: {parent}") from None
