"""Why the one-face run encodes slower than a plain transcode of the same clip: variants that add
one part of the pipeline at a time, each in a fresh process, with the CPU seconds of each thread
group (benchmarks/thread_cpu.py). BENCHMARKS.md, runs G, AD and BL, has what they showed. A variant
that runs the pipeline takes a decoder after a colon (``default:nvdec``; the CPU's by default).

    python benchmarks/encoder_contention.py --weights G.pth --detector-weights R.pth
    python benchmarks/encoder_contention.py ... --size 3840x2160 --variants transcode,no-faces:nvdec,default:nvdec
    python benchmarks/encoder_contention.py --smoke ...   # CPU, one second of video: checks the harness
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

#: name -> what it adds to a plain transcode (decode thread + encode thread, the tool's reader/writer)
VARIANTS = {
    "transcode": "nothing",
    "transcode-planes": ("each frame copied into a new frame by the encoding thread "
                         "(restored frames were, to session 10)"),
    "transcode-held": "up to 192 decoded frames waiting for the encoder instead of 64 (the pipeline holds ~150)",
    "transcode-detecting": "a thread detecting faces in 16 random frames, over and over, on the device",
    "no-faces": "the whole pipeline, every face filtered out by size: detection and tracking, no restoration",
    "no-detection": "the pipeline's threads alone: every frame outside the time range, none detected or staged",
    "default": "the whole pipeline",
    "batch-8": "the whole pipeline, batches of 8 frames instead of 16 (fewer frames in flight)",
    "torch-threads-1": "the whole pipeline, torch.set_num_threads(1)",
    "omp-passive": "the whole pipeline, OMP_WAIT_POLICY=passive",
    "blocking-sync": "the whole pipeline, the CUDA runtime blocking instead of spinning while it waits",
    "strength-0": "the whole pipeline, restored faces not blended in (--strength 0): same work, source content",
    "transcode-capped": "a transcode with the encoder's threads capped at --capped-threads",
    "capped": "the whole pipeline with the encoder's threads capped at --capped-threads",
    "transcode-staged": "a transcode whose decode thread packs each frame into a pinned buffer, as the pipeline's does",
    "encode-only": "the encoder alone: the clip's frames decoded into memory first, only the encoding timed",
    "encode-beside-python": "the encoder alone beside a thread holding the GIL a third of the time (1 ms of "
                            "Python, 2 ms asleep), as the pipeline's threads together hold it (22-32 %, run BK)",
    "switch-1ms": "the whole pipeline, a 1 ms GIL switch interval instead of 5 ms",
    "switch-0.25ms": "the whole pipeline, a 0.25 ms GIL switch interval",
    "in-flight-2x": "the whole pipeline, twice the frames in flight between the decoder and the encoder",
    "whole-batches": "the whole pipeline, batches of 16 frames at any frame size (4K's have 4: run AK)",
}
#: variant -> sys.setswitchinterval: how long a thread waiting for the GIL waits before it asks for it
SWITCH_INTERVALS = {"switch-1ms": 0.001, "switch-0.25ms": 0.00025}
DEFAULT_VARIANTS = "transcode,transcode-planes,transcode-detecting,no-faces,default,transcode"


def _blocking_sync() -> None:
    """cudaDeviceScheduleBlockingSync, set before torch creates its CUDA context."""
    import torch  # noqa: F401  (loads libcudart)

    path = next(line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "libcudart" in line)
    if ctypes.CDLL(path).cudaSetDeviceFlags(4) != 0:
        raise RuntimeError("cudaSetDeviceFlags failed")


@contextlib.contextmanager
def _repeating(step: Callable[[], None], name: str) -> Iterator[dict[str, float]]:
    """A thread named ``name`` running ``step`` over and over until the block ends; yields
    {"steps": steps run, "cpu_s": the thread's CPU seconds}, filled in when the block ends. The
    thread reads its own CPU time: the thread sampler (thread_cpu.py) loses a thread's last
    interval, which on a short run is all of it."""
    done, record = threading.Event(), {"steps": 0, "cpu_s": 0.0}

    def loop() -> None:
        while not done.is_set():
            step()
            record["steps"] += 1
        record["cpu_s"] = round(time.thread_time(), 3)

    thread = threading.Thread(target=loop, name=name)
    thread.start()
    try:
        yield record
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def _detecting(device: str, detector_weights: str) -> Iterator[dict[str, float]]:
    """A thread running the detector on 16 random 1080p frames until the block ends; yields what
    :func:`_repeating` does."""
    import torch

    from gpen_video.faces.detect import FaceDetector

    detector = FaceDetector("retinaface-mobile", detector_weights, device=device)
    frames = torch.randint(0, 255, (16, 3, 1080, 1920), dtype=torch.uint8, device=device)
    detector.detect_rgb(frames)  # first call: cuDNN picks its kernels
    with _repeating(lambda: detector.detect_rgb(frames), "detecting") as record:
        yield record


def _python_spell() -> None:
    """1 ms of pure Python, then 2 ms asleep: a third of the interpreter lock taken in a short
    spell, as the pipeline's Python threads take it."""
    until = time.perf_counter() + 0.001
    while time.perf_counter() < until:
        pass
    time.sleep(0.002)


@contextlib.contextmanager
def _altered(variant: str) -> Iterator[None]:
    """For the block, the pipeline's frames in flight doubled (``in-flight-2x``), its batches of
    frames kept at ``--batch-size`` whatever the frame size (``whole-batches``), or every frame
    taken to lie outside the time range (``no-detection``, run with ``--start 0``)."""
    from gpen_video.pipeline import batching, job

    saved = job.frames_in_flight, batching.frames_per_batch, batching.TimeRange.tracks
    if variant == "in-flight-2x":
        job.frames_in_flight = lambda *args: 2 * saved[0](*args)
    if variant == "whole-batches":
        batching.frames_per_batch = lambda batch_size, pixels: batch_size
    if variant == "no-detection":
        batching.TimeRange.tracks = lambda span, time: False
    try:
        yield
    finally:
        job.frames_in_flight, batching.frames_per_batch, batching.TimeRange.tracks = saved


@contextlib.contextmanager
def _timed_queue_waits() -> Iterator[dict[str, float]]:
    """Seconds each pipeline thread spends in the pipeline's queue reads: for the encode thread,
    the time it had no frame to encode (with the GIL waits of its return)."""
    from gpen_video.pipeline.runtime import StageRuntime

    waits: dict[str, float] = {}
    read = StageRuntime.get

    def timed(self: StageRuntime, q: object) -> object:
        t0 = time.perf_counter()
        try:
            return read(self, q)
        finally:
            name = threading.current_thread().name
            waits[name] = waits.get(name, 0.0) + time.perf_counter() - t0

    StageRuntime.get = timed
    try:
        yield waits
    finally:
        StageRuntime.get = read


def run_variant(spec: str, clip: Path, args: argparse.Namespace) -> dict:
    """One variant (``name`` or ``name:decoder``), in this process: fps, CPU seconds of the process
    and of each thread group, the steps and CPU seconds of the thread a variant runs alongside
    (``alongside``: ``transcode-detecting``'s batches, ``encode-beside-python``'s spells) and, for
    a render, when its first picture left each stage (``first_picture_s``)."""
    variant, _, decoder = spec.partition(":")
    if variant == "blocking-sync":
        _blocking_sync()
    import torch
    from pipeline_bench import encode_only_fps, transcode_fps
    from thread_cpu import ThreadCPU

    from gpen_video.api import restore_video
    from gpen_video.options import RestoreOptions

    if variant == "torch-threads-1":
        torch.set_num_threads(1)
    if variant in SWITCH_INTERVALS:
        sys.setswitchinterval(SWITCH_INTERVALS[variant])
    out = clip.with_name(f"{variant}-{decoder or 'cpu'}.mp4")
    busy: dict[str, float] = {}
    first_picture: dict[str, float] = {}
    before = resource.getrusage(resource.RUSAGE_SELF)
    beside = _repeating(_python_spell, "python-beside") if variant == "encode-beside-python" \
        else _detecting(args.device, args.detector_weights) if variant == "transcode-detecting" \
        else contextlib.nullcontext({})
    with ThreadCPU() as cpu, beside as alongside:
        if variant.startswith("encode-"):
            start = time.perf_counter()
            fps = encode_only_fps(clip, out, RestoreOptions(preset=args.preset))
            seconds = time.perf_counter() - start
        elif variant.startswith("transcode"):
            start = time.perf_counter()
            settings = RestoreOptions(preset=args.preset,
                                      encoder_threads=args.capped_threads if variant == "transcode-capped" else 0)
            fps = transcode_fps(clip, out, settings, planes=variant == "transcode-planes",
                                queued=192 if variant == "transcode-held" else 64,
                                staged=variant == "transcode-staged")
            seconds = time.perf_counter() - start
        else:
            device = {"gpus": [0]} if args.device == "cuda" else {"device": "cpu"}
            with _timed_queue_waits() as waits, _altered(variant):
                summary = restore_video(clip, out, **device, compile="on", weights=args.weights,
                                        decoder=decoder or "cpu", detector="retinaface-mobile",
                                        detector_weights=args.detector_weights, preset=args.preset,
                                        min_face=1e9 if variant == "no-faces" else 0.0,
                                        start=0.0 if variant == "no-detection" else None,
                                        strength=0.0 if variant == "strength-0" else 1.0,
                                        batch_size=8 if variant == "batch-8" else 16,
                                        encoder_threads=args.capped_threads if variant == "capped" else 0,
                                        progress=False, overwrite=True)
            fps, seconds = summary.fps, summary.seconds
            first_picture = {stage: round(s, 3) for stage, s in summary.first_picture().items()}
            busy = {k: round(v / summary.seconds, 3) for k, v in summary.busy.items()}
            busy.update({f"{name} waiting for its queue": round(s / summary.seconds, 3) for name, s in waits.items()})
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"variant": spec, "fps": round(fps, 1), "seconds": round(seconds, 2),
            "process_cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
            "output_bytes": out.stat().st_size, "busy": busy, "first_picture_s": first_picture,
            "thread_cpu_s": cpu.by_group(),
            "busiest_thread_s": cpu.busiest(), "alongside": alongside}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--seconds", type=float, default=40.0, help="length of the one-face clip")
    ap.add_argument("--size", default="1920x1080", help="the one-face clip's frame size")
    ap.add_argument("--preset", default="veryfast")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--capped-threads", type=int, default=12, help="encoder threads of the *capped variants")
    ap.add_argument("--smoke", action="store_true", help="CPU, one second of small video")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--run", help=argparse.SUPPRESS)  # internal: one variant, in the child process
    ap.add_argument("--clip", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run_variant(args.run, Path(args.clip), args)))
        return
    from pipeline_bench import SHARED, build_clip

    if args.smoke:
        args.device, args.seconds = "cpu", 1.0
    variants = args.variants.split(",")
    if unknown := {v.partition(":")[0] for v in variants} - set(VARIANTS):
        ap.error(f"unknown variants: {', '.join(sorted(unknown))}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        clip = build_clip(SHARED / "talking_head_speech_retalking2.mp4", Path(tmp) / "one.mp4", args.seconds,
                          None if args.smoke else tuple(int(v) for v in args.size.split("x")))
        for variant in variants:
            env = {**os.environ, **({"OMP_WAIT_POLICY": "passive"} if variant == "omp-passive" else {})}
            cmd = [sys.executable, __file__, "--run", variant, "--clip", str(clip), "--weights", args.weights,
                   "--detector-weights", args.detector_weights, "--preset", args.preset, "--device", args.device,
                   "--capped-threads", str(args.capped_threads)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
    transcode = rows[0]["fps"] if rows[0]["variant"] == "transcode" else None
    print("\n| variant | adds | fps | vs transcode |\n|---|---|---|---|")
    for row in rows:
        ratio = f"{row['fps'] / transcode:.2f}" if transcode else ""
        name, _, decoder = row["variant"].partition(":")
        variant = f"{VARIANTS[name]} ({decoder})" if decoder else VARIANTS[name]
        print(f"| {row['variant']} | {variant} | {row['fps']:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
