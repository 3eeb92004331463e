"""The Python API: one-shot ``restore_video`` and ``restore_image``, and :class:`Engine` for many jobs.

Every keyword besides the job's own (``overwrite``, ``resume``, ``segment_frames``, ``tracks_out``, ``qc``)
and ``progress`` is a field of :class:`RestoreOptions`, checked before any work::

    restore_video("in.mp4", "out.mp4", gpus=(0, 1), strength=0.8)
    with_options = RestoreOptions(detector="retinaface-mobile")
    restore_video("in.mp4", "out.mp4", with_options, tracks_out="faces.json")
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .errors import UsageError
from .options import BatchOptions, JobOptions, RestoreOptions
from .pipeline.batch import BatchEngine, JobResult
from .pipeline.batch import restore_many as _restore_many
from .pipeline.engine import Engine
from .pipeline.summary import Summary

__all__ = ["BatchOptions", "Engine", "JobOptions", "JobResult", "RestoreOptions", "Summary",
           "UsageError", "find_faces", "preview", "restore_image", "restore_many", "restore_video"]


def _options(options: RestoreOptions | None, changes: dict[str, Any]) -> RestoreOptions:
    """``options`` (default: the defaults) with ``changes``, each the name of one of its fields."""
    names = {f.name for f in dataclasses.fields(RestoreOptions)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise UsageError(f"unknown option {unknown[0]!r}; the options are the fields of RestoreOptions")
    return dataclasses.replace(options or RestoreOptions(), **changes)


def _job(overwrite: bool, resume: bool, segment_frames: int | None, tracks_out: str | Path | None,
         qc: bool = False) -> JobOptions:
    return JobOptions(overwrite=overwrite, resume=resume, tracks_out=Path(tracks_out) if tracks_out else None, qc=qc,
                      **({"segment_frames": segment_frames} if segment_frames is not None else {}))


def restore_video(input: str | Path, output: str | Path, options: RestoreOptions | None = None, *,
                  overwrite: bool = False, resume: bool = False, segment_frames: int | None = None,
                  tracks_out: str | Path | None = None, qc: bool = False, progress: bool = True,
                  **changes: Any) -> Summary:
    """Restore every face in ``input`` and write ``output`` (see :meth:`Engine.restore_video`)."""
    with Engine(_options(options, changes), progress) as engine:
        return engine.restore_video(input, output, _job(overwrite, resume, segment_frames, tracks_out, qc))


def restore_image(input: str | Path, output: str | Path, options: RestoreOptions | None = None, *,
                  overwrite: bool = False, tracks_out: str | Path | None = None, progress: bool = True,
                  **changes: Any) -> Summary:
    """Restore the faces of one photo (see :meth:`Engine.restore_image`)."""
    with Engine(_options(options, changes), progress) as engine:
        return engine.restore_image(input, output, _job(overwrite, False, None, tracks_out))


def find_faces(input: str | Path, options: RestoreOptions | None = None, *, tracks_out: str | Path | None = None,
               progress: bool = True, **changes: Any) -> Summary:
    """Detect and track the faces of ``input`` without restoring them (``--detect-only``): the
    summary's ``found`` lists the tracks, whose ids ``tracks=`` takes (see :meth:`Engine.find_faces`)."""
    with Engine(_options(options, changes), progress) as engine:
        return engine.find_faces(input, tracks_out)


def preview(input: str | Path, sheet: str | Path, panels: int, options: RestoreOptions | None = None, *,
            overwrite: bool = False, progress: bool = True, **changes: Any) -> Summary:
    """A contact sheet of ``panels`` frames of ``input``, decoded beside restored (``--preview``;
    see :meth:`Engine.preview`)."""
    JobOptions(preview=panels)  # its range check
    with Engine(_options(options, changes), progress) as engine:
        return engine.preview(input, sheet, panels, overwrite)


def restore_many(inputs: list[str | Path], output_dir: str | Path, options: RestoreOptions | None = None, *,
                 name: str | None = None, recursive: bool = False, skip_existing: bool = False,
                 jobs: int | None = None, ray: str | None = None, ray_actors: int | None = None,
                 overwrite: bool = False, resume: bool = False, segment_frames: int | None = None,
                 tracks_out: str | Path | None = None, qc: bool = False, progress: bool = True,
                 **changes: Any) -> list[JobResult]:
    """Restore every input (files, or the videos and images of folders) into ``output_dir`` on one
    engine: the weights load and the workers compile once, and ``jobs`` files (see
    :class:`BatchOptions`) are restored at once; with ``ray`` (an address, as ``--ray``), on the
    actors of a Ray cluster instead. A file that fails has its error in its :class:`JobResult`
    and no output; the others are restored."""
    batch = BatchOptions(recursive=recursive, skip_existing=skip_existing, ray=ray, ray_actors=ray_actors,
                         **({"name": name} if name else {}), **({"jobs": jobs} if jobs is not None else {}))
    job = _job(overwrite, resume, segment_frames, tracks_out, qc)
    engine: BatchEngine
    if ray is not None:
        from .pipeline.cluster import ClusterEngine

        engine = ClusterEngine(_options(options, changes), ray, ray_actors, batch.jobs)
    else:
        engine = Engine(_options(options, changes), progress)
    with engine:
        return _restore_many(engine, [Path(p) for p in inputs], Path(output_dir), batch, job, progress)
