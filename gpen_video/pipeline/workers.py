"""The engine's workers over their life: built on first use (compiled or not, by ``--compile``),
GPEN loaded into them when a job first restores, rebuilt once a worker process has died, and
the jobs running on them, which an interrupt stops."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

from ..faces.detect import detector_weights
from ..faces.track import FaceTracker
from ..media.probe import Pictures
from ..model.weights import load_gpen_weights
from ..options import RestoreOptions
from ..worker.device import DeviceWorker
from ..worker.messages import Worker
from ..worker.process import process_workers
from ..worker.restorer import compile_cache_warm
from ..worker.speeds import measured, setup_key
from .batching import batch_frames
from .fetch import fetch_needed
from .job import Job
from .scheduler import WorkerPool

log = logging.getLogger(__name__)
#: Said as the first job on the CPU restores: GPEN-512 took 7 s a face there on 2 cores (fp32), where one
#: H200 restores over 700 faces a second (BENCHMARKS.md).
CPU_NOTE = ("restoring on the CPU: expect seconds per face (GPEN-512 takes about 7 s a face on 2 cores), "
            "where one GPU restores hundreds of faces a second")


class Workers:
    """One worker per device entry of ``options``, shared by every job of an engine."""

    def __init__(self, options: RestoreOptions, devices: list[str], progress: bool) -> None:
        self.options = options
        self.devices = devices
        self.progress = progress
        self._pool: WorkerPool | None = None
        self._building = threading.Lock()  # jobs starting at once build the workers once
        self._retired: list[WorkerPool] = []  # pools with a dead worker, still used by running jobs
        self._jobs: set[Job] = set()  # running, for interrupt()
        self._jobs_lock = threading.Lock()
        self._interrupted = False
        self._startup: dict[str, float] = {}  # how the first job's start-up went, until it reports it
        self._told_cpu = False  # whether a run on the CPU has been said to be slow
        #: Frames of all the work planned (a batch's), which ``--compile auto`` decides on; None: the first job's.
        self.planned_frames: int | None = None

    def compiles(self, frames: int | None) -> bool:
        """Whether GPU workers compile, for ``frames`` of work (None: unknown, taken as long)."""
        if self.options.compile != "auto":
            return self.options.compile == "on"
        gpus = [device for device in self.devices if device.startswith("cuda")]
        if not gpus:
            return False
        # Figures this machine measured (see worker/speeds.py); a frame has a face or more.
        return measured(setup_key(self.options, gpus[0])).compile_pays(frames, compile_cache_warm())

    def pool(self, frames: int | None, job: RestoreOptions, restoring: bool = True,
             pictures: Pictures | None = None) -> WorkerPool:
        """The workers, built on first use (compiled for the planned work, else the job's
        ``frames``), then the same for every job, unless a worker process has died: the next job
        then starts them all again. A job that restores has GPEN loaded into them (its weights
        downloaded on first use); one that only finds faces does not. The files the job's options
        (``job``) need are in the cache before it runs. With the job's ``pictures``, the workers
        ready their detection for them meanwhile."""
        with self._building:
            if self._pool is not None and not self._pool.alive:
                log.warning("a worker process has died: starting the workers again")
                self._retire(self._pool)
                self._pool = None
            loading = restoring and (self._pool is None or not all(w.restores for w in self._pool.workers))
            # Every file the job needs, fetched before anything loads (under the lock: jobs that
            # start at once download each file once): offline, one error names them all.
            fetch_needed(job, restoring, self.progress)
            if self._pool is None:
                # The tracker's imports (SciPy, up to a second beside the other stages' start) run
                # while the workers start, not on the first frame's way: the first job's track
                # thread then finds them done, or waits only for the rest of them.
                threading.Thread(target=FaceTracker.prepare, name="tracker-imports").start()
                start = time.perf_counter()
                compiled = self.compiles(self.planned_frames if self.planned_frames is not None else frames)
                self._pool = WorkerPool(self._new_workers(compiled))
                self._startup["workers"] = time.perf_counter() - start
            if pictures is not None:
                self._pool.prepare(batch_frames(pictures, self.options.batch_size), pictures.height, pictures.width)
            workers = self._pool.workers
            if loading:
                start = time.perf_counter()
                state_dict, _ = load_gpen_weights(self.options.model, self.options.weights, self.progress)
                loaded = time.perf_counter()
                for pending in [worker.load_restorer(state_dict) for worker in workers]:
                    pending.result()
                label = "GPEN (compiling)" if any(w.compiled for w in workers) else "GPEN"
                self._startup.update({"weights": loaded - start, label: time.perf_counter() - loaded})
            return self._pool

    def _new_workers(self, compiled: bool) -> list[Worker]:
        """A worker per device entry, in this process's threads or in processes of their own."""
        if self.options.worker == "thread":
            return [DeviceWorker(self.options, device, compiled) for device in self.devices]
        # The processes load the detector from a file: fetched here, once, with this run's progress.
        path = detector_weights(self.options.detector, self.options.detector_weights, self.progress)
        return process_workers(replace(self.options, detector_weights=path), self.devices, compiled)

    def restoring_begins(self) -> None:
        """A job is about to restore: on the CPU, the first one hears how slow that is (said here,
        after every check a job makes, so that a refused job's error stays its only line)."""
        if "cpu" in self.devices and not self._told_cpu:
            self._told_cpu = True
            log.info(CPU_NOTE)

    def take_startup(self) -> dict[str, float]:
        """How the workers' start went, for the first job that reports it (then empty)."""
        startup, self._startup = self._startup, {}
        return startup

    @contextlib.contextmanager
    def running(self, job: Job) -> Iterator[None]:
        """``job`` runs in the block: an interrupt stops it, and pools retired meanwhile close
        once it ends. Raises KeyboardInterrupt if the engine was interrupted already."""
        with self._jobs_lock:
            if self._interrupted:
                raise KeyboardInterrupt
            self._jobs.add(job)
        try:
            yield
        finally:
            with self._jobs_lock:
                self._jobs.discard(job)
            self._close_retired()

    def interrupt(self) -> None:
        """Stop every running job as Ctrl-C would, and any that starts later."""
        with self._jobs_lock:
            self._interrupted = True
            for job in self._jobs:
                job.failed(KeyboardInterrupt())

    def _retire(self, pool: WorkerPool) -> None:
        """A pool with a dead worker: closed now, or by its last running job (which fails on it)."""
        with self._jobs_lock:
            self._retired.append(pool)
        self._close_retired()

    def _close_retired(self) -> None:
        """Close the retired pools that no running job uses any more."""
        with self._jobs_lock:
            idle = [p for p in self._retired if not any(job.pool is p for job in self._jobs)]
            self._retired = [p for p in self._retired if p not in idle]
        for pool in idle:
            pool.close()

    def close(self) -> None:
        """Stop the workers' threads (once no job runs)."""
        for pool in [*self._retired, *([self._pool] if self._pool is not None else [])]:
            pool.close()
