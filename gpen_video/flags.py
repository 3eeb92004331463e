"""The command line's flags, made from the option fields (options.py): one flag per field with
its help, type, choices, default and range, and argparse without abbreviations, whose unknown
option gets one line naming the nearest known one. ``gpen-video`` and ``gpen-video ui`` share them."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import textwrap
import typing
from pathlib import Path

from .errors import UsageError
from .options import BatchOptions, JobOptions, RestoreOptions, flag_of, value_type
from .values import Range

METAVARS = {Path: "PATH", int: "N", float: "X", str: "NAME"}


def help_of(spec: dataclasses.Field, choices: tuple[str, ...] | None) -> str:
    """The field's help with its choices, its default (where the text does not say it already)
    and its allowed range: every option says what it takes and what it is when not given."""
    meta = spec.metadata
    notes = [f"one of {', '.join(choices)}"] if choices else []
    if isinstance(meta["check"], Range):
        notes.append(meta["check"].describe())
    if spec.default is not None and spec.default is not False and "default" not in meta["help"]:
        notes.append(f"default: {spec.default}")
    return meta["help"] + (f" ({'; '.join(notes)})" if notes else "")


def add_option_flags(parser: argparse.ArgumentParser, groups: dict[str, argparse._ArgumentGroup], owner: type,
                     leave_out: tuple[str, ...] = ()) -> None:
    """One flag per field of ``owner`` (options.py), with its help, type, choices and default;
    none for the fields named in ``leave_out``."""
    for spec in dataclasses.fields(owner):
        if spec.name in leave_out:
            continue
        meta = spec.metadata
        group = groups.setdefault(meta["group"], parser.add_argument_group(meta["group"]))
        kind = value_type(owner, spec)
        settings: dict = {"dest": spec.name, "default": spec.default,
                          "help": help_of(spec, meta["choices"] if kind is not bool else None)}
        if kind is bool:
            settings["action"] = "store_true"
        else:
            settings["type"] = meta["parse"] or kind
            settings["choices"] = meta["choices"]
            settings["metavar"] = meta["metavar"] or METAVARS.get(kind, "VALUE")
        group.add_argument(flag_of(spec), **settings)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help lines wrapped between words only: a model name such as GPEN-BFR-512 stays whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """argparse, without abbreviations (``--strengt`` is not ``--strength``), and with one line
    for an unknown option, naming the nearest known one."""

    def error(self, message: str) -> typing.NoReturn:
        unknown = re.fullmatch(r"unrecognized arguments: (.*)", message)
        if unknown:
            flags = [a for a in unknown.group(1).split() if a.startswith("-")]
            known = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
            if flags:
                near = difflib.get_close_matches(flags[0].split("=")[0], known, n=1)
                hint = f"; did you mean {near[0]}?" if near else f"; {self.prog} --help lists the options"
                self.exit(2, f"gpen-video: error: unknown option {flags[0]}{hint}\n")
        super().error(message)


def options_of(args: argparse.Namespace) -> tuple[RestoreOptions, JobOptions, BatchOptions]:
    """The options the parsed flags set, checked (a bad value is a UsageError)."""
    return tuple(owner(**{f.name: getattr(args, f.name) for f in dataclasses.fields(owner)})
                 for owner in (RestoreOptions, JobOptions, BatchOptions))


def add_settings_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", metavar="NAME",
                        help="start from the options saved under NAME from the desk's page (gpen-video ui); the "
                             "flags given here win")


def parse_with_settings(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The flags of ``argv``; with ``--settings NAME``, over the values saved as NAME instead of
    the defaults. A name that was never saved is a usage error, of one line."""
    args = parser.parse_args(argv)
    if args.settings is not None:
        from .settings import load_settings

        try:
            parser.set_defaults(**load_settings(args.settings))
        except UsageError as exc:
            parser.exit(2, f"gpen-video: error: {exc}\n")
        args = parser.parse_args(argv)
    return args
