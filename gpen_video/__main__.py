"""``python -m gpen_video``: the command line, as ``gpen-video`` runs it."""

import sys

from .cli import main

sys.exit(main())
