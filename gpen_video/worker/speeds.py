"""How fast GPEN has run on this machine, eager and compiled, as real jobs measured it: kept in
``$GPEN_VIDEO_HOME`` so that ``--compile auto`` decides from this machine's own figures. Which path
is faster differs between GPUs (compiled GPEN ran 1.15-1.49 x the eager speed in a pipeline on one
H100, and slower than eager on an H200, BENCHMARKS.md): a fixed rule would take the slower path
on one of them."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from ..model.downloads import cache_dir
from ..options import RestoreOptions

log = logging.getLogger(__name__)

SPEEDS_FILE = "gpen-speeds.json"
#: Before a machine has measured both paths: what compiling saves per face and what it costs
#: before the first frame, with a warm compile cache and an empty one (GPEN alone at 897 against
#: 699 faces/s, runs AS and BQ): it pays from 16 000 faces warm and 75 000 cold.
PRESUMED_SAVING = 0.32e-3
PRESUMED_COMPILE = {"warm": 5.12, "cold": 24.0}
#: Faces a measurement spans before it is kept; each later one spans twice as many, up to the
#: last, so that a long job writes its figure a handful of times and the latest is its steadiest.
FIRST_SPAN = 64
LAST_SPAN = 16384


@dataclass(frozen=True)
class Measured:
    """One machine's figures for one GPEN setup: seconds per face eager and compiled, and seconds
    a compile took before GPEN was ready, with the compile cache warm and cold (None: unmeasured)."""

    eager: float | None = None
    compiled: float | None = None
    compile_warm: float | None = None
    compile_cold: float | None = None

    def compile_pays(self, faces: int | None, warm_cache: bool) -> bool:
        """Whether compiling saves more time than it costs for ``faces`` of work (None: unknown,
        taken as long). Once both paths are measured here, a compile that was not faster is never
        chosen; until then the presumed saving stands in for the measured one."""
        if self.eager is not None and self.compiled is not None:
            saving = self.eager - self.compiled
            if saving <= 0:
                return False
        else:
            saving = PRESUMED_SAVING
        cost = self.compile_warm if warm_cache else self.compile_cold
        if cost is None:
            cost = PRESUMED_COMPILE["warm" if warm_cache else "cold"]
        return faces is None or faces * saving >= cost


def setup_key(options: RestoreOptions, device: str) -> str:
    """What a measurement holds for: the GPU, torch, the checkpoint, the precision and the batch."""
    gpen = Path(options.weights).name if options.weights is not None else options.model
    return (f"{torch.cuda.get_device_name(torch.device(device))} | torch {torch.__version__} | {gpen} | "
            f"{options.precision_on(device)} | batch {options.batch_size}")


def _read() -> dict[str, dict]:
    path = cache_dir() / SPEEDS_FILE
    try:
        book = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:  # unreadable: measured again from scratch, never fatal
        log.debug("ignoring %s: %s", path, exc)
        return {}
    return book if isinstance(book, dict) else {}


def _entry(book: dict[str, dict], key: str) -> Measured:
    """``key``'s figures in ``book``, leaving out whatever is not a positive number."""
    entry = book.get(key)
    if not isinstance(entry, dict):
        return Measured()
    fields = Measured.__dataclass_fields__
    return Measured(**{name: float(value) for name, value in entry.items()
                       if name in fields and isinstance(value, (int, float)) and value > 0})


def measured(key: str) -> Measured:
    """This machine's figures for ``key`` (all None where nothing was measured yet)."""
    return _entry(_read(), key)


def record(key: str, **figures: float) -> None:
    """Keep ``figures`` (fields of :class:`Measured`) for ``key``, replacing earlier ones. The file
    is replaced whole, so a reader never sees half of it; a file that cannot be written costs
    only the measurement."""
    book = _read()
    book[key] = asdict(replace(_entry(book, key), **figures))
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=folder, prefix=".speeds-", suffix=".json", delete=False) as file:
            json.dump(book, file, indent=1, sort_keys=True)
        os.replace(file.name, folder / SPEEDS_FILE)
    except OSError as exc:
        log.debug("could not keep GPEN's speed in %s: %s", folder, exc)


class GpenTimer:
    """Times GPEN's calls on one GPU with CUDA events, which are read only once the GPU has passed
    them (never waited on), and keeps the seconds per face in this machine's figures."""

    def __init__(self, key: str, path: str) -> None:
        self.key = key
        self.path = path  # "eager" or "compiled"
        self._pending: list[tuple[torch.cuda.Event, torch.cuda.Event, int]] = []
        self._seconds = 0.0
        self._faces = 0
        self._span = FIRST_SPAN

    @contextlib.contextmanager
    def timing(self, faces: int) -> Iterator[None]:
        """Times GPEN's call in the block, queued for ``faces`` faces (its padded batch); a call that
        raises is not counted."""
        started = torch.cuda.Event(enable_timing=True)
        started.record()
        yield
        ended = torch.cuda.Event(enable_timing=True)
        ended.record()
        self._pending.append((started, ended, faces))
        while self._pending and self._pending[0][1].query():
            begun, done, count = self._pending.pop(0)
            self._seconds += begun.elapsed_time(done) / 1000
            self._faces += count
        if self._faces >= self._span:
            record(self.key, **{self.path: self._seconds / self._faces})
            self._seconds, self._faces = 0.0, 0
            self._span = min(2 * self._span, LAST_SPAN)
