"""Progress: a bar redrawn in place on a terminal; where stderr is a log file or a pipe (a render
manager, ``nohup``), plain lines instead of hundreds of redraws: one when the first frame is done,
then one every PLAIN_EVERY seconds, and one at the end."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

#: Seconds between the plain lines written where stderr is not a terminal.
PLAIN_EVERY = 10.0


class PlainProgress:
    """What the pipeline uses of a tqdm bar (update, set_postfix, close), as plain lines."""

    def __init__(self, label: str, total: int | None, initial: int = 0, unit: str = "frame",
                 disable: bool = False) -> None:
        self.label, self.total, self.done, self.unit, self.disable = label, total, initial, unit, disable
        self.started = time.perf_counter()
        self.last: float | None = None  # when the last line was written
        self.first = (self.started, initial)  # when the first line was written, and the count then
        self.shown = initial  # the count the last line gave
        self.postfix: dict[str, object] = {}

    def update(self, count: int = 1) -> None:
        self.done += count
        now = time.perf_counter()
        if self.last is None or now - self.last >= PLAIN_EVERY:
            self._line(now)

    def set_postfix(self, refresh: bool = False, **values: object) -> None:
        self.postfix = values

    def close(self) -> None:
        """The last line, with the final count (none where no frame came since the last line)."""
        if self.last is not None and self.done != self.shown:
            self._line(time.perf_counter())
        self.disable = True

    def _line(self, now: float) -> None:
        first = self.last is None
        self.last, self.shown = now, self.done
        if self.disable:
            return
        extra = "".join(f", {key} {value}" for key, value in self.postfix.items())
        of = f"/{self.total}" if self.total else ""
        if first:
            self.first = (now, self.done)
            said = f"the first after {now - self.started:.1f} s"
        else:
            since, done = self.first
            said = f"{(self.done - done) / (now - since):.1f} {self.unit}s/s" if now > since else ""
        print(f"{self.label}: {self.done}{of} {self.unit}s, {said}{extra}", file=sys.stderr, flush=True)


def progress_bar(label: str, total: int | None, initial: int = 0, unit: str = "frame",
                 disable: bool = False) -> tqdm | PlainProgress:
    """A bar named ``label`` on stderr: tqdm's on a terminal, else plain lines."""
    if sys.stderr.isatty():
        return tqdm(desc=label, total=total, initial=initial, unit=unit, disable=disable, dynamic_ncols=True)
    return PlainProgress(label, total, initial, unit, disable)
