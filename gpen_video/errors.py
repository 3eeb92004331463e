"""How an error reaches the user: as one line."""

from __future__ import annotations


def error_line(exc: BaseException) -> str:
    """An error as the one line a user is shown: its message's first line, else its kind."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
