"""``gpen-video ui FOLDER...``: serve the desk until Ctrl-C."""

from __future__ import annotations

import argparse
import dataclasses
import secrets
import sys

from ..cli import configure_logging
from ..errors import GpenVideoError, error_line
from ..flags import add_option_flags
from ..options import RestoreOptions
from .app import LOOPBACK, create_app
from .desk import Desk
from .folders import Folders

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpen-video ui", allow_abbrev=False,
        description="An editor's desk in the browser over the videos and photos in FOLDERs: it reads and "
                    "writes only inside them.")
    parser.add_argument("folders", nargs="+", metavar="FOLDER")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}: this machine only; any other "
                             "address asks every visitor for the token printed at start)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    add_option_flags(parser, {}, RestoreOptions)  # the engine's, and the defaults of every preview and render
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        folders = Folders.of(args.folders)
        options = RestoreOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RestoreOptions)})
    except GpenVideoError as exc:
        print(f"gpen-video: error: {error_line(exc)}", file=sys.stderr)
        return 1
    import uvicorn

    configure_logging(quiet=False)
    token = None if args.host in LOOPBACK else secrets.token_urlsafe(24)
    app = create_app(Desk(folders, options), args.host, token)
    address = f"[{args.host}]" if ":" in args.host else args.host
    print(f"gpen-video: the desk is at http://{address}:{args.port}/" + (f"?token={token}" if token else ""),
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
