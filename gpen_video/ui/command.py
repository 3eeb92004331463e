"""``gpen-video ui FOLDER...``: serve the desk until Ctrl-C."""

from __future__ import annotations

import argparse
import dataclasses
import secrets
import sys
from pathlib import Path

from ..console import configure_logging
from ..errors import GpenVideoError, error_line
from ..flags import Parser, add_option_flags, add_settings_flag, parse_with_settings
from ..options import RestoreOptions, flag_of
from ..settings import PER_CLIP, load_settings
from .app import LOOPBACK, create_app
from .desk import Desk
from .folders import Folders

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


class _ChosenPerClip(argparse.Action):
    """A flag of a clip's own (its range, its tracks): refused in one line, as the page sets it for each clip."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option: str | None = None) -> None:
        parser.exit(2, f"gpen-video: error: {option} is set for each clip on the desk's page, not for the "
                       f"whole desk\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="gpen-video ui", allow_abbrev=False,
        description="An editor's desk in the browser over the videos and photos in FOLDERs: it reads and "
                    "writes only inside them.")
    parser.add_argument("folders", nargs="*", metavar="FOLDER")
    watch = parser.add_argument_group("watch folder")
    watch.add_argument("--watch", type=Path, metavar="IN",
                       help="restore every video and photo that appears in IN, once whole, into --into (both are "
                            "folders of the desk); with --settings, as saved under that name")
    watch.add_argument("--into", type=Path, metavar="OUT", help="where --watch writes, under each file's own name")
    add_settings_flag(watch)
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}: this machine only; any other "
                             "address asks every visitor for the token printed at start)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    # The engine's, and the defaults of every preview and render; a clip's tracks and range are chosen on the page.
    add_option_flags(parser, {}, RestoreOptions, leave_out=PER_CLIP)
    for spec in dataclasses.fields(RestoreOptions):
        if spec.name in PER_CLIP:
            parser.add_argument(flag_of(spec), action=_ChosenPerClip, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parse_with_settings(parser, argv)
    if (args.watch is None) != (args.into is None):
        parser.error("--watch IN and --into OUT go together")
    if not args.folders and args.watch is None:
        parser.error("give the folders whose videos and photos the desk shows")
    try:
        watched = [args.watch, args.into] if args.watch is not None else []
        folders = Folders.of([*args.folders, *watched])
        options = RestoreOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RestoreOptions)
                                    if f.name not in PER_CLIP})
        saved = load_settings(args.settings) if args.settings is not None else {}
    except GpenVideoError as exc:
        print(f"gpen-video: error: {error_line(exc)}", file=sys.stderr)
        return 1
    import uvicorn

    configure_logging(quiet=False)
    token = None if args.host in LOOPBACK else secrets.token_urlsafe(24)
    watch = (args.watch.resolve(), args.into.resolve(), saved) if watched else None
    app = create_app(Desk(folders, options, watch), args.host, token)
    address = f"[{args.host}]" if ":" in args.host else args.host
    print(f"gpen-video: the desk is at http://{address}:{args.port}/" + (f"?token={token}" if token else ""),
          file=sys.stderr, flush=True)
    if watch is not None:
        print(f"gpen-video: restoring what appears in {watch[0]} into {watch[1]}"
              + (f" with the settings {args.settings!r}" if args.settings else ""), file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
