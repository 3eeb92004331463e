"""Where the GPU time goes, and what the GPU waits for: a torch-profiler trace of one whole run.

Builds a 1080p clip from a real sample (scaled and looped), runs the tool on it once to compile
and warm up, then again under the profiler with the device worker's steps labelled. Prints:

- GPU time per step (the worker step that launched each kernel or copy), per frame and per face;
  "(unlabelled)" holds what the trace does not tie to a launch: pageable host-to-device copies,
  and some kernels of GPEN's replayed CUDA graph;
- the worker thread's wall time per step;
- the GPU's idle share of the run, and what the worker thread was doing while the GPU was idle
  (a GPU left idle while the worker launches is waiting for our host code).

    python benchmarks/trace_pipeline.py CLIP --weights GPEN.pth --detector-weights retinaface.pth
    python benchmarks/trace_pipeline.py CLIP --smoke ...   # CPU, a second of video: checks the harness
"""

from __future__ import annotations

import argparse
import bisect
import functools
import gzip
import itertools
import json
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
from pipeline_bench import build_clip, hd_size
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile, record_function

from gpen_video import transfer
from gpen_video.api import restore_video
from gpen_video.faces.detect import FaceDetector
from gpen_video.media.colour import PlaneLayout
from gpen_video.pipeline.scheduler import WorkerPool, _Tasks
from gpen_video.worker import device, restorer
from gpen_video.worker.compose import Compositor

#: (owner, attribute, label): the worker's steps, labelled in the trace.
STEPS = [
    (_Tasks, "take", "take"), (WorkerPool, "_detected", "detected"), (WorkerPool, "_restored", "collect"),
    (device.DeviceWorker, "queue_detect", "detect"), (device.DeviceWorker, "queue_restore", "restore"),
    (device.DeviceWorker, "_upload", "upload"), (device.DeviceWorker, "_resident", "resident"),
    (FaceDetector, "queue_rgb", "detector"), (device, "thumbnail_means", "thumbnails"),
    (PlaneLayout, "to_rgb", "to_rgb"), (PlaneLayout, "to_planes", "to_planes"), (PlaneLayout, "merge", "merge"),
    (restorer, "similarity_transforms", "transforms"), (restorer, "warp_faces", "warp"),
    (restorer.FaceRestorer, "_gpen", "gpen"), (Compositor, "paste_batch", "paste"),
    (device.DeviceWorker, "_download", "download"), (transfer.Pending, "result", "wait"),
]
_GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


def _labelled(fn: Callable, label: str) -> Callable:
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with record_function(label):
            return fn(*args, **kwargs)
    return run


def label_steps() -> None:
    for owner, name, label in STEPS:
        setattr(owner, name, _labelled(getattr(owner, name), label))


def _label_paths(events: list[dict]) -> tuple[dict[int, str], dict[int, list[tuple[float, float, str]]]]:
    """Correlation id -> the label path (outer/inner) around the runtime call that launched it, and
    per thread the label paths as (start, end, path) intervals of their innermost label."""
    by_thread: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("cat") in ("user_annotation", "cuda_runtime", "cuda_driver") and "dur" in e:
            by_thread[e["tid"]].append(e)
    launched: dict[int, str] = {}
    spans: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for tid, items in by_thread.items():
        items.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[tuple[float, str]] = []  # (end, label)
        for e in items:
            while stack and stack[-1][0] <= e["ts"]:
                stack.pop()
            if e["cat"] == "user_annotation":
                stack.append((e["ts"] + e["dur"], e["name"]))
                spans[tid].append((e["ts"], e["ts"] + e["dur"], "/".join(label for _, label in stack)))
            elif "correlation" in e.get("args", {}):
                launched[e["args"]["correlation"]] = "/".join(label for _, label in stack) or "(unlabelled)"
    return launched, spans


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _doing_at(spans: list[tuple[float, float, str]], starts: list[float], t: float) -> str:
    """The innermost label path on a thread at time ``t``. Labels nest, so going back from the
    last one to start before ``t``, the first that still runs at ``t`` is the innermost; a
    top-level one that has ended means the thread was between steps."""
    for k in range(bisect.bisect_right(starts, t) - 1, -1, -1):
        _, end, path = spans[k]
        if t < end:
            return path
        if "/" not in path:
            break
    return "(between steps)"


def summarise(events: list[dict], frames: int, faces: int) -> dict:
    """The trace's numbers: the worker thread's wall time per step and, where a GPU ran, GPU
    time per step, its busy share, and what the worker was doing while it idled."""
    launched, spans = _label_paths(events)
    workers = {tid for tid, s in spans.items() if any(path == "detect" for _, _, path in s)}
    host: dict[str, float] = defaultdict(float)
    for tid in workers:
        for a, b, path in spans[tid]:
            host[path] += b - a
    out: dict = {"frames": frames, "faces": faces,
                 "worker_ms_per_frame": {k: v / 1e3 / frames for k, v in sorted(host.items(), key=lambda kv: -kv[1])}}
    gpu = [e for e in events if e.get("cat") in _GPU_CATEGORIES and "dur" in e]
    if not gpu:
        return out
    per_step: dict[str, float] = defaultdict(float)
    for e in gpu:
        per_step[launched.get(e.get("args", {}).get("correlation"), "(unlabelled)")] += e["dur"]
    busy = _merged([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    start, end = min(spans[tid][0][0] for tid in workers), busy[-1][1]
    out["seconds"] = (end - start) / 1e6  # from the first detection to the last GPU work
    out["gpu_busy"] = sum(min(b, end) - max(a, start) for a, b in busy if b > start) / (end - start)
    out["gpu_ms_per_frame"] = {k: v / 1e3 / frames for k, v in sorted(per_step.items(), key=lambda kv: -kv[1])}
    idle: dict[str, float] = defaultdict(float)
    for tid in workers:
        spans_t = sorted(spans[tid])
        starts = [s for s, _, _ in spans_t]
        for (_, a), (b, _) in itertools.pairwise(busy):
            if a >= start:
                idle[_doing_at(spans_t, starts, (a + b) / 2)] += b - a
    out["gpu_idle_seconds"] = sum(idle.values()) / 1e6
    out["gpu_idle_share_by_worker_step"] = {k: v / 1e6 / out["gpu_idle_seconds"]
                                            for k, v in sorted(idle.items(), key=lambda kv: -kv[1])}
    return out


def report(numbers: dict) -> None:
    frames, faces = numbers["frames"], max(numbers["faces"], 1)
    print(f"{frames} frames, {numbers['faces']} faces")
    if "gpu_busy" in numbers:
        print(f"{numbers['seconds']:.2f} s from the first detection to the last GPU work; "
              f"GPU busy {numbers['gpu_busy']:.0%}")
        print("\nGPU time per step (launched inside it)      ms/frame   ms/face   share")
        total = sum(numbers["gpu_ms_per_frame"].values())
        for path, ms in numbers["gpu_ms_per_frame"].items():
            print(f"  {path:42s} {ms:8.3f} {ms * frames / faces:9.3f} {ms / total:7.1%}")
    print("\nworker thread's wall time per step (long on little GPU work: it waited)   ms/frame")
    for path, ms in numbers["worker_ms_per_frame"].items():
        print(f"  {path:42s} {ms:8.3f}")
    if "gpu_busy" in numbers:
        print(f"\nGPU idle {numbers['gpu_idle_seconds']:.2f} s; meanwhile the worker was in        share of idle")
        for path, share in list(numbers["gpu_idle_share_by_worker_step"].items())[:15]:
            print(f"  {path:50s} {share:7.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clip", help="a real sample, e.g. ../shared/media/videos/multi_face_crowd_facenet_pytorch.mp4")
    ap.add_argument("--weights", required=True)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--detector", default="retinaface-mobile")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--preset", default="ultrafast")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--smoke", action="store_true", help="CPU, a second of the clip at 960x540")
    ap.add_argument("--trace", help="also write the Chrome trace (gzipped JSON) here")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()

    cuda = torch.cuda.is_available() and not args.smoke
    options = dict(weights=args.weights, detector=args.detector, detector_weights=args.detector_weights,
                   batch_size=args.batch_size, preset=args.preset, progress=False, overwrite=True, compile="on",
                   **({"gpus": [0]} if cuda else {"device": "cpu"}))
    with tempfile.TemporaryDirectory() as tmp:
        clip = build_clip(Path(args.clip), Path(tmp) / "clip.mp4", 1.0 if args.smoke else args.seconds,
                          hd_size(args.smoke))
        restore_video(clip, Path(tmp) / "warm.mp4", **options)
        label_steps()
        with profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda,
                     experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
            summary = restore_video(clip, Path(tmp) / "out.mp4", **options)
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
        if args.trace:
            with gzip.open(args.trace, "wt") as out:
                json.dump({"traceEvents": events}, out)
    print(f"run under the profiler: {summary.fps:.1f} fps, {summary.faces / summary.seconds:.0f} faces/s")
    numbers = summarise(events, summary.frames, summary.faces)
    report(numbers)
    if args.json:
        Path(args.json).write_text(json.dumps(numbers, indent=1))


if __name__ == "__main__":
    main()
