"""The device workers' threads, shared by every job running at once.

Each device (GPU, or the CPU) has one worker thread, which serves all the jobs: any free worker
takes the next detection batch; a restoration batch goes back to the device that detected its
frames, which still holds them, and comes first, so finished work drains before new work enters
(the end of one job before the start of the next). A worker collects a detection or restoration
batch only once the next of its kind is queued behind it (or it has nothing else to do), so the
device is never left without work while the host reads results back and prepares the next batch.

A job hears its results through :class:`JobPort`; a failure in its work is that job's alone: the
pool drops the job's remaining work and goes on with the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from ..media.frames import SourceFrame
from ..transfer import Pending
from ..worker.messages import DetectBatch, Detected, PrepareDetection, RestoreBatch, Restored, ToEncode, Worker

log = logging.getLogger(__name__)
#: Restoration batches a worker keeps queued on its device before it collects the oldest.
QUEUED_RESTORATIONS = 2
#: Detection batches likewise: a worker collects a detection once the next is queued, not at once.
QUEUED_DETECTIONS = 2


class JobPort(Protocol):
    """What the pool needs of a job: where its results go, and whether it still wants them."""

    batch_frames: int  # frames per detection batch, the shape a worker prepares for
    height: int  # the upright size of its pictures
    width: int

    @property
    def stopped(self) -> bool: ...

    def detected(self, result: Detected) -> None: ...

    def restored(self, result: ToEncode) -> None: ...

    def failed(self, error: BaseException) -> None: ...

    def busy(self, stage: str, seconds: float) -> None: ...


@dataclass
class _Assigned:
    """A task with the job it belongs to (None: the pool's own), so that the messages stay data
    and the pool routes the results."""

    job: JobPort | None
    task: DetectBatch | RestoreBatch | PrepareDetection


class _Tasks:
    """Work for the workers, of every job: detection batches for whichever worker is free;
    restoration batches for a worker of the device that holds their frames (any when None), and
    preparations for the worker of their device, both before any detection."""

    def __init__(self) -> None:
        self.ready = threading.Condition()
        self.detect: deque[_Assigned] = deque()
        self.on_device: defaultdict[torch.device | None, deque[_Assigned]] = defaultdict(deque)
        self.closed = False  # no more work: workers exit once their queues are empty

    def put(self, assigned: _Assigned) -> None:
        with self.ready:
            if self.closed:  # no thread would take it: the job would wait for ever
                raise RuntimeError("the workers have stopped")
            if isinstance(assigned.task, DetectBatch):
                self.detect.append(assigned)
            else:
                self.on_device[assigned.task.device].append(assigned)
            self.ready.notify_all()

    def close(self) -> None:
        with self.ready:
            self.closed = True
            self.ready.notify_all()

    def take(self, device: torch.device, wait: bool) -> _Assigned | None:
        """The next task for a worker on ``device``; None once closed and empty, or, without
        ``wait``, when there is none yet."""
        with self.ready:
            while True:
                for waiting in (self.on_device[device], self.on_device[None], self.detect):
                    if waiting:
                        return waiting.popleft()
                if self.closed or not wait:
                    return None
                self.ready.wait()

    def drop(self, job: JobPort) -> list[_Assigned]:
        """Take every task of ``job`` out of the queues (the job stopped)."""
        with self.ready:
            dropped = [a for a in self.detect if a.job is job]
            self.detect = deque(a for a in self.detect if a.job is not job)
            for device, waiting in self.on_device.items():
                dropped += [a for a in waiting if a.job is job]
                self.on_device[device] = deque(a for a in waiting if a.job is not job)
            return dropped


def _release(frames: list[SourceFrame]) -> None:
    for frame in frames:
        frame.buffers.release()


class WorkerPool:
    """One thread per worker, from its making until :meth:`close`; jobs put their batches in with
    :meth:`submit` and hear back through their :class:`JobPort`. The threads are daemons: an
    engine left open does not keep the process alive, and between jobs they only wait."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        self.tasks = _Tasks()
        self._prepared: set[tuple[int, int, int]] = set()  # the sizes handed to prepare() so far
        self.threads = [threading.Thread(target=self._serve, args=(w,), name=f"worker-{w.device}", daemon=True)
                        for w in workers]
        for thread in self.threads:
            thread.start()

    def close(self) -> None:
        """Every worker finishes what it holds and stops, and closes; waited for even through
        another Ctrl-C, as a thread still queuing CUDA work when the process exits would crash it."""
        self.tasks.close()
        for thread in self.threads:
            while thread.is_alive():
                try:
                    thread.join()
                except KeyboardInterrupt:
                    continue
        for worker in self.workers:
            while True:
                try:
                    worker.close()
                    break
                except KeyboardInterrupt:
                    continue

    @property
    def alive(self) -> bool:
        """Whether every worker can take work (a worker process may have died)."""
        return all(worker.alive for worker in self.workers)

    @property
    def face_batch(self) -> int:
        """GPEN's batch now, which restoration batches are cut to fill (lowered after running out of memory)."""
        return self.workers[0].face_batch

    def stage(self, frame: SourceFrame) -> None:
        """On the decode thread: the frame copied to where this pool's workers read it (pinned
        memory for GPU threads, shared memory for worker processes), off the workers' own time."""
        self.workers[0].stage(frame)

    def submit(self, job: JobPort, task: DetectBatch | RestoreBatch) -> None:
        self.tasks.put(_Assigned(job, task))

    def prepare(self, frames: int, height: int, width: int) -> None:
        """The workers ready their detectors for a coming job's pictures (``frames`` to a batch of
        ``height`` x ``width``) on their own threads, now: on a GPU that takes about a second, which
        then passes while GPEN loads and the job's first frames decode, not after them. One task
        per worker goes to its device's queue; with several workers on a device, one that takes
        none readies itself at its first detection, as every worker does for a size it has not met.
        A size already handed out is not queued again: a job's first pass, and the next file of a
        batch of one size, find it ready."""
        if (frames, height, width) in self._prepared:
            return
        self._prepared.add((frames, height, width))
        for worker in self.workers:
            self.tasks.put(_Assigned(None, PrepareDetection(worker.device, frames, height, width)))

    def forget(self, job: JobPort) -> None:
        """A stopped job's queued work goes, and the device memory its frames hold."""
        for assigned in self.tasks.drop(job):
            _release(assigned.task.frames)

    def _serve(self, worker: Worker) -> None:
        # Batches queued on the device, oldest first. The oldest of each kind is collected once
        # another is queued behind it, so the device always has the next one, or once there is
        # nothing else to do: a detection first, as its results become the next restorations.
        detecting: deque[tuple[JobPort, list[SourceFrame], Pending]] = deque()
        restoring: deque[tuple[JobPort, list[SourceFrame], Pending]] = deque()
        while True:
            assigned = self.tasks.take(worker.device, wait=not (detecting or restoring))
            if assigned is None:
                if detecting:
                    self._detected(worker, *detecting.popleft())
                elif restoring:
                    self._restored(worker, *restoring.popleft())
                else:
                    return
                continue
            job, task = assigned.job, assigned.task
            if job is None:
                self._prepare(worker, task)
                continue
            if job.stopped:
                _release(task.frames)
                continue
            if isinstance(task, DetectBatch):
                def detect(task: DetectBatch = task, job: JobPort = job) -> Pending:
                    worker.prepare_detection(job.batch_frames, job.height, job.width)
                    return worker.queue_detect(task.frames)

                pending = self._queue(worker, job, "detect", task.frames, detect)
                if pending is not None:
                    detecting.append((job, task.frames, pending))
                if len(detecting) >= QUEUED_DETECTIONS:
                    self._detected(worker, *detecting.popleft())
            else:
                pending = self._queue(worker, job, "restore", task.frames,
                                      lambda: worker.queue_restore(task.frames, task.faces(), task.clip, task.paste))
                if pending is not None:
                    restoring.append((job, task.frames, pending))
                if len(restoring) >= QUEUED_RESTORATIONS:
                    self._restored(worker, *restoring.popleft())

    @staticmethod
    def _prepare(worker: Worker, task: PrepareDetection) -> None:
        try:
            worker.prepare_detection(task.frames, task.height, task.width)
        except Exception as exc:  # ahead of time: the job's first detection meets the cause again, and reports it
            log.debug("preparing detection on %s failed: %s", worker.device, exc)

    def _queue(self, worker: Worker, job: JobPort, stage: str, frames: list[SourceFrame],
               queue: Callable[[], Pending]) -> Pending | None:
        """``queue()``'s pending work, or None when it failed: the job hears of the failure."""
        start = time.perf_counter()
        try:
            return queue()
        except Exception as exc:  # the job's alone: the pool serves the other jobs on
            _release(frames)
            job.failed(exc)
            return None
        finally:
            job.busy(f"{stage}[{worker.device}]", time.perf_counter() - start)

    def _collected(self, worker: Worker, job: JobPort, stage: str, frames: list[SourceFrame],
                   pending: Pending) -> object | None:
        start = time.perf_counter()
        try:
            return pending.result()
        except Exception as exc:
            _release(frames)
            job.failed(exc)
            return None
        finally:
            job.busy(f"{stage}[{worker.device}]", time.perf_counter() - start)

    def _detected(self, worker: Worker, job: JobPort, frames: list[SourceFrame], pending: Pending) -> None:
        result = self._collected(worker, job, "detect", frames, pending)
        if result is None:  # failed: the frames went with the failure
            return
        if job.stopped:
            _release(frames)
            return
        faces, thumbnails = result
        job.detected(Detected(frames, faces, thumbnails))

    def _restored(self, worker: Worker, job: JobPort, frames: list[SourceFrame], pending: Pending) -> None:
        restored: list[Restored] | None = self._collected(worker, job, "restore", frames, pending)
        if restored is None or job.stopped:
            return
        for source, result in zip(frames, restored):
            job.restored(ToEncode(source, result))
