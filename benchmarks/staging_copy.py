"""What the decode thread's staging of a frame costs on its own: the copy of a decoded 1080p frame
into the buffer its upload reads, against its parts (the pinned allocation, the copy into pinned
or pageable memory). BENCHMARKS.md, run AH, has what it showed; encoder_contention.py's
``transcode-staged`` variant measures the same copy beside the encoder.

    python benchmarks/staging_copy.py
    python benchmarks/staging_copy.py --smoke   # CPU, a few frames: the pageable cases only
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import torch

from gpen_video.media.colour import frame_planes, pack_planes
from gpen_video.worker.device import stage_planes

IN_FLIGHT = 150  # buffers held at once, about as many frames as the pipeline has in flight


def _frames(count: int, width: int, height: int) -> list[av.VideoFrame]:
    """Random yuv420p frames with FFmpeg's padded lines, as a decoder returns them."""
    rng = np.random.default_rng(0)
    frames = []
    for _ in range(count):
        frame = av.VideoFrame(width, height, "yuv420p")
        for plane in frame.planes:
            plane.update(rng.integers(0, 256, plane.buffer_size, dtype=np.uint8).tobytes())
        frames.append(frame)
    return frames


def _time(case: Callable[[int, av.VideoFrame], object], frames: list[av.VideoFrame], count: int) -> dict:
    """Wall and thread-CPU milliseconds per frame, the last IN_FLIGHT results held meanwhile."""
    held: collections.deque = collections.deque(maxlen=IN_FLIGHT)
    for i in range(min(count, IN_FLIGHT)):  # fill the allocator's cache first
        held.append(case(i, frames[i % len(frames)]))
    wall, cpu = time.perf_counter(), time.thread_time()
    for i in range(count):
        held.append(case(i, frames[i % len(frames)]))
    return {"wall_ms": (time.perf_counter() - wall) / count * 1e3, "cpu_ms": (time.thread_time() - cpu) / count * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=600, help="frames timed per case")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="CPU, a few small frames")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    width, height, count = (128, 72, 20) if args.smoke else (1920, 1080, args.frames)
    frames = _frames(8 if args.smoke else 64, width, height)
    total = sum(p.size for p in frame_planes(frames[0]))
    pageable = [np.zeros(total, np.uint8) for _ in range(IN_FLIGHT)]
    cases: dict[str, Callable[[int, av.VideoFrame], object]] = {
        "copy into preallocated pageable buffers": lambda i, f: pack_planes(f, pageable[i % IN_FLIGHT]),
        "stage_planes, pageable": lambda i, f: stage_planes(f, pinned=False),
    }
    if torch.cuda.is_available():
        pinned = [torch.zeros(total, dtype=torch.uint8, pin_memory=True) for _ in range(IN_FLIGHT)]
        cases = {
            "stage_planes, pinned (the pipeline's staging)": lambda i, f: stage_planes(f, pinned=True),
            "torch.empty(pin_memory=True) alone": lambda i, f: torch.empty(total, dtype=torch.uint8, pin_memory=True),
            "copy into preallocated pinned buffers": lambda i, f: pack_planes(f, pinned[i % IN_FLIGHT].numpy()),
            **cases,
        }
    rows = []
    for repeat in range(args.repeats):
        for name, case in cases.items():
            rows.append({"case": name, "repeat": repeat, **_time(case, frames, count)})
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n| per {width}x{height} frame | wall ms | CPU ms |\n|---|---|---|")
    for row in rows:
        print(f"| {row['case']} | {row['wall_ms']:.3f} | {row['cpu_ms']:.3f} |")


if __name__ == "__main__":
    main()
