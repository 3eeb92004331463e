"""The desk's render queue, kept in SQLite under ``GPEN_VIDEO_HOME``: renders run one at a time
on the desk's engine, each encoded in segments kept beside its output (``--resume``), so that
after a restart the queue is still there and a render that was cut off goes on from its last
finished segment. A file that fails is marked with its one line, and the queue goes on."""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import GpenVideoError, UsageError, error_line
from ..options import JobOptions, RestoreOptions
from ..pipeline.report import file_record
from ..pipeline.summary import Summary
from ..settings import PER_CLIP, SAVABLE

log = logging.getLogger(__name__)

SCHEMA = """CREATE TABLE IF NOT EXISTS renders (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    input TEXT NOT NULL,
    output TEXT NOT NULL,
    settings TEXT NOT NULL,          -- the page's options, as JSON
    state TEXT NOT NULL,             -- queued, running, done or failed
    total INTEGER,                   -- the input's frames, where known
    record TEXT,                     -- the outcome, as --report writes it (JSON)
    added REAL NOT NULL,
    finished REAL);
CREATE TABLE IF NOT EXISTS watched (   -- a watch folder's files, each version taken once
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    modified INTEGER NOT NULL,
    PRIMARY KEY (path, size, modified))"""
#: The options a render may bring (the page's, or saved settings); the others are the desk's (the command's).
SETTINGS = SAVABLE + PER_CLIP
#: How every render is written: in segments beside its output, which a cut-off render goes on from.
RESUMABLE = JobOptions(resume=True)
#: A restored file's name beside its input: ``clip.mp4`` -> ``clip.restored.mp4`` (``-2`` and on if taken).
RESTORED = "{stem}.restored{suffix}"

Render = Callable[[Path, Path, RestoreOptions, JobOptions, Callable[[int, int], None]], Summary]


def output_for(wanted: Path, taken: set[str]) -> Path:
    """``wanted``, or where no file or queued render is yet: ``wanted`` numbered ``-2`` and on."""
    number = 1
    while True:
        candidate = wanted.with_stem(f"{wanted.stem}-{number}") if number > 1 else wanted
        if not candidate.exists() and str(candidate) not in taken:
            return candidate
        number += 1


class RenderQueue:
    """The queue in ``database``, of the renders whose inputs ``owns`` (this desk's folders),
    run by ``render`` with the desk's ``options`` and each render's own settings."""

    def __init__(self, database: Path, options: RestoreOptions, owns: Callable[[Path], bool],
                 render: Render) -> None:
        database.parent.mkdir(parents=True, exist_ok=True)
        self.options = options
        self.owns = owns
        self.render = render
        self._db = sqlite3.connect(database, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._done: dict[int, int] = {}  # frames written so far, of the render running
        self._closing = False
        # A render left running was cut off (the desk stopped): it runs again, from its last segment.
        self._db.execute("UPDATE renders SET state = 'queued' WHERE state = 'running'")
        self._thread = threading.Thread(target=self._serve, name="render queue", daemon=True)
        self._thread.start()

    def options_of(self, settings: dict) -> RestoreOptions:
        """The desk's options with a render's settings, checked as the command line checks them."""
        unknown = set(settings) - set(SETTINGS)
        if unknown:
            raise UsageError(f"a render takes only {', '.join(SETTINGS)}; not {', '.join(sorted(unknown))}")
        given = dict(settings)
        if given.get("tracks") is not None:
            given["tracks"] = tuple(given["tracks"])
        return dataclasses.replace(self.options, **given)

    def add(self, input: Path, settings: dict, frames: int | None, into: Path | None = None) -> int:
        """Queue ``input`` with ``settings`` (checked now, so that a wrong one is refused at once),
        restored beside it (:data:`RESTORED`), or under its own name into the folder ``into``."""
        self.options_of(settings)
        wanted = (into / input.name if into is not None
                  else input.with_name(RESTORED.format(stem=input.stem, suffix=input.suffix)))
        with self._lock:
            taken = {row[0] for row in self._db.execute("SELECT output FROM renders WHERE state IN ('queued', "
                                                         "'running')")}
            return self._insert(input, output_for(wanted, taken), settings, "queued", frames, None)

    def refuse(self, input: Path, output: Path, settings: dict, error: str) -> int:
        """A file that could not be queued (a watch folder's unreadable one), listed as failed with its line."""
        with self._lock:
            return self._insert(input, output, settings, "failed", None, file_record(input, output, error=error))

    def _insert(self, input: Path, output: Path, settings: dict, state: str, frames: int | None,
                record: dict | None) -> int:
        cursor = self._db.execute(
            "INSERT INTO renders (input, output, settings, state, total, record, added, finished) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (str(input), str(output), json.dumps(settings), state, frames, json.dumps(record) if record else None,
             time.time(), time.time() if record else None))
        self._wake.notify_all()
        return int(cursor.lastrowid)

    def take_once(self, path: Path, size: int, modified: int) -> bool:
        """Whether this version of a watched file is new (and from now on, taken)."""
        with self._lock:
            cursor = self._db.execute("INSERT OR IGNORE INTO watched (path, size, modified) VALUES (?, ?, ?)",
                                      (str(path), size, modified))
            return cursor.rowcount == 1

    def renders(self) -> list[dict]:
        """Every render of this desk's folders, the latest first, with its progress."""
        rows = self._db.execute("SELECT id, input, output, settings, state, total, record, added, finished "
                                "FROM renders ORDER BY id DESC").fetchall()
        found = []
        for id, input, output, settings, state, total, record, added, finished in rows:
            if not self.owns(Path(input)):
                continue
            outcome = json.loads(record) if record else {}
            done = self._done.get(id, 0) if state == "running" else outcome.get("frames") or 0
            found.append({"id": id, "input": Path(input), "output": Path(output), "settings": json.loads(settings),
                          "state": state, "total": outcome.get("frames") or total, "done": done,
                          "record": outcome or None, "added": added, "finished": finished})
        return found

    def close(self, interrupt: Callable[[], None]) -> None:
        """Stop taking renders, ``interrupt`` the one running (it goes on when a queue on this
        database starts again), and wait until it has stopped."""
        with self._lock:
            self._closing = True
            self._wake.notify_all()
        interrupt()
        self._thread.join()

    def _next(self) -> tuple[int, Path, Path, dict] | None:
        """The oldest queued render of this desk's, marked running; None once the queue closes."""
        with self._lock:
            while not self._closing:
                for id, input, output, settings in self._db.execute(
                        "SELECT id, input, output, settings FROM renders WHERE state = 'queued' ORDER BY id"):
                    if self.owns(Path(input)):
                        self._db.execute("UPDATE renders SET state = 'running' WHERE id = ?", (id,))
                        self._done[id] = 0
                        return id, Path(input), Path(output), json.loads(settings)
                self._wake.wait(timeout=2.0)
        return None

    def _serve(self) -> None:
        while (taken := self._next()) is not None:
            id, input, output, settings = taken

            def count(frames: int, faces: int, id: int = id) -> None:
                self._done[id] = self._done.get(id, 0) + frames

            try:
                summary = self.render(input, output, self.options_of(settings), RESUMABLE, count)
                record, state = file_record(input, output, summary), "done"
            except GpenVideoError as exc:
                record, state = file_record(input, output, error=error_line(exc)), "failed"
            except Exception as exc:  # one file's bug must not stop the others
                if self._closing:  # cut off by the desk stopping: it goes on next time
                    return
                log.exception("rendering %s failed", input)
                record, state = file_record(input, output, error=f"the render failed: {exc}"), "failed"
            except KeyboardInterrupt:
                return
            if self._closing and state == "failed":
                return  # interrupted as the desk stopped: left running, resumed next time
            with self._lock:
                self._db.execute("UPDATE renders SET state = ?, record = ?, finished = ? WHERE id = ?",
                                 (state, json.dumps(record), time.time(), id))
                self._done.pop(id, None)
