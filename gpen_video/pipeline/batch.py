"""Many inputs in one call: ``gpen-video IN1 IN2 ... OUTDIR`` or ``gpen-video INDIR OUTDIR``.

Every job runs on one :class:`~.engine.Engine`, so the weights load and the workers compile once,
and ``--jobs`` files run at once on its workers, so that one's start overlaps another's end. A bad
file gets its one-line error and no output; the others go on. One progress bar covers the
batch; the report lists every file with its result.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import OutputError, UsageError, error_line, failures_as
from ..media.containers import CONTAINERS
from ..media.images import IMAGE_EXTENSIONS
from ..media.probe import probe
from ..options import BatchOptions, JobOptions
from ..progress import progress_bar
from .engine import FrameCallback
from .summary import Summary

#: Extensions taken as videos when a folder is scanned (a file named on the command line is tried
#: whatever its name).
VIDEO_EXTENSIONS = {".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v", ".mxf", ".ts", ".m2ts", ".mts", ".mpg",
                    ".mpeg", ".wmv", ".flv", ".3gp", ".dv"}
#: Where the input's container cannot be written, outputs take this one (it holds any stream).
FALLBACK_EXTENSION = "mkv"


class BatchEngine(Protocol):
    """What runs a batch's files: this machine's :class:`~.engine.Engine`, or a Ray cluster's
    :class:`~.cluster.ClusterEngine`."""

    planned_frames: int | None  # the batch's frames, which --compile auto decides on

    def parallel_jobs(self, requested: int) -> int: ...

    def check(self, inputs: Sequence[Path], output_dir: Path) -> None: ...

    def restore(self, input: str | Path, output: str | Path | None, job: JobOptions | None = None,
                on_frame: FrameCallback | None = None, whole_photos: bool = False) -> Summary: ...

    def interrupt(self) -> None: ...


@dataclass
class JobResult:
    """What became of one input: its summary, why it failed, or that its output was already there."""

    input: Path
    output: Path
    summary: Summary | None = None
    error: str = ""
    skipped: bool = False

    def describe(self) -> str:
        if self.skipped:
            return f"skipped {self.input}: {self.output} exists"
        if self.error:
            return f"FAILED  {self.input}: {self.error}"
        s = self.summary
        return (f"ok      {self.input} -> {self.output}: {s.frames} frames, {s.faces} faces, {s.seconds:.1f} s"
                + (f", {len(s.warnings)} warning(s)" if s.warnings else ""))


def find_inputs(paths: Sequence[Path], recursive: bool) -> list[tuple[Path, Path]]:
    """Each input with its place relative to the output folder: files as named (by their name),
    folders' videos and images (by their path inside the folder; subfolders with ``recursive``),
    hidden files left out (partial outputs are hidden)."""
    found = []
    for path in paths:
        if path.is_dir():
            pattern = "**/*" if recursive else "*"
            for item in sorted(path.glob(pattern)):
                relative = item.relative_to(path)
                if (item.is_file() and item.suffix.lower() in VIDEO_EXTENSIONS | IMAGE_EXTENSIONS
                        and not any(part.startswith(".") for part in relative.parts)):
                    found.append((item, relative))
        else:
            found.append((path, Path(path.name)))
    return found


def output_name(relative: Path, template: str) -> Path:
    """The output for an input at ``relative``: the template filled with its ``stem`` and ``ext``,
    where ``ext`` is the input's own extension if it can be written, else Matroska's."""
    ext = relative.suffix.lower().lstrip(".")
    if relative.suffix.lower() not in IMAGE_EXTENSIONS and f".{ext}" not in CONTAINERS:
        ext = FALLBACK_EXTENSION
    try:
        name = template.format(stem=relative.stem, ext=ext)
    except (KeyError, IndexError, ValueError) as exc:
        raise UsageError(f"--name {template!r} is not a name template: use {{stem}} and {{ext}} ({exc})") from None
    return relative.parent / name


def _make_folder(folder: Path) -> None:
    """A folder to write into, made where it is missing."""
    with failures_as(OutputError, f"cannot make the folder {folder}"):
        folder.mkdir(parents=True, exist_ok=True)


def restore_many(engine: BatchEngine, inputs: Sequence[Path], output_dir: Path, batch: BatchOptions,
                 job: JobOptions, progress: bool = True,
                 report: Callable[[JobResult], None] | None = None) -> list[JobResult]:
    """Restore every input (files, or the videos and images of folders) into ``output_dir`` on one
    engine (this machine's, or a cluster's); returns a result per input, in order. ``report``
    hears each result as it comes."""
    jobs = [(source, output_dir / output_name(relative, batch.name))
            for source, relative in find_inputs(inputs, batch.recursive)]
    if not jobs:
        raise UsageError(f"no videos or images in {', '.join(map(str, inputs))}")
    outputs = [out for _, out in jobs]
    clash = next((out for out in outputs if outputs.count(out) > 1), None)
    if clash is not None:
        raise UsageError(f"two inputs would both be written to {clash}; use --name with a template that tells "
                         f"them apart")
    frames = {}
    for source, _ in jobs:  # for the progress bar only: a file that cannot be probed fails in its turn
        try:
            frames[source] = 1 if source.suffix.lower() in IMAGE_EXTENSIONS else probe(source).frames or 0
        except Exception:
            frames[source] = 0
    _make_folder(output_dir)
    engine.check([source for source, _ in jobs], output_dir)
    if job.tracks_out is not None:
        _make_folder(job.tracks_out)
    # --compile auto decides on the whole batch's work, less the outputs --skip-existing leaves alone.
    engine.planned_frames = sum(frames[s] for s, out in jobs if not (batch.skip_existing and out.exists()))
    bar = progress_bar(f"restoring {len(jobs)} files", total=sum(frames.values()), unit="frame",
                       disable=not progress)
    counts = {"finished": 0, "faces": 0}
    lock = threading.Lock()  # the jobs' threads share the bar and the report

    def run(source: Path, output: Path) -> JobResult:
        result, written = JobResult(source, output), [0]

        def on_frame(count: int, found: int) -> None:
            with lock:
                written[0] += count
                counts["faces"] += found
                bar.update(count)
                bar.set_postfix(files=f"{counts['finished']}/{len(jobs)}", faces=counts["faces"], refresh=False)

        if batch.skip_existing and output.exists():
            result.skipped = True
        else:
            try:
                output.parent.mkdir(parents=True, exist_ok=True)
                tracks = job.tracks_out / output.with_suffix(".json").name if job.tracks_out else None
                result.summary = engine.restore(source, output, dataclasses.replace(job, tracks_out=tracks),
                                                on_frame=on_frame, whole_photos=True)
            except Exception as exc:  # this file's failure; the other files are other jobs
                result.error = error_line(exc)
        with lock:
            counts["finished"] += 1
            bar.update(frames[source] - written[0])  # a file skipped or ended early counts as done
            if report is not None:
                report(result)
        return result

    threads = ThreadPoolExecutor(max_workers=engine.parallel_jobs(batch.jobs), thread_name_prefix="job")
    futures = [threads.submit(run, source, output) for source, output in jobs]
    try:
        return [future.result() for future in futures]
    except BaseException:  # Ctrl-C: the files not started stay undone, the running ones stop and leave nothing
        for future in futures:
            future.cancel()
        engine.interrupt()
        _wait_through_interrupts(futures)
        raise
    finally:
        threads.shutdown(wait=False)
        bar.close()


def _wait_through_interrupts(futures: list[Future]) -> None:
    """Wait until every started job has stopped, even through another Ctrl-C: a job still running
    when the process exits would leave its partial output."""
    while True:
        try:
            wait(futures)
            return
        except KeyboardInterrupt:
            continue
