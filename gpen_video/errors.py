"""How an error reaches the user: as one line."""

from __future__ import annotations


class InputError(RuntimeError):
    """The input cannot be read as a video (or image). The message is one line."""


def error_line(exc: BaseException) -> str:
    """An error as the one line a user is shown: its message's first line, else its kind."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
