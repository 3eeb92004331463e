"""``gpen-video ui --watch IN --into OUT``: the round trip with an editing application, which
renders into IN and imports from OUT. Every video or photo that appears in IN is queued for OUT,
under its own name, with the saved settings, once whole: when its size and modification time
have held still for :data:`STEADY` seconds (an export or a copy still under way keeps changing
them). Each version of a file is taken once, also across restarts (the queue's database keeps
them); a file that cannot be read is listed in the queue as failed, and the others go on."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from ..errors import GpenVideoError, error_line
from ..media.images import IMAGE_EXTENSIONS
from ..pipeline.batch import VIDEO_EXTENSIONS
from .library import estimated_frames
from .queue import RenderQueue

log = logging.getLogger(__name__)
#: Seconds a file's size and modification time must hold still before it is taken.
STEADY = 3.0
#: Seconds between looks at the folder.
POLL = 0.5


class WatchFolder:
    """Watches ``source`` on a thread of its own, queueing into ``target`` with ``settings``."""

    def __init__(self, source: Path, target: Path, settings: dict, queue: RenderQueue) -> None:
        self.source, self.target, self.settings, self.queue = source, target, settings, queue
        self._seen: dict[Path, tuple[int, int, float]] = {}  # size, modified, since when
        self._taken: set[tuple[Path, int, int]] = set()  # versions taken (or found taken before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"watch {source}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(POLL):
            try:
                self.look()
            except OSError as exc:  # the folder gone for a moment (a network share): looked at again
                log.warning("cannot read the watch folder %s: %s", self.source, exc)

    def look(self) -> None:
        """One look at the folder: files whole since the last looks are queued."""
        now = time.monotonic()
        present = set()
        for path in sorted(self.source.iterdir()):
            if path.name.startswith(".") or not path.is_file():
                continue
            if path.suffix.lower() not in VIDEO_EXTENSIONS | IMAGE_EXTENSIONS:
                continue
            present.add(path)
            stat = path.stat()
            version = (stat.st_size, stat.st_mtime_ns)
            seen = self._seen.get(path)
            if seen is None or seen[:2] != version:
                self._seen[path] = (*version, now)
            elif now - seen[2] >= STEADY and (path, *version) not in self._taken:
                self._taken.add((path, *version))
                if self.queue.take_once(path, *version):
                    self._take(path)
        for gone in set(self._seen) - present:
            del self._seen[gone]

    def _take(self, path: Path) -> None:
        try:
            self.queue.add(path, self.settings, estimated_frames(path), into=self.target)
        except GpenVideoError as exc:
            self.queue.refuse(path, self.target / path.name, self.settings, error_line(exc))
