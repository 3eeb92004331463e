"""CPU seconds per thread while a block of code runs, grouped by what the thread is: a Python
thread by its name, a native one (FFmpeg, x264, CUDA, OpenMP) by the name the OS gives it.

Threads come and go (the encoder's die with its file), so a sampler reads /proc/self/task every
``interval`` seconds and keeps each thread's last reading; a thread's final ``interval`` may be lost.
"""

from __future__ import annotations

import os
import re
import threading
from collections import defaultdict
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _read(task: Path) -> tuple[str, float] | None:
    try:
        stat = (task / "stat").read_text()
    except OSError:  # the thread ended between listing and reading
        return None
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    return name, (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


class ThreadCPU:
    """``with ThreadCPU() as cpu: ...`` then ``cpu.by_group()``: CPU seconds per thread group."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.start: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}
        # Every Python thread seen, by OS thread id: a Python thread leaves threading.enumerate()
        # just before its OS thread ends, and a sample in between must still know its name.
        self.python_names: dict[int, str] = {}
        self.done = threading.Event()

    def _sample(self) -> None:
        self.python_names.update((t.native_id, t.name) for t in threading.enumerate())
        for task in Path("/proc/self/task").iterdir():
            reading = _read(task)
            if reading is not None:
                tid = int(task.name)
                name = self.python_names.get(tid) or re.sub(r"\d+$", "#", reading[0])
                self.last[tid] = (name, reading[1])

    def _run(self) -> None:
        while not self.done.wait(self.interval):
            self._sample()

    def __enter__(self) -> ThreadCPU:
        self._sample()
        self.start = {tid: cpu for tid, (_, cpu) in self.last.items()}
        self.thread = threading.Thread(target=self._run, name="thread-cpu", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sample()
        self.done.set()
        self.thread.join()

    def by_group(self) -> dict[str, float]:
        groups: dict[str, float] = defaultdict(float)
        for tid, (name, cpu) in self.last.items():
            groups[name] += cpu - self.start.get(tid, 0.0)
        return {k: round(v, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1]) if v > 0}

    def busiest(self) -> dict[str, float]:
        """The CPU seconds of each group's busiest thread: one near the run's length is a serial
        bottleneck, however idle the group's other threads are."""
        most: dict[str, float] = defaultdict(float)
        for tid, (name, cpu) in self.last.items():
            most[name] = max(most[name], cpu - self.start.get(tid, 0.0))
        return {k: round(v, 2) for k, v in sorted(most.items(), key=lambda kv: -kv[1]) if v > 0}
