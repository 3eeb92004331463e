"""The stage runtime: a job declares its stages, and this runs each in a thread of its own and
owns what every stage shares. That is the stop flag and the first error; the queues between
the stages, emptied on a stop; waits that give up when the job stops; each stage's busy time;
and when the job's first picture left each stage. Ctrl-C in the caller's thread stops the
stages too, and every stage has ended before the job's files are closed."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

_POLL = 0.1  # seconds between checks of the stop flag while a thread waits
#: Where a job's first picture has got to, in the order it gets there (see StageRuntime.milestones).
MILESTONES = ("started", "decoded", "detected", "tracked", "restored", "written")


class Stopped(Exception):
    """Raised inside a stage when another stage failed or the user interrupted."""


class StageRuntime:
    """Runs a job's stages (:meth:`run`) and serves them while they run."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self.busy: dict[str, float] = {}  # seconds each stage (or worker kind) spent working
        self._busy_lock = threading.Lock()
        #: time.perf_counter() when the job started and when its first picture left each stage
        #: (MILESTONES; "restored" only if a face was), for the start-up report.
        self.milestones: dict[str, float] = {}
        self._queues: list[queue.Queue] = []
        # Stage threads running, counted by the stages themselves: an interrupted Thread.join()
        # can report a thread as finished while it still runs, and a Ctrl-C inside Thread.start()
        # leaves unknown whether the thread exists. Once shutting down, a stage that only then
        # begins does nothing, so the count is exact when the shut-down reads it.
        self._active = 0
        self._shutting_down = False
        self._running = threading.Condition()

    # ---- what the stages use ----------------------------------------------------------------------

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def queue(self) -> queue.Queue:
        """A queue between stages: whatever is left in it goes when the job stops."""
        self._queues.append(queue.Queue())
        return self._queues[-1]

    def get(self, q: queue.Queue) -> Any:
        """The next item of ``q``; raises Stopped once the job stops."""
        while True:
            if self._stop.is_set():
                raise Stopped
            try:
                return q.get(timeout=_POLL)
            except queue.Empty:
                continue

    def acquire(self, slots: threading.Semaphore) -> None:
        """One of ``slots``; raises Stopped once the job stops."""
        while not slots.acquire(timeout=_POLL):
            if self._stop.is_set():
                raise Stopped

    def add_busy(self, stage: str, seconds: float) -> None:
        with self._busy_lock:
            self.busy[stage] = self.busy.get(stage, 0.0) + seconds

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Counts the block's time as ``stage``'s busy time."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add_busy(stage, time.perf_counter() - start)

    def reached(self, milestone: str) -> None:
        """Note the first time the job's pictures reach ``milestone`` (later times are not kept)."""
        if milestone not in self.milestones:
            self.milestones[milestone] = time.perf_counter()

    def fail(self, error: BaseException) -> None:
        """Stop every stage; ``error`` reaches the caller of :meth:`run` (the first one does)."""
        self.errors.append(error)
        self._stop.set()

    # ---- running --------------------------------------------------------------------------------

    def run(self, stages: dict[str, Callable[[], None]], on_stop: Callable[[], None]) -> float:
        """Run ``stages`` (name -> body), each in a thread, until all have returned; the seconds
        they took. On the first error or an interrupt every stage stops, ``on_stop`` lets go of
        what the job holds once none runs, and the error propagates."""
        start = time.perf_counter()
        self.milestones["started"] = start
        threads = [threading.Thread(target=self._guarded(body), name=name) for name, body in stages.items()]
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(timeout=_POLL)
        except BaseException:  # Ctrl-C lands in the caller's thread: stop the stages, then let it propagate
            self._shut_down(threads, on_stop)
            raise
        if self.errors:
            self._shut_down(threads, on_stop)
            raise self.errors[0]
        return time.perf_counter() - start

    def _guarded(self, stage: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            with self._running:
                if self._shutting_down:
                    return
                self._active += 1
            try:
                stage()
            except Stopped:
                pass
            except BaseException as exc:  # every failure must stop the other stages and reach the caller
                self.fail(exc)
            finally:
                with self._running:
                    self._active -= 1
                    self._running.notify_all()
        return run

    def _shut_down(self, threads: list[threading.Thread], on_stop: Callable[[], None]) -> None:
        """Stop every stage and wait for it, even through another Ctrl-C, before the files go:
        a stage still inside FFmpeg when its container closes would crash the process."""
        self._stop.set()
        while True:
            try:
                with self._running:
                    self._shutting_down = True
                    while self._active:
                        self._running.wait(timeout=_POLL)
                break
            except KeyboardInterrupt:
                continue
        for t in threads:
            if t.ident is not None:
                t.join()
        on_stop()
        for q in self._queues:
            while not q.empty():
                q.get_nowait()
