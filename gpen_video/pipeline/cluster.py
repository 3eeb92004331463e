"""Many inputs across a Ray cluster (``--ray ADDRESS``): one actor per GPU of the cluster (CPU
actors where it has none), each holding a warm :class:`~.engine.Engine`, built once; the batch
hands each file to an actor with a free slot (``--jobs`` each). Ray places the actors, restarts
one that dies (a killed process, a node that leaves) and runs its units again; the Engine's
temporary file and rename mean a file cut off that way leaves nothing at its OUTPUT. Inputs and
OUTDIR must be on a filesystem every node sees; each actor checks that before any work.

A video longer than one ``--segment-frames`` segment is split: each segment is a unit of its own,
on any free slot, decoded from a key frame before it (media.segments.plan_segments) and saved in
the job's work directory beside OUTPUT, as ``--resume`` saves them; the driver then assembles
OUTPUT with the source's other streams. A driver killed part-way continues, with ``--resume``,
from the segments already there.

Ray is an optional dependency: ``pip install 'gpen-video[ray]'``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import queue
import shutil
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, UsageError, error_line
from ..faces.track import FaceTracker
from ..media.containers import CONTAINERS
from ..media.images import IMAGE_EXTENSIONS
from ..media.opening import open_input
from ..media.outputs import check_paths
from ..media.probe import VideoInfo, probe
from ..media.segments import SegmentStore, SegmentUnit, assemble, plan_segments, work_dir_for
from ..media.writer import VideoWriter
from ..options import JobOptions, RestoreOptions
from .engine import Engine, FrameCallback
from .summary import Summary

RAY_EXTRA = "pip install 'gpen-video[ray]'"
NAMESPACE = "gpen-video"
#: How often a file's progress is read from its actor, seconds.
POLL_SECONDS = 0.5
#: Restarts of a dead actor, and retries of the file it held, before the file fails.
RETRIES = 3


class RestoreActor:
    """One Engine on one node (one GPU, or the CPU), as a Ray actor: restores the files, and the
    segments of long ones, handed to it, several at once as ``--jobs`` runs them on one machine,
    and says how far each is (other method threads answer while they run)."""

    def __init__(self, options: RestoreOptions) -> None:
        self.engine = Engine(options, progress=False)
        self.counts: dict[int, tuple[int, int]] = {}  # unit ticket -> (frames written, faces restored)

    def where(self) -> str:
        """This actor's host and process, for the report."""
        return f"{socket.gethostname()}:{os.getpid()}"

    def check(self, inputs: Sequence[str], output_dir: str) -> str:
        """Why this node cannot do the batch's work ("" when it can): an input it cannot read, or an
        OUTDIR it cannot write (the paths must name one shared filesystem on every node)."""
        for path in inputs:
            if not os.access(path, os.R_OK):
                return f"{socket.gethostname()} cannot read {path}"
        probe = Path(output_dir) / f".gpen-video-check-{socket.gethostname()}-{os.getpid()}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            return f"{socket.gethostname()} cannot write {output_dir} ({exc.strerror or exc})"
        return ""

    def _begin(self, ticket: int, planned_frames: int | None) -> FrameCallback:
        """A new unit, known to :meth:`progress` by ``ticket``: ``planned_frames``, the batch's
        frames, is what ``--compile auto`` decides on; the callback counts the unit's progress."""
        self.engine.planned_frames = planned_frames
        self.counts[ticket] = (0, 0)

        def count(frames: int, faces: int) -> None:
            done = self.counts[ticket]
            self.counts[ticket] = (done[0] + frames, done[1] + faces)

        return count

    def restore(self, ticket: int, input: str, output: str, job: JobOptions, planned_frames: int | None,
                whole_photos: bool) -> Summary:
        """Restore one file."""
        try:
            return self.engine.restore(input, output, job, on_frame=self._begin(ticket, planned_frames),
                                       whole_photos=whole_photos)
        finally:
            self.counts.pop(ticket, None)

    def restore_segment(self, ticket: int, input: str, output: str, job: JobOptions, unit: SegmentUnit,
                        planned_frames: int | None) -> Summary:
        """Restore one segment of a long video into its job's work directory (the driver assembles)."""
        try:
            return self.engine.restore_segment(input, output, job, unit,
                                               on_frame=self._begin(ticket, planned_frames))
        finally:
            self.counts.pop(ticket, None)

    def progress(self, ticket: int) -> tuple[int, int]:
        """Frames written and faces restored of a running unit."""
        return self.counts.get(ticket, (0, 0))


@dataclass
class ActorLoad:
    """What one actor did, for the closing report."""

    where: str
    units: int = 0  # files, and segments of long ones
    frames: int = 0
    faces: int = 0
    seconds: float = 0.0

    def describe(self, name: str) -> str:
        rate = self.faces / self.seconds if self.seconds else 0.0
        return f"{name} ({self.where}): {self.units} unit(s), {self.frames} frames, {rate:.1f} faces/s"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(f"--ray needs Ray, which is not installed ({RAY_EXTRA})") from None
    return ray


def cpus_per_actor(nodes: list[dict], gpus: int, actors: int) -> int:
    """The CPU cores each actor asks Ray for: its node's cores per GPU (per actor on a cluster
    without GPUs), on the node with the fewest, so that every actor fits on any node. The encoder
    needs them, and Ray gives an actor's torch and OpenMP as many threads as it asked for cores
    (one, had it asked for one)."""
    alive = [node["Resources"] for node in nodes if node.get("Alive")]
    if gpus:
        shares = [r.get("CPU", 0) / r["GPU"] for r in alive if r.get("GPU")]
    else:
        per_node = -(-actors // max(len(alive), 1))
        shares = [r.get("CPU", 0) / per_node for r in alive]
    return max(1, int(min(shares, default=1)))


class ClusterEngine:
    """The batch's engine on a Ray cluster: :meth:`restore` runs a file on an actor with a free
    slot and returns its summary, as :meth:`Engine.restore` does on this machine. ``address`` is
    "local" (a Ray instance started here for this run), "auto" (the running cluster) or
    "ray://host:port"; ``actors`` defaults to one per GPU of the cluster, else one per node. Each
    actor runs ``jobs`` units at once (``--jobs``), so that one's start overlaps another's end
    on its GPU as on a single machine."""

    def __init__(self, options: RestoreOptions, address: str, actors: int | None = None, jobs: int = 1) -> None:
        ray = _ray()
        self.planned_frames: int | None = None
        self._started = not ray.is_initialized()
        if self._started:
            settings = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False}
            try:
                if address == "local":
                    ray.init(object_store_memory=256 * 1024 * 1024, **settings)
                else:
                    ray.init(address=address, **settings)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise UsageError(f"--ray {address}: no Ray cluster to join ({error_line(exc)})") from None
        gpus = int(ray.cluster_resources().get("GPU", 0))
        count = actors or gpus or sum(1 for node in ray.nodes() if node.get("Alive"))
        actor = ray.remote(RestoreActor)
        placement = {"num_gpus": 1 if gpus else 0, "num_cpus": cpus_per_actor(ray.nodes(), gpus, count),
                     "max_restarts": RETRIES,
                     "max_task_retries": RETRIES, "namespace": NAMESPACE,
                     "max_concurrency": 2 * jobs}  # each unit's restore() in a thread, its progress() in another
        if not gpus:  # a cluster without GPUs runs its actors on the CPU, whatever this machine has
            options = dataclasses.replace(options, device="cpu", gpus=None)
        self.options = options  # as the actors have them: the split jobs' work directories are named by them
        run = f"{socket.gethostname()}-{os.getpid()}"
        self.handles = [actor.options(name=f"{run}-{i}", **placement).remote(options) for i in range(count)]
        self.loads = [ActorLoad(where) for where in ray.get([h.where.remote() for h in self.handles])]
        self._free: queue.Queue[int] = queue.Queue()  # an actor index per free slot: each actor first
        for _ in range(jobs):
            for i in range(count):
                self._free.put(i)
        self.slots = count * jobs
        self._tickets = itertools.count()
        self._running: set[Any] = set()
        self._lock = threading.Lock()
        self._interrupted = False

    def parallel_jobs(self, requested: int) -> int:
        """Files at once: ``jobs`` per actor, as the cluster was built."""
        return self.slots

    def check(self, inputs: Sequence[Path], output_dir: Path) -> None:
        """Every actor can read every input and write OUTDIR, else a UsageError before any work."""
        ray = _ray()
        paths = [str(p.resolve()) for p in inputs]
        problems = [p for p in ray.get([h.check.remote(paths, str(output_dir.resolve())) for h in self.handles]) if p]
        if problems:
            raise UsageError(f"{problems[0]}: with --ray, the inputs and OUTDIR must be on a filesystem every "
                             f"node sees, at the same path")

    def restore(self, input: str | Path, output: str | Path | None, job: JobOptions | None = None,
                on_frame: FrameCallback | None = None, whole_photos: bool = False) -> Summary:
        """Restore ``input`` into ``output``: on the next free slot, or split into segments across
        the free slots when it is long (see the module's docstring); progress comes to ``on_frame``."""
        job = job or JobOptions()
        source = Path(input).resolve()
        split = self._segments(source, job) if output is not None else None
        if split is None:
            target = None if output is None else str(Path(output).resolve())
            return self._on_actor("restore", (str(source), target, job, self.planned_frames, whole_photos), on_frame)
        return self._restore_split(source, Path(output).resolve(), job, *split, on_frame)

    def _segments(self, input: Path, job: JobOptions) -> tuple[VideoInfo, list[SegmentUnit]] | None:
        """The video's probe and its units, for a video to split (None: restore it whole on one
        actor). Not split: images, --detect-only and --preview jobs, a job writing --tracks-out (one
        file of the whole clip's tracks) or measuring --qc (each track's flicker over all of it),
        interlaced video, and the options that need a first pass over the whole clip or a time range."""
        if job.detect_only or job.preview is not None or job.tracks_out is not None or job.qc or \
                input.suffix.lower() in IMAGE_EXTENSIONS:
            return None
        if self.options.selects or self.options.time_range is not None:
            return None
        try:
            info = probe(input)
        except InputError:  # the actor reports the input's own error, as a single machine does
            return None
        if info.fields is not None:
            return None
        units = plan_segments(input, job.segment_frames, FaceTracker(smooth=self.options.smooth).context)
        return None if units is None else (info, units)

    def _restore_split(self, input: Path, output: Path, job: JobOptions, info: VideoInfo, units: list[SegmentUnit],
                       on_frame: FrameCallback | None) -> Summary:
        """A long video's segments on the actors' free slots, then OUTPUT assembled here. The driver holds
        OUTPUT (its temporary file) from the start, so a wrong path fails before any work."""
        started = time.perf_counter()
        check_paths(input, output, job.overwrite, CONTAINERS)
        with open_input(input) as container, \
                VideoWriter(output, container, info, self.options, job.overwrite) as writer:
            if not job.resume:  # a fresh start: whatever an earlier run left goes
                shutil.rmtree(work_dir_for(output), ignore_errors=True)
            store = SegmentStore.for_job(input, output, job.segment_frames, self.options.fingerprint())
            done = store.finished()
            todo = [u for u in units if u.segment not in done]
            refs: set[Any] = set()  # this file's running units, cancelled if one fails
            with ThreadPoolExecutor(self.slots, thread_name_prefix="segment") as pool:
                futures = [pool.submit(self._on_actor, "restore_segment",
                                       (str(input), str(output), job, unit, self.planned_frames), on_frame, refs)
                           for unit in todo]
                try:
                    parts = [f.result() for f in futures]
                except BaseException:
                    self._cancel(refs)
                    raise
            with open_input(input) as source:
                assemble(writer, store, source, len(units))
        store.remove()
        return Summary(output, sum(p.frames for p in parts), sum(p.faces for p in parts),
                       sum(p.frames_with_faces for p in parts), time.perf_counter() - started,
                       warnings=sorted({w for p in parts for w in p.warnings}), damaged=sum(p.damaged for p in parts),
                       resumed_at=todo[0].start if done and todo else 0, decoder=parts[0].decoder if parts else "")

    def _on_actor(self, method: str, args: tuple, on_frame: FrameCallback | None,
                  refs: set[Any] | None = None) -> Summary:
        """``method(*args)`` on the next actor with a free slot, its progress polled into ``on_frame``."""
        ray = _ray()
        if self._interrupted:
            raise KeyboardInterrupt
        slot = self._free.get()
        handle, load = self.handles[slot], self.loads[slot]
        ref, ticket = None, next(self._tickets)
        try:
            ref = getattr(handle, method).remote(ticket, *args)
            with self._lock:
                self._running.add(ref)
                if refs is not None:
                    refs.add(ref)
            seen = (0, 0)
            while not ray.wait([ref], timeout=POLL_SECONDS)[0]:
                try:
                    now = ray.get(handle.progress.remote(ticket), timeout=POLL_SECONDS)
                except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
                    continue  # restarting: its unit starts again
                if on_frame is not None and now[0] > seen[0]:
                    on_frame(now[0] - seen[0], now[1] - seen[1])
                seen = max(seen, now)
            try:
                summary = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # the unit's own error, as the engine raised it
                raise (exc.cause or exc) from None
            except ray.exceptions.TaskCancelledError:
                raise KeyboardInterrupt from None
            if on_frame is not None and summary.frames > seen[0]:
                on_frame(summary.frames - seen[0], max(0, summary.faces - seen[1]))
            load.units, load.frames = load.units + 1, load.frames + summary.frames
            load.faces, load.seconds = load.faces + summary.faces, load.seconds + summary.seconds
            return summary
        finally:
            with self._lock:
                self._running.discard(ref)
            self._free.put(slot)

    def _cancel(self, refs: set[Any]) -> None:
        ray = _ray()
        with self._lock:
            for ref in refs & self._running:
                ray.cancel(ref)

    def interrupt(self) -> None:
        """Stop every running file (each actor's engine removes its partial output) and any later one."""
        self._interrupted = True
        self._cancel(self._running)

    def describe(self) -> str:
        """One line per actor: where it ran, its units (files and segments), frames and faces/s."""
        return "\n".join(load.describe(f"actor {i}") for i, load in enumerate(self.loads))

    def close(self) -> None:
        """Let the actors go (and the Ray instance this run started)."""
        ray = _ray()
        for handle in self.handles:
            ray.kill(handle)
        self.handles = []
        if self._started:
            ray.shutdown()

    def __enter__(self) -> ClusterEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

