"""A device's worker in a process of its own (``--worker process``): its Python, and the host
work of queuing its kernels, no longer share one interpreter lock with the decoder, the tracker,
the encoder and the other devices' workers.

The process holds a :class:`~.device.DeviceWorker` and serves requests from a pipe, in order.
Frames never cross the pipe: the decode thread packs each one into a slot of shared memory
(:class:`~.shared.SharedFrames`), the request names the slot, and a restoration writes the new
planes back into it. Faces, thumbnails and face counts come back pickled; they are small.

The process queues up to two requests on its device before it answers the oldest, as the
pool's thread does, so the device has the next batch while the host reads one back. If it dies,
every request waiting on it fails with :class:`WorkerDied`, and the jobs whose work it held stop
with that error; nothing is written at their outputs. The engine's next job starts new workers.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import signal
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
import torch

from ..errors import WorkerDied, WorkerFailed, error_line
from ..faces.detect import Face
from ..media.colour import PlaneLayout, packed_to_frame
from ..media.frames import SourceFrame
from ..options import RestoreOptions
from ..transfer import Pending
from .device import DeviceWorker
from .messages import FaceSpec, Paste, Restored
from .shared import SharedFrames, SlotRef

#: Requests the process keeps queued on its device before it answers the oldest.
QUEUED_REQUESTS = 2
_HOST = torch.device("cpu")


@dataclass(frozen=True)
class FrameRef:
    """A frame as a request names it: where its planes lie, and what the worker needs to read them."""

    slot: SlotRef
    index: int
    width: int
    height: int
    format: str
    layout: PlaneLayout


def process_workers(options: RestoreOptions, devices: list[str], compiled: bool) -> list[ProcessWorker]:
    """One worker process per entry of ``devices``, all started at once (each imports torch and
    loads its detector, seconds), sharing one set of frame slots; if one fails to start, none is left."""
    frames = SharedFrames()
    workers = [ProcessWorker(options, device, compiled, frames) for device in devices]
    try:
        for worker in workers:
            worker._ready.result()
    except BaseException:
        for worker in workers:
            worker.close()
        raise
    return workers


class ProcessWorker:
    """The :class:`~.messages.Worker` of one device, run by a process of its own; this object,
    in the pipeline's process, forwards the work and hears the answers (on a thread of its own)."""

    def __init__(self, options: RestoreOptions, device: str, compiled: bool, frames: SharedFrames) -> None:
        self.device = torch.device(device)
        self.compiled = compiled and self.device.type == "cuda"
        self.face_batch = options.batch_size
        self.out_of_memory = 0
        self.restores = False
        self._notes: list[str] = []  # from the process's restorer, for the next job's summary
        self._frames = frames
        self._sent_blocks: set[int] = set()
        self._requests = itertools.count()
        self._waiting: dict[int, Future] = {}
        self._lock = threading.Lock()  # one request on the pipe at a time, in the order the futures are made
        self._died: WorkerDied | None = None
        self._prepared: set[tuple[int, int, int]] = set()  # detection shapes the process is ready for
        context = multiprocessing.get_context("spawn")  # CUDA cannot run in a forked child
        self._pipe, theirs = context.Pipe()
        self.process = context.Process(target=serve, args=(theirs, options, device, self.compiled),
                                       name=f"gpen-video worker {device}", daemon=True)
        self.process.start()
        theirs.close()
        self._listener = threading.Thread(target=self._listen, name=f"worker-{device}-answers", daemon=True)
        self._listener.start()
        self._ready = self._call("ready")  # the detector loaded there: see process_workers

    @property
    def alive(self) -> bool:
        """Whether the process still runs and answers."""
        return self._died is None and self.process.is_alive()

    def take_notes(self) -> list[str]:
        """What the process's restorer had to say for the next job's summary, once."""
        notes, self._notes = self._notes, []
        return notes

    def stage(self, frame: SourceFrame) -> None:
        """On the decode thread: the frame's planes into a slot of shared memory."""
        samples, give_back = self._frames.stage(frame.frame)
        frame.buffers.stage(samples, give_back)

    def load_restorer(self, state_dict: dict[str, torch.Tensor]) -> Pending[None]:
        """GPEN built (and compiled) in the process, from weights it maps rather than receives;
        every process builds its own at once, and the engine collects them."""
        if self.restores:
            return Pending(lambda: None, _HOST)
        future = self._call("load", {name: tensor.share_memory_() for name, tensor in state_dict.items()})

        def loaded() -> None:
            self.face_batch, notes = future.result()
            self._notes += notes
            self.restores = True

        return Pending(loaded, _HOST)

    def prepare_detection(self, frames: int, height: int, width: int) -> None:
        """The process readies its detector (once for each shape; the pool asks before every batch)."""
        if (frames, height, width) not in self._prepared:
            self._call("prepare", frames, height, width).result()
            self._prepared.add((frames, height, width))

    def queue_detect(self, frames: Sequence[SourceFrame]) -> Pending[tuple[list[list[Face]], np.ndarray]]:
        future = self._call("detect", self._refs(frames))
        return Pending(future.result, _HOST)

    def queue_restore(self, frames: Sequence[SourceFrame], faces: Sequence[Sequence[FaceSpec]],
                      clip: int = 0, paste: Paste = Paste()) -> Pending[list[Restored]]:
        refs = self._refs(frames)
        future = self._call("restore", refs, [list(f) for f in faces], clip, paste)

        def finish() -> list[Restored]:
            self.face_batch, self.out_of_memory, notes = future.result()
            self._notes += notes
            results = []
            for frame, found in zip(frames, faces):
                # A copy out of the slot: the encoder may hold the frame longer than the slot is ours.
                packed = frame.buffers.staged.numpy().copy()
                results.append(Restored(packed_to_frame(packed, frame.frame), len(found)))
                frame.buffers.release()
            return results

        return Pending(finish, _HOST)

    def close(self) -> None:
        """The process finishes its work and ends."""
        with contextlib.suppress(WorkerDied, WorkerFailed, OSError):
            self._call("close").result()
        self.process.join(timeout=60)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self._listener.join()  # it ends at the pipe's end, which the process's exit closed
        self._pipe.close()

    def _refs(self, frames: Sequence[SourceFrame]) -> list[FrameRef]:
        refs = []
        for f in frames:
            staged = f.buffers.staged
            if staged is None:
                raise RuntimeError(f"frame {f.index} reached a worker process unstaged")
            refs.append(FrameRef(self._frames.locate(staged), f.index, f.frame.width, f.frame.height,
                                 f.frame.format.name, f.layout))
        return refs

    def _call(self, kind: str, *args: Any) -> Future:
        """Send a request; its answer comes to the returned future."""
        future: Future = Future()
        with self._lock:
            if self._died is not None:
                raise self._died
            blocks = {ref.slot.block for arg in args if isinstance(arg, list) for ref in arg
                      if isinstance(ref, FrameRef)}
            number = next(self._requests)
            self._waiting[number] = future
            try:
                for block in sorted(blocks - self._sent_blocks):  # mapped there once, before its first use
                    self._pipe.send(("block", None, block, self._frames.blocks[block]))
                    self._sent_blocks.add(block)
                self._pipe.send((kind, number, *args))
                return future
            except OSError:
                self._waiting.pop(number, None)
        self._listener.join(timeout=30)  # the process is gone: the listener says how
        raise self._died or WorkerDied(f"the worker process of {self.device} stopped answering")

    def _listen(self) -> None:
        """Hand each answer to its request's future; when the process ends, fail every one left."""
        while True:
            try:
                number, ok, value = self._pipe.recv()
            except (EOFError, OSError):
                break
            future = self._waiting.pop(number)
            if ok:
                future.set_result(value)
            else:
                future.set_exception(WorkerFailed(value))
        self.process.join(timeout=5)
        code = self.process.exitcode
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        with self._lock:
            self._died = WorkerDied(f"the worker process of {self.device} {how} while it held work")
            waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            future.set_exception(self._died)


def serve(pipe: multiprocessing.connection.Connection, options: RestoreOptions, device: str, compiled: bool) -> None:
    """The worker process: a :class:`~.device.DeviceWorker` serving the pipe's requests in order."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the pipeline's to handle; it closes us
    blocks: dict[int, torch.Tensor] = {}
    queued: deque[tuple[int, str, Pending, list[torch.Tensor]]] = deque()
    worker: DeviceWorker | None = None
    while True:
        if queued and (len(queued) >= QUEUED_REQUESTS or not pipe.poll()):
            _answer(pipe, worker, *queued.popleft())
            continue
        kind, number, *args = pipe.recv()
        try:
            if kind == "block":
                blocks[args[0]] = args[1]
            elif kind == "ready":
                worker = DeviceWorker(options, device, compiled)
                pipe.send((number, True, None))
            elif kind == "load":
                worker.load_restorer(args[0])
                pipe.send((number, True, (worker.face_batch, worker.take_notes())))
            elif kind == "prepare":
                worker.prepare_detection(*args)
                pipe.send((number, True, None))
            elif kind == "detect":
                (refs,) = args
                slots = [ref.slot.view(blocks) for ref in refs]
                queued.append((number, kind, worker.queue_detect(_frames(refs, slots)), slots))
            elif kind == "restore":
                refs, faces, clip, paste = args
                slots = [ref.slot.view(blocks) for ref in refs]
                queued.append((number, kind, worker.queue_restore_packed(_frames(refs, slots), faces, clip, paste),
                               slots))
            elif kind == "close":
                while queued:
                    _answer(pipe, worker, *queued.popleft())
                if worker is not None:
                    worker.close()
                pipe.send((number, True, None))
                return
        except Exception as exc:  # this request's failure; the process serves on
            pipe.send((number, False, error_line(exc)))


def _answer(pipe: multiprocessing.connection.Connection, worker: DeviceWorker, number: int, kind: str,
            pending: Pending, slots: list[torch.Tensor]) -> None:
    """Collect the oldest queued request and answer it: a restoration's planes go into the frames'
    slots, and its answer is the GPEN batch now (lowered after running out of memory)."""
    try:
        result = pending.result()
        if kind == "restore":
            for slot, packed in zip(slots, result):
                slot.copy_(torch.from_numpy(packed))
            result = (worker.face_batch, worker.out_of_memory, worker.take_notes())
        pipe.send((number, True, result))
    except Exception as exc:
        pipe.send((number, False, error_line(exc)))


_TEMPLATES: dict[tuple[int, int, str], av.VideoFrame] = {}


def _frames(refs: list[FrameRef], slots: list[torch.Tensor]) -> list[SourceFrame]:
    """The request's frames as the device worker reads them: staged in their ``slots``, each with
    a frame of its format and size standing for its shape (its samples are the slot's)."""
    frames = []
    for ref, slot in zip(refs, slots):
        key = (ref.width, ref.height, ref.format)
        if key not in _TEMPLATES:
            _TEMPLATES[key] = av.VideoFrame(ref.width, ref.height, ref.format)
        frame = SourceFrame(ref.index, _TEMPLATES[key], ref.layout)
        frame.buffers.stage(slot)
        frames.append(frame)
    return frames
