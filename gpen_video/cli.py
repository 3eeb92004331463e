"""``gpen-video INPUT OUTPUT``: the command line."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .console import OURS, configure_logging
from .errors import GpenVideoError, UsageError, error_line
from .flags import HelpFormatter, Parser, add_option_flags, add_settings_flag, options_of, parse_with_settings
from .options import BatchOptions, JobOptions, RestoreOptions

STARTED = time.perf_counter()  # start-up is reported from here: the heavy imports come later, in functions

if TYPE_CHECKING:
    from .pipeline.batch import BatchEngine, JobResult
    from .pipeline.summary import Summary

EXAMPLES = """examples:
  gpen-video talk.mp4 talk_restored.mp4                 restore on the first GPU (or the CPU)
  gpen-video talk.mp4 out.mp4 --gpus 0,1                 split the work over two GPUs
  gpen-video old.mov out.mov --codec prores_ks           edit-friendly ProRes output
  gpen-video master.mov out.mov --strict                 refuse anything that cannot be kept
  gpen-video talk.mp4 out.mkv --codec ffv1               lossless output
  gpen-video photo.jpg photo_restored.png                one image
  gpen-video talk.mp4 out.mp4 --tracks-out faces.json    also write what was restored, frame by frame
  gpen-video talk.mp4 out.mp4 --start 1:05 --end 1:12.5  restore only that stretch; every frame is kept
  gpen-video party.mp4 --detect-only --tracks-out faces.json   list the faces and their track ids, quickly
  gpen-video party.mp4 out.mp4 --tracks 3,7              restore those two people only
  gpen-video party.mp4 out.mp4 --faces largest           restore the main person of each shot only
  gpen-video clips/ restored/ --skip-existing            every video and image in clips/, into restored/
  gpen-video a.mp4 b.mov c.jpg restored/ --name '{stem}_gpen.{ext}'
  gpen-video /nfs/clips/ /nfs/restored/ --ray auto       every file on the running Ray cluster, an actor per GPU
  gpen-video --fetch-weights --mask parse                download what such a run needs, then work offline

weights: the official GPEN models download on first use; their authors release them "for academic
and non-commercial use only". For other use, pass --weights with weights you may use.
"""


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C while the heavy modules import: nothing exists yet, so the process ends here. Raising
    instead could land in Python code that torch's C++ is running (its import registers hooks
    through pybind11), where an exception aborts the whole process with a C++ traceback."""
    print("gpen-video: interrupted; nothing was written", file=sys.stderr, flush=True)
    os._exit(130)


def _interrupt(signum: int, frame: object) -> None:
    """Stop like Ctrl-C, once: further signals must not interrupt the clean-up they asked for."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


USAGE = """gpen-video [options] INPUT OUTPUT
       gpen-video [options] INPUT... OUTDIR
       gpen-video [options] INPUT --detect-only"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="gpen-video", usage=USAGE, epilog=EXAMPLES, formatter_class=HelpFormatter,
        allow_abbrev=False,
        description="Restore the faces in a video (or photo) with GPEN; everything else is kept.")
    p.add_argument("paths", nargs="*", metavar="INPUT ... OUTPUT",
                   help="INPUT OUTPUT: a video (mp4, mov, mkv, webm, ...) or image, and where to write it (the "
                        "container follows the extension); or several inputs and/or folders, then OUTDIR; "
                        "INPUT alone with --detect-only")
    p.add_argument("--version", action="version", version=f"gpen-video {__version__}")
    groups: dict[str, argparse._ArgumentGroup] = {}
    for owner in (RestoreOptions, JobOptions, BatchOptions):
        add_option_flags(p, groups, owner)
    add_settings_flag(groups["faces"])
    run = groups.setdefault("output", p.add_argument_group("output"))
    run.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    run.add_argument("--verbose", action="store_true", help="the summary also says which decoder ran, where the "
                                                              "start-up went and how busy each stage was")
    run.add_argument("--report", type=Path, metavar="PATH",
                     help="also write what became of each file as JSON, for scripts and render managers: input, "
                          "output, result, error, frames, faces, tracks, warnings and timings (the README gives the "
                          "schema)")
    run.add_argument("--debug", action="store_true", help="show tracebacks")
    model = groups["model"]
    model.add_argument("--fetch-weights", action="store_true",
                       help="download every checkpoint a run with these options needs (GPEN for --model, the "
                            "--detector's, ParseNet's with --mask parse), say where each is, and stop: readies a "
                            "machine that will run offline. Set GPEN_VIDEO_WEIGHTS_URL to fetch from a mirror")
    return p


def is_batch(paths: list[str]) -> bool:
    """Many inputs, a folder of them, or a folder to write into (one that exists, or any path
    ending in a slash): a batch. Two paths naming a file and a new file: one job."""
    return len(paths) > 2 or Path(paths[0]).is_dir() or Path(paths[-1]).is_dir() or paths[-1].endswith(("/", os.sep))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ui"]:  # the editor's desk, an extra: gpen_video.ui
        from .ui.command import main as desk

        return desk(argv[1:])
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    signal.signal(signal.SIGTERM, _interrupted_while_starting)
    return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parse_with_settings(parser, argv)  # usage errors (exit 2) and --help before any file is read
    configure_logging(args.quiet)
    if args.fetch_weights:
        return _fetch_weights(parser, args)
    if not args.paths:
        parser.error("give an INPUT and an OUTPUT (or inputs and an OUTDIR)")
    if args.detect_only and len(args.paths) != 1:
        parser.error("--detect-only takes one INPUT and writes only --tracks-out: give no OUTPUT")
    if len(args.paths) < 2 and not args.detect_only:
        parser.error("give an INPUT and an OUTPUT (or inputs and an OUTDIR)")
    try:
        options, job, batch = options_of(args)  # checked before the heavy imports: a usage error answers at once
        if batch.ray is not None and (args.detect_only or job.preview is not None):
            raise UsageError("--ray restores files into an OUTDIR; --detect-only and --preview run here")
        if args.report is not None and not args.report.resolve().parent.is_dir():
            raise UsageError(f"--report: directory does not exist: {args.report.resolve().parent}")
        from tqdm.contrib.logging import logging_redirect_tqdm

        from .pipeline.engine import Engine

        signal.signal(signal.SIGINT, _interrupt)
        signal.signal(signal.SIGTERM, _interrupt)  # a job killed politely cleans up like Ctrl-C
        if batch.ray is not None:
            from .pipeline.cluster import ClusterEngine

            cluster = ClusterEngine(options, batch.ray, batch.ray_actors, batch.jobs)
            with logging_redirect_tqdm([OURS]), cluster:
                return _run_batch(cluster, args, job, batch)
        # Log lines through tqdm: a warning given while a bar runs (as a file ends) gets a line of its own.
        with logging_redirect_tqdm([OURS]), Engine(options, progress=not args.quiet) as engine:
            if args.detect_only:
                summary = engine.restore(Path(args.paths[0]), None, job)
                print(summary.tracks_found.table())  # the result itself, on stdout; the summary goes to stderr
            elif is_batch(args.paths):
                return _run_batch(engine, args, job, batch)
            else:
                summary = engine.restore(Path(args.paths[0]), Path(args.paths[1]), job)
    except KeyboardInterrupt:
        kept = "; finished segments are kept for --resume" if args.resume else ""
        if not args.detect_only and (is_batch(args.paths) or args.ray):
            print(f"gpen-video: interrupted; the files finished before it are kept, those under way are not{kept}",
                  file=sys.stderr)
        else:
            print(f"gpen-video: interrupted; nothing was written{kept}", file=sys.stderr)
        return 130
    except GpenVideoError as exc:
        if args.debug:
            raise
        _say_error(exc)
        if args.report is not None and not is_batch(args.paths) and args.report.resolve().parent.is_dir():
            _write_report(args.report, [_single_record(args, error=error_line(exc))])
        return 1
    if not args.quiet:
        print(summary.describe(STARTED, args.verbose), file=sys.stderr)
    if args.report is not None:
        return _write_report(args.report, [_single_record(args, summary)])
    return 0


def _say_error(exc: GpenVideoError) -> None:
    """The one line a user is shown for an error they can act on."""
    print(f"gpen-video: error: {error_line(exc)}", file=sys.stderr)


def _fetch_weights(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--fetch-weights``: the run's checkpoints into the cache, where each one is said."""
    if args.paths:
        parser.error("--fetch-weights takes no INPUT or OUTPUT: it only downloads")
    from .pipeline.fetch import fetch_needed

    try:
        options, _, _ = options_of(args)
        fetched = fetch_needed(options, progress=not args.quiet)
    except GpenVideoError as exc:
        _say_error(exc)
        return 1
    for what, path in fetched:
        print(f"{what}: {path}")
    if not fetched:
        print("nothing to fetch: every checkpoint these options need is a file given by its option")
    return 0


def _single_record(args: argparse.Namespace, summary: Summary | None = None, error: str = "") -> dict:
    from .pipeline.report import file_record

    output = Path(args.paths[1]) if len(args.paths) > 1 else None
    return file_record(Path(args.paths[0]), output, summary, error)


def _write_report(path: Path, records: list[dict]) -> int:
    """The report; or one line saying why it could not be written, and exit status 1 (the files
    themselves are done)."""
    from .pipeline.report import write_report

    try:
        write_report(path, records)
    except GpenVideoError as exc:
        _say_error(exc)
        return 1
    return 0


def _run_batch(engine: BatchEngine, args: argparse.Namespace, job: JobOptions, batch: BatchOptions) -> int:
    """Every input into OUTDIR on one engine (this machine's or a Ray cluster's); each file's result
    as it ends, a report at the end (with a cluster, a line per actor). Exit 1 when any file
    failed; an interrupt keeps the files already finished."""
    from tqdm import tqdm

    from .media.containers import CONTAINERS
    from .media.images import IMAGE_EXTENSIONS
    from .pipeline.batch import restore_many

    *inputs, output_dir = map(Path, args.paths)
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"OUTDIR is a file, not a folder: {output_dir}")
    if not output_dir.exists() and output_dir.suffix.lower() in {*CONTAINERS, *IMAGE_EXTENSIONS}:
        raise UsageError(f"{output_dir} looks like a file, but with several inputs or a folder of them the last "
                         f"path is the folder to write into")
    quiet = args.quiet

    def report(result: JobResult) -> None:
        if result.error:
            tqdm.write(f"gpen-video: error: {result.input}: {result.error}", file=sys.stderr)
        elif not quiet:
            tqdm.write(result.describe(), file=sys.stderr)

    started = time.perf_counter()
    results = restore_many(engine, inputs, output_dir, batch, job, progress=not quiet, report=report)
    failed = [r for r in results if r.error]
    reported = 0
    if args.report is not None:
        from .pipeline.report import file_record

        reported = _write_report(args.report, [file_record(r.input, r.output, r.summary, r.error, r.skipped)
                                                for r in results])
    if not quiet:
        print(f"{len(results)} file(s) in {time.perf_counter() - started:.1f} s: "
              f"{len(results) - len(failed)} done, {len(failed)} failed", file=sys.stderr)
        for result in results:
            print(f"  {result.describe()}", file=sys.stderr)
        if batch.ray is not None:
            print(engine.describe(), file=sys.stderr)
    return 1 if failed or reported else 0


if __name__ == "__main__":
    sys.exit(main())
