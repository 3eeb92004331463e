"""Where a restore batch spends its time, step by step (the GPU synchronised after each step).

Scales a clip to 1080p, detects and tracks its first frames with the tool's own worker, then
times detection and each step of restoring them in batches of frames, as the pipeline does:

    python benchmarks/profile_restore.py CLIP --weights GPEN.pth --detector-weights retinaface.pth
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from pipeline_bench import build_clip

from gpen_video.faces.align import similarity_transforms, warp_faces
from gpen_video.faces.detect import box_size
from gpen_video.faces.track import track_faces
from gpen_video.media.demux import read_frames
from gpen_video.model.weights import load_gpen_weights
from gpen_video.options import RestoreOptions
from gpen_video.worker.device import DeviceWorker


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clip")
    ap.add_argument("--weights", required=True)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16, help="frames per restore batch (and faces per GPEN call)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    state_dict, _ = load_gpen_weights(weights=args.weights, progress=False)
    options = RestoreOptions(precision="fp16", batch_size=args.batch, detector="retinaface-mobile",
                             detector_weights=args.detector_weights)
    worker = DeviceWorker(options, "cuda")
    worker.load_restorer(state_dict)
    restorer = worker.restorer
    with tempfile.TemporaryDirectory() as tmp:
        clip = build_clip(Path(args.clip), Path(tmp) / "clip.mp4", args.frames / 25, (1920, 1080))
        frames = list(read_frames(clip, limit=args.frames))
    found = [f for i in range(0, len(frames), args.batch) for f in worker.detect(frames[i : i + args.batch])[0]]
    tracked = track_faces((s.index, s.time, f, s.rgb()) for s, f in zip(frames, found))
    specs = [[(f.landmarks, box_size(f.box)) for f in t.faces] for t in tracked]

    steps: dict[str, float] = defaultdict(float)

    def timed(name: str, fn):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        steps[name] += time.perf_counter() - t0
        return out

    faces = 0
    for _ in range(args.repeats):
        for i in range(0, len(frames), args.batch):
            batch, spec = frames[i : i + args.batch], specs[i : i + args.batch]
            layout = batch[0].layout
            timed("detect (whole, with upload)", lambda: worker.detect(batch))
            planes = timed("upload", lambda: worker._upload(batch))
            rgb = timed("yuv->rgb", lambda: layout.to_rgb(planes))
            points = [p for fs in spec for p, _ in fs]
            owner = [k for k, fs in enumerate(spec) for _ in fs]
            faces += len(points)
            transforms = similarity_transforms(np.stack(points), restorer.reference)
            crops = timed("warp", lambda: warp_faces(rgb, owner, transforms, restorer.crop_size))
            timed("gpen", lambda: restorer._gpen(crops))
            image, changed = timed("whole restore_rgb", lambda: restorer.restore_rgb(rgb, spec))
            merged = timed("rgb->yuv+merge", lambda: layout.merge(layout.to_planes(image, planes[0].dtype), planes,
                                                                   changed))
            timed("download", lambda: worker._download(merged))
            timed("whole restore()", lambda: worker.restore(batch, spec))
    total = steps["whole restore()"]
    print(f"{faces} faces, {len(frames) * args.repeats} frames; whole restore(): {faces / total:.0f} faces/s, "
          f"{len(frames) * args.repeats / total:.0f} frames/s")
    for name, seconds in steps.items():
        print(f"{name:20s} {seconds * 1e3 / (len(frames) * args.repeats):7.2f} ms/frame")


if __name__ == "__main__":
    main()
