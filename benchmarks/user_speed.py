"""The speed a user gets: each run a fresh process with the default options, on clips encoded as
cameras and phones encode them (x264 ``medium``, High profile, B-frames), beside ``--compile on``
with a warm compile cache.

Clips, built from the shared samples at 1920x1080: 31 frames of the talking head (the first
frame's time), 10 s and 60 s of it (one face), and 20 s of the crowd (about five faces a frame).
Runs, in this order:

- ``defaults, fresh machine``: every clip with an empty ``GPEN_VIDEO_HOME`` and an empty Triton
  cache of its own, as on a machine the tool has never run on;
- ``--compile on, cold cache``: the 10 s clip once, filling a shared compile cache;
- ``--compile on, warm cache``: every clip, with that cache;
- ``defaults, warm``: every clip, in the home of the ``--compile on`` runs: its caches warm, and
  GPEN's compiled speed measured there, so that ``--compile auto`` decides from this machine's
  own figures once the first of these runs has measured the eager speed.

Each row: whether GPEN was compiled, the job's fps, its fps after the first frame was written
(the pipeline's pace, which a longer clip approaches), seconds from the process's launch to its
first restored frame written, and the process's wall time. One untimed run first fills a bytecode cache
(``PYTHONPYCACHEPREFIX``), as pip leaves one beside the packages it installs; the timed runs use it.

    python benchmarks/user_speed.py --weights G.pth --detector-weights retinaface_mobilenet0.25.pth
    python benchmarks/user_speed.py --smoke ...   # CPU, a second of small video: checks the harness
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline_bench import SHARED, build_clip

#: One run in a fresh process. argv: the launch time (time.time()), clip, output, options as JSON.
_RUN = """
import json, sys, time
launched = float(sys.argv[1])
from gpen_video.api import restore_video
summary = restore_video(sys.argv[2], sys.argv[3], **json.loads(sys.argv[4]))
returned = time.perf_counter()
written = summary.milestones["written"]
print(json.dumps({"frames": summary.frames, "faces": summary.faces, "fps": round(summary.fps, 1),
                  "after_first_frame_fps": round((summary.frames - 1) / (returned - written), 1),
                  "first_frame_from_launch_s": round(time.time() - (returned - written) - launched, 2),
                  "decoder": summary.decoder, "compiled": "GPEN (compiling)" in summary.startup}))
"""
#: name -> (shared sample, seconds); the 31-frame clip times the first frame
CLIPS = {"first-31": ("talking_head_speech_retalking2.mp4", 31 / 25),
         "one-face-10s": ("talking_head_speech_retalking2.mp4", 10.0),
         "one-face-60s": ("talking_head_speech_retalking2.mp4", 60.0),
         "crowd-20s": ("multi_face_crowd_facenet_pytorch.mp4", 20.0)}


def run(clip: Path, output: Path, options: dict, home: Path, env: dict[str, str]) -> dict:
    """One restoration in a fresh process whose GPEN_VIDEO_HOME and Triton cache are under ``home``."""
    launched = time.time()
    done = subprocess.run([sys.executable, "-c", _RUN, f"{launched:.6f}", str(clip), str(output),
                           json.dumps(options)], check=True, capture_output=True, text=True,
                          env={**env, "GPEN_VIDEO_HOME": str(home), "TRITON_CACHE_DIR": str(home / "triton")})
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": round(time.time() - launched, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--clips", nargs="+", choices=list(CLIPS), default=list(CLIPS))
    ap.add_argument("--smoke", action="store_true", help="CPU, a second of small video: checks the harness")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    options = {"weights": str(Path(args.weights).resolve()), "detector": "retinaface-mobile",
               "detector_weights": str(Path(args.detector_weights).resolve()), "progress": False,
               "overwrite": True, **({"device": "cpu"} if args.smoke else {})}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp / "bytecode")}
        clips = {name: build_clip(SHARED / sample, tmp / f"{name}.mp4", min(seconds, 1.0) if args.smoke else seconds,
                                  (320, 320) if args.smoke else (1920, 1080), camera=True)
                 for name, (sample, seconds) in CLIPS.items() if name in args.clips}
        first = next(iter(clips.values()))
        run(first, tmp / "out.mp4", options, tmp / "home-bytecode", env)  # fills the bytecode cache: not timed

        def timed(variant: str, clip: str, home: Path, extra: dict) -> None:
            result = run(clips[clip], tmp / "out.mp4", {**options, **extra}, home, env)
            rows.append({"variant": variant, "clip": clip, **result})
            print(json.dumps(rows[-1]), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))

        for clip in clips:
            timed("defaults, fresh machine", clip, tmp / f"home-fresh-{clip}", {})
        timed("--compile on, cold cache", next(iter(clips)), tmp / "home-compiled", {"compile": "on"})
        for clip in clips:
            timed("--compile on, warm cache", clip, tmp / "home-compiled", {"compile": "on"})
        for clip in clips:
            timed("defaults, warm", clip, tmp / "home-compiled", {})
        speeds = tmp / "home-compiled" / "gpen-speeds.json"
        if speeds.exists():  # what --compile auto decided the warm defaults' runs from
            print(f"GPEN's speeds as this machine measured them:\n{speeds.read_text()}")
    compiled = {r["clip"]: r for r in rows if r["variant"] == "--compile on, warm cache"}
    print("\n| clip | run | compiled | job fps | fps after the first frame | × compiled, warm | "
          "first frame from launch, s | process wall s |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        warm = compiled.get(r["clip"])
        ratio = r["after_first_frame_fps"] / warm["after_first_frame_fps"] if warm else 0
        compiled_here = "yes" if r["compiled"] else "no"
        print(f"| {r['clip']} | {r['variant']} | {compiled_here} | {r['fps']} | {r['after_first_frame_fps']} | "
              f"{ratio:.2f} | {r['first_frame_from_launch_s']} | {r['wall_s']} |")


if __name__ == "__main__":
    main()
