"""What the editors' controls cost, against the render a user gets by default.

Builds a ``--seconds`` clip of the real 1080p crowd (looped, ~8 faces a frame) and times, each as
a fresh ``gpen-video`` process (start-up included, as a user waits for it) on one machine:

- render: every face (the default);
- largest: ``--faces largest``, a first pass that detects and tracks the whole clip, then the render;
- tracks: ``--tracks 0``, the same first pass, then a render of one track;
- detect-only: ``--detect-only --tracks-out``, the pass alone;
- preview: ``--preview --panels`` on the clip and on one ``--long`` times as long, which seeks, so
  its time should not grow with the clip; the frames it decoded are read from its summary;
- parse: ``--mask parse``, the render with ParseNet's masks; its extra time per face restored,
  and ParseNet alone on batches of 16 faces in the worker's precision (ms per face).

ParseNet's weights are ``--parse-weights``, else random ones (seeded): they time the same.
Prints seconds, each ratio to the render, and the preview's decoded frames.

    python benchmarks/controls_bench.py --weights G.pth --detector-weights R.pth [--seconds 60]
    python benchmarks/controls_bench.py --smoke ...   # CPU, five frames: checks the harness
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import torch
from pipeline_bench import SHARED, build_clip, cli_flags, timed_cli

SOURCE = "multi_face_crowd_facenet_pytorch.mp4"
SMOKE_SOURCE = "talking_head_speech_liveportrait_d20.mp4"  # one large face: found at 320x320 too




def random_parsenet(path: Path) -> Path:
    """ParseNet with random (seeded) weights, saved at ``path`` (the device has no facexlib)."""
    from gpen_video.faces.parsenet import ParseNet

    torch.manual_seed(0)
    torch.save(ParseNet().state_dict(), path)
    return path


def parse_net_ms(weights: Path, smoke: bool) -> float:
    """Milliseconds per face of ParseNet's masks, batches of 16 faces (2 on the CPU), in the precision
    a worker runs it at (fp16 on a GPU)."""
    from gpen_video.faces.parse import FaceParser

    device = "cpu" if smoke or not torch.cuda.is_available() else "cuda"
    parser = FaceParser(weights, device, half=device == "cuda")
    faces = torch.rand(2 if device == "cpu" else 16, 3, 512, 512, device=device) * 255
    repeats = 1 if device == "cpu" else 20
    parser.masks(faces)  # the convolutions' choices
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        parser.masks(faces)
    if device == "cuda":
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - start) / (repeats * len(faces))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--long", type=float, default=10.0, help="the preview's second clip, this many times as long")
    ap.add_argument("--panels", type=int, default=8)
    ap.add_argument("--parse-weights", help="ParseNet checkpoint (default: random weights, which time the same)")
    ap.add_argument("--json", help="also write the numbers to this file")
    ap.add_argument("--smoke", action="store_true", help="CPU, five frames of a 320x320 talking head")
    args = ap.parse_args()
    if args.smoke:
        args.seconds, args.long, args.panels = 0.2, 2.0, 2
    flags = cli_flags(args.weights, args.detector_weights, args.smoke)
    rows: dict[str, object] = {"seconds_of_video": args.seconds, "panels": args.panels}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source, size = (SHARED / SMOKE_SOURCE, (320, 320)) if args.smoke else (SHARED / SOURCE, None)
        clip = build_clip(source, tmp / "clip.mp4", args.seconds, size)
        long = build_clip(source, tmp / "clip-long.mp4", args.seconds * args.long, size)
        home = tmp / "home"
        parse_weights = Path(args.parse_weights) if args.parse_weights else random_parsenet(tmp / "parsenet.pth")
        if not args.smoke:  # the compile cache and the disk cache; a smoke run only checks the harness
            timed_cli(home, clip, tmp / "warm-up.mp4", *flags, "--quiet")
        rows["render_s"], said = timed_cli(home, clip, tmp / "all.mp4", *flags)
        rows["faces_restored"] = int(re.search(r"(\d+) faces restored", said).group(1))
        rows["parse_s"], _ = timed_cli(home, clip, tmp / "parse.mp4", *flags, "--mask", "parse", "--parse-weights",
                                 parse_weights, "--quiet")
        rows["largest_s"], _ = timed_cli(home, clip, tmp / "largest.mp4", *flags, "--faces", "largest", "--quiet")
        rows["tracks_s"], _ = timed_cli(home, clip, tmp / "tracks.mp4", *flags, "--tracks", "0", "--quiet")
        rows["detect_only_s"], _ = timed_cli(home, clip, *flags, "--detect-only", "--tracks-out", tmp / "faces.json")
        for name, source in (("preview", clip), ("preview_long", long)):
            seconds, said = timed_cli(home, source, tmp / f"{name}.png", *flags, "--preview", args.panels)
            rows[f"{name}_s"] = seconds
            rows[f"{name}_decoded"] = int(re.search(r"frames from (\d+) decoded", said).group(1))
        rows["parse_net_ms_per_face"] = round(parse_net_ms(parse_weights, args.smoke), 3)
    for key in ("render_s", "largest_s", "tracks_s", "detect_only_s", "preview_s", "preview_long_s", "parse_s"):
        rows[key] = round(rows[key], 2)
    for key in ("largest_s", "tracks_s", "detect_only_s", "preview_s", "parse_s"):
        rows[f"{key[:-2]}_over_render"] = round(rows[key] / rows["render_s"], 3)
    rows["parse_ms_per_face"] = round(1000 * (rows["parse_s"] - rows["render_s"]) / max(rows["faces_restored"], 1), 3)
    print(json.dumps(rows, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
