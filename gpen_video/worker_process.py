"""A device worker in a process of its own (one per GPU), fed through shared memory.

A GPU worker launches hundreds of small kernels per batch from Python, holding the GIL that the
decode and encode threads need; in the tool's own process that throttled them (BENCHMARKS.md).
Each GPU therefore gets a process running the same :class:`DeviceWorker`. Frames reach it through
shared memory: the decoded planes are copied once into a slot that every worker process maps,
detection reads them there, restoration writes the merged planes back in place, and the encoder
copies them out. Only slot references, faces and face lists travel through the pipe.
"""

from __future__ import annotations

import logging
import mmap
import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .restore import DeviceSettings, DeviceWorker, FaceSpec, FrameData, Restored
from .video.colour import PlaneLayout
from .video.decode import SourceFrame

log = logging.getLogger(__name__)

_SLOTS_PER_POOL = 16  # frames per shared-memory block; blocks are added while more frames are in flight
_ALIGN = 4096


@dataclass(frozen=True)
class SharedPlanes:
    """Where one frame's planes lie in shared memory: what a worker process is sent instead of pixels."""

    pool: int
    slot: int
    offsets: tuple[int, ...]  # of each plane, from the start of the pool
    shapes: tuple[tuple[int, int], ...]
    dtype: str
    layout: PlaneLayout


@dataclass
class _Frame:
    """A frame as a worker process sees it (a :class:`FrameData`)."""

    planes: list[np.ndarray]
    layout: PlaneLayout


def _views(memory: mmap.mmap, ref: SharedPlanes) -> list[np.ndarray]:
    return [np.ndarray(shape, ref.dtype, buffer=memory, offset=offset) for shape, offset in zip(ref.shapes, ref.offsets)]


class _Pool:
    """One block of frame slots, in anonymous shared memory (memfd: no file, no /dev/shm quota)."""

    def __init__(self, slot_bytes: int) -> None:
        self.slot_bytes = slot_bytes
        self.size = slot_bytes * _SLOTS_PER_POOL
        self.fd = os.memfd_create("gpen-video-frames", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)
        self.memory = mmap.mmap(self.fd, self.size)
        self.free = list(range(_SLOTS_PER_POOL))


class SharedFrames:
    """The frames in flight, in shared memory that every worker process maps.

    A frame is copied in when it is first sent to a worker and stays until :meth:`release` (after
    it is encoded); the pipeline's cap on frames in flight bounds the memory.
    """

    def __init__(self) -> None:
        self.pools: list[_Pool] = []
        self.placed: dict[int, SharedPlanes] = {}
        self.lock = threading.Lock()

    def place(self, frame: SourceFrame) -> SharedPlanes:
        """The frame's slot, copying its planes in on first use."""
        with self.lock:
            if frame.index in self.placed:
                return self.placed[frame.index]
            planes = frame.planes
            sizes = [-(-p.nbytes // _ALIGN) * _ALIGN for p in planes]
            pool_id = next((i for i, p in enumerate(self.pools) if p.slot_bytes == sum(sizes) and p.free), None)
            if pool_id is None:
                self.pools.append(_Pool(sum(sizes)))
                pool_id = len(self.pools) - 1
            pool = self.pools[pool_id]
            slot = pool.free.pop()
            offsets = tuple(slot * pool.slot_bytes + sum(sizes[:k]) for k in range(len(planes)))
            ref = SharedPlanes(pool_id, slot, offsets, tuple(p.shape for p in planes), planes[0].dtype.str,
                               frame.layout)
            self.placed[frame.index] = ref
        for dst, src in zip(self.views(ref), planes):
            np.copyto(dst, src)
        return ref

    def views(self, ref: SharedPlanes) -> list[np.ndarray]:
        return _views(self.pools[ref.pool].memory, ref)

    def release(self, index: int) -> None:
        """The frame is done with (encoded, or never sent to a worker): its slot can be reused."""
        with self.lock:
            ref = self.placed.pop(index, None)
            if ref is not None:
                self.pools[ref.pool].free.append(ref.slot)

    def close(self) -> None:
        for pool in self.pools:
            os.close(pool.fd)  # the mapping itself goes with the last view of it


class WorkerProcess:
    """A :class:`DeviceWorker` in a child process, answering the same ``detect`` and ``restore``."""

    def __init__(self, settings: DeviceSettings, model: str, weights: str | Path | None,
                 frames: SharedFrames) -> None:
        self.device = torch.device(settings.device)
        self.face_batch = settings.face_batch
        self.out_of_memory = 0
        self.frames = frames
        self.mapped: set[int] = set()  # pools the child has been given
        context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
        self.connection, child = context.Pipe()
        level = logging.getLogger("gpen_video").getEffectiveLevel()
        self.process = context.Process(target=_serve, args=(child, settings, model, weights, level),
                                       name=f"gpen-video {settings.device}", daemon=True)
        self.process.start()
        child.close()

    def wait_ready(self) -> None:
        """Returns once the child has loaded (and compiled) its models; raises what stopped it."""
        self._reply()

    def detect(self, frames: Sequence[SourceFrame]) -> tuple[list, np.ndarray]:
        return self._call("detect", [self.frames.place(f) for f in frames])

    def restore(self, frames: Sequence[SourceFrame], faces: Sequence[Sequence[FaceSpec]]) -> list[Restored]:
        refs = [self.frames.place(f) for f in frames]
        self._call("restore", refs, list(faces))
        return [Restored(self.frames.views(ref), len(fs)) for ref, fs in zip(refs, faces)]

    def _call(self, kind: str, refs: list[SharedPlanes], *args: Any) -> Any:
        for pool in sorted({r.pool for r in refs} - self.mapped):
            self.connection.send(("pool", pool, self.frames.pools[pool].size))
            send_handle(self.connection, self.frames.pools[pool].fd, self.process.pid)
            self.mapped.add(pool)
        self.connection.send((kind, refs, *args))
        return self._reply()

    def _reply(self) -> Any:
        try:
            status, result, self.face_batch, self.out_of_memory = self.connection.recv()
        except (EOFError, OSError):
            self.process.join(timeout=5)
            code = self.process.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            raise RuntimeError(f"the worker process for {self.device} stopped unexpectedly ({how})") from None
        if status == "error":
            raise result
        return result

    def close(self) -> None:
        with suppress(OSError):
            self.connection.send(("exit",))
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError with its type and message."""
    try:
        return pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _serve(connection: Connection, settings: DeviceSettings, model: str, weights: str | Path | None,
           log_level: int) -> None:
    """The child's loop: build the worker, then answer detect/restore requests until told to exit."""
    from .weights import load_gpen_weights

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
    logging.basicConfig(level=logging.WARNING, format="gpen-video: %(message)s")
    logging.getLogger("gpen_video").setLevel(log_level)

    def reply(status: str, result: Any) -> None:
        connection.send((status, result, worker.face_batch, worker.out_of_memory))

    try:
        state_dict, _ = load_gpen_weights(model, weights, progress=False)
        worker = DeviceWorker(state_dict, settings)
        del state_dict
    except Exception as exc:
        connection.send(("error", _portable(exc), settings.face_batch, 0))
        return
    reply("ok", None)
    memory: dict[int, mmap.mmap] = {}
    while True:
        try:
            message = connection.recv()
        except EOFError:  # the parent is gone
            return
        kind = message[0]
        if kind == "exit":
            return
        if kind == "pool":
            fd = recv_handle(connection)
            memory[message[1]] = mmap.mmap(fd, message[2])
            os.close(fd)
            continue
        try:
            frames: list[FrameData] = [_Frame(_views(memory[r.pool], r), r.layout) for r in message[1]]
            if kind == "detect":
                result = worker.detect(frames)
            else:
                for frame, restored in zip(frames, worker.restore(frames, message[2])):
                    for dst, src in zip(frame.planes, restored.planes):
                        np.copyto(dst, src)
                result = None
        except Exception as exc:
            log.debug("%s failed on %s", kind, settings.device, exc_info=True)
            reply("error", _portable(exc))
            continue
        reply("ok", result)
