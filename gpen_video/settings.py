"""Named settings: options saved under a name from the desk's page, which the command line takes
too (``--settings NAME``, its own flags winning), kept as JSON under
``$GPEN_VIDEO_HOME/settings/``. They hold how a clip is restored and encoded, not the engine's
devices and models (``options.ENGINE_FIELDS``) nor a clip's own tracks and range."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

from .errors import OutputError, UsageError, failures_as
from .media.outputs import write_atomically
from .model.downloads import cache_dir
from .options import ENGINE_FIELDS, RestoreOptions, flag_of

#: A name a settings file may have: it is the file's name too.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}")
#: Fields of a clip of its own: chosen per clip, never saved.
PER_CLIP = ("tracks", "start", "end")
_HINTS = typing.get_type_hints(RestoreOptions)
#: The options settings may hold.
SAVABLE = tuple(spec.name for spec in dataclasses.fields(RestoreOptions)
                if spec.name not in ENGINE_FIELDS + PER_CLIP and "Path" not in str(_HINTS[spec.name]))


def settings_dir() -> Path:
    return cache_dir() / "settings"


def _path(name: str) -> Path:
    if not NAME.fullmatch(name):
        raise UsageError(f"settings names are letters, digits, spaces, dots, dashes and underscores: {name!r}")
    return settings_dir() / f"{name}.json"


def saved_settings() -> list[str]:
    """The names of the settings saved so far."""
    return sorted(path.stem for path in settings_dir().glob("*.json")) if settings_dir().is_dir() else []


def save_settings(name: str, values: dict[str, typing.Any]) -> Path:
    """``values`` saved as ``name`` (replacing what it held), checked as the command line checks them."""
    path = _path(name)
    unknown = sorted(set(values) - set(SAVABLE))
    if unknown:
        raise UsageError(f"settings hold how a clip is restored and encoded, not {', '.join(unknown)}")
    dataclasses.replace(RestoreOptions(), **values)
    with failures_as(OutputError, f"cannot save the settings {name!r}"):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, (json.dumps(values, indent=1, sort_keys=True) + "\n").encode())
    return path


def load_settings(name: str) -> dict[str, typing.Any]:
    """The values saved as ``name``, checked again (a file edited by hand must not pass unseen)."""
    path = _path(name)
    if not path.is_file():
        saved = ", ".join(saved_settings()) or "none yet"
        raise UsageError(f"no settings are saved as {name!r} (saved: {saved})")
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"the settings {name!r} cannot be read ({path}: {exc})") from None
    if not isinstance(values, dict) or set(values) - set(SAVABLE):
        names = ", ".join(flag_of(spec) for spec in dataclasses.fields(RestoreOptions) if spec.name in SAVABLE)
        raise UsageError(f"the settings {name!r} ({path}) hold other than options of {names}")
    dataclasses.replace(RestoreOptions(), **values)
    return values
