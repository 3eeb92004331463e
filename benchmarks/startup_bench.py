"""Where a short job's seconds go: ``gpen-video`` on a 31-frame 640x480 clip, from process start.

Variants, each a fresh process as a user starts it:

- ``eager``: ``--compile off``;
- ``compiled-cold``: ``--compile on`` with an empty compile cache (a fresh ``GPEN_VIDEO_HOME``);
- ``compiled-warm``: ``--compile on`` again, with the cache the cold run left.

For each: the process's wall time, when its first restored frame was written (from the CLI's own
summary line), what the engine's start took (weights, workers) and, in ``first_picture_s``, when
the job's first picture left each stage, from the job's start. Also the seconds that
``import gpen_video.pipeline.engine`` takes in a fresh process, and ``steps``: one fresh process
timing each step of a start by hand (imports, device, checkpoint, layout check, model, detector,
the first and second call of the detector and of GPEN, and GPEN's first call at another batch
size), in seconds since the process began.

On a machine whose Python packages hold no bytecode (a read-only install made without it), give
the processes a bytecode cache first (``PYTHONPYCACHEPREFIX``, filled by ``python -m compileall``),
or every start also compiles ~1700 modules (8 s on the H200 machine; BENCHMARKS.md, run AR).

    python benchmarks/startup_bench.py --weights G.pth --detector-weights R.pth
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline_bench import SHARED, build_clip

SOURCE = "talking_head_speech_retalking2.mp4"
#: One start, step by step, in a child process: argv is the time it was launched, the GPEN and
#: detector checkpoints, and the device. Prints {step: seconds since launch} as JSON.
_STEPS = """
import json, sys, time
launched = float(sys.argv[1])
steps = {}
def mark(name):
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    steps[name] = round(time.time() - launched, 3)
device = sys.argv[4]
import torch
mark("import torch")
import gpen_video.pipeline.engine
mark("import gpen_video.pipeline.engine")
torch.zeros(1, device=device)
mark("device ready")
from gpen_video.model.fast import build_inference_model
from gpen_video.model.weights import check_layout, infer_config, read_state_dict
state_dict = read_state_dict(sys.argv[2])
mark("checkpoint read")
config = infer_config(state_dict)
check_layout(state_dict, config)
mark("layout checked")
model = build_inference_model(state_dict, device=torch.device(device), precision="fp16" if device != "cpu" else "fp32",
                              kernels="triton" if device != "cpu" else "torch")  # as an eager restorer builds it
mark("GPEN built")
from gpen_video.faces.detect import FaceDetector
detector = FaceDetector("retinaface-mobile", sys.argv[3], device=device, progress=False)
mark("detector built")
frames = torch.rand(8, 3, 480, 640, device=device) * 255
for call in ("first", "second"):
    detector.detect_rgb(frames)
    mark(f"{call} detection, 8 frames")
with torch.no_grad():
    for call, batch in (("first", 1), ("second", 1), ("first", 3)):
        model(torch.rand(batch, 3, config.size, config.size, device=device) * 2 - 1)
        mark(f"{call} GPEN call, batch {batch}")
print(json.dumps(steps))
"""
_FIRST = re.compile(r"first frame written ([\d.]+) s after the start(?: \(of which (.*)\))?")
_FIRST_PICTURE = re.compile(r"the job's first picture: (.*) into the job")


def _seconds_by_name(listing: str | None) -> dict[str, float]:
    """A summary's list of named times ("weights 1.6 s, GPEN (compiling) 21.0 s") as a dict."""
    named = {}
    for part in listing.split(", ") if listing else []:
        name, seconds, _ = part.rsplit(" ", 2)
        named[name] = float(seconds)
    return named


def run_cli(clip: Path, out: Path, home: Path, flags: list[str]) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gpen_video.cli", str(clip), str(out), "--overwrite", *flags],
                          env={**os.environ, "GPEN_VIDEO_HOME": str(home)}, capture_output=True, text=True,
                          check=True)
    wall = time.perf_counter() - start
    found = _FIRST.search(done.stderr)
    stages = _FIRST_PICTURE.search(done.stderr)
    return {"wall_s": round(wall, 2), "first_frame_s": float(found.group(1)) if found else None,
            **_seconds_by_name(found.group(2) if found else None),
            "first_picture_s": _seconds_by_name(stages.group(1) if stages else None)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--frames", type=int, default=31)
    ap.add_argument("--json", help="also write the numbers to this file")
    ap.add_argument("--smoke", action="store_true", help="CPU, a few frames: checks the harness")
    args = ap.parse_args()
    frames = 4 if args.smoke else args.frames
    flags = ["--weights", args.weights, "--detector", "retinaface-mobile", "--detector-weights",
             args.detector_weights, "--verbose", *(["--device", "cpu"] if args.smoke else [])]
    rows: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        clip = build_clip(SHARED / SOURCE, tmp / "clip.mp4", frames / 25, (640, 480))
        code = "import time; t = time.perf_counter(); import gpen_video.pipeline.engine; print(time.perf_counter() - t)"
        rows["import_s"] = round(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                      check=True).stdout), 2)
        launched = f"{time.time():.6f}"
        rows["steps"] = json.loads(subprocess.run(
            [sys.executable, "-c", _STEPS, launched, args.weights, args.detector_weights,
             "cpu" if args.smoke else "cuda"], capture_output=True, text=True, check=True).stdout)
        rows["eager"] = run_cli(clip, tmp / "eager.mp4", tmp / "home-eager", [*flags, "--compile", "off"])
        rows["compiled-cold"] = run_cli(clip, tmp / "cold.mp4", tmp / "home", [*flags, "--compile", "on"])
        rows["compiled-warm"] = run_cli(clip, tmp / "warm.mp4", tmp / "home", [*flags, "--compile", "on"])
    print(json.dumps(rows, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
