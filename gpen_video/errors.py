"""How a failed run reaches the user: every error a user can act on is a :class:`GpenVideoError`,
whose message is one line. The CLI prints that line and exits 1; anything else is a bug in the
tool and keeps its traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class GpenVideoError(Exception):
    """An error the user can act on: bad options, an unreadable input, an output that cannot be
    written, unusable weights. Its message is one line."""


class UsageError(GpenVideoError, ValueError):
    """Options that cannot work together or are out of range."""


class InputError(GpenVideoError):
    """The input cannot be read as a video (or image)."""


class OutputError(GpenVideoError):
    """The output cannot be written as asked."""


class OutputBusyError(OutputError):
    """Another job holds this OUTPUT, or OUTPUT appeared while this job ran."""


class WeightsError(GpenVideoError):
    """A checkpoint is missing, cannot be downloaded, or is not the network it should be."""


class PrecisionError(GpenVideoError):
    """Half-precision GPEN failed a guard, and ``--strict`` refuses the slower fp32."""


class OutsideFolders(GpenVideoError):
    """The editor's desk was asked for a path outside the folders it was given."""


class WorkerDied(GpenVideoError):
    """A worker process ended while it held work."""


class WorkerFailed(GpenVideoError):
    """A request failed inside a worker process: the error it raised there."""


def error_line(exc: BaseException) -> str:
    """An error as the one line a user is shown: its message's first line, else its kind."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def reason(exc: BaseException) -> str:
    """Why a system or FFmpeg call failed, as the system says it ("No space left on device")."""
    return getattr(exc, "strerror", None) or str(exc)


@contextlib.contextmanager
def failures_as(kind: type[GpenVideoError], doing: str,
                caught: tuple[type[BaseException], ...] = (OSError,)) -> Iterator[None]:
    """Inside the block, a failure of the ``caught`` kinds (a full disk, a lost mount, a file
    FFmpeg cannot read) becomes ``kind``, one line saying what was being done and why."""
    try:
        yield
    except caught as exc:
        raise kind(f"{doing}: {reason(exc)}") from None
