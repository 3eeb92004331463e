"""What the tool says on the terminal besides its progress bars: its own notes and warnings, one
line each, and the libraries' logs kept to their errors. The command and the desk set it up."""

from __future__ import annotations

import logging

#: The tool's own log: its notes and warnings, each a line of its own.
OURS = logging.getLogger("gpen_video")


def configure_logging(quiet: bool) -> None:
    """The tool's notes (unless ``quiet``) and warnings on stderr, as ``gpen-video: ...`` lines;
    the libraries' own logs (NVIDIA's video library announces its driver on every run) only when
    they are errors, and named as theirs."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("gpen-video: %(message)s"))
    OURS.handlers[:] = [handler]
    OURS.propagate = False
    OURS.setLevel(logging.WARNING if quiet else logging.INFO)
    # Filtered on the handler too: a library may set its own logger's level (NVIDIA's does), and
    # its records then reach the root's handlers whatever the root's level is.
    libraries = logging.StreamHandler()
    libraries.setLevel(logging.ERROR)
    libraries.setFormatter(logging.Formatter("gpen-video: %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [libraries]
    root.setLevel(logging.ERROR)
