"""Ray's overhead (issue 23): the same batch through the plain engine and through ``--ray local``
on this machine's GPU, side by side in one run, each a ``gpen-video`` process as a user starts it
(start-up included, the compile cache warmed once before either).

- short clips: ``--clips`` one-face 1080p clips of ``--seconds`` each, one batch;
- a long clip: one clip of ``--long-seconds``, which ``--ray`` splits into ``--segment-frames``
  segments (on one GPU its one actor runs ``--jobs`` of them at once: the overhead of decoding
  each segment's context again, and of assembling OUTPUT on the driver); ``--long-seconds 0``
  leaves it out.

Prints the seconds of each and ``ray_over_plain`` ratios.

    python benchmarks/ray_bench.py --weights G.pth --detector-weights R.pth
    python benchmarks/ray_bench.py --smoke ...   # CPU, tiny clips: checks the harness
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from pipeline_bench import SHARED, build_clip, cli_flags, timed_cli

SOURCE = "talking_head_speech_retalking2.mp4"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--long-seconds", type=float, default=120.0)
    ap.add_argument("--segment-frames", type=int, default=750)
    ap.add_argument("--size", default="1920x1080")
    ap.add_argument("--json", help="also write the numbers to this file")
    ap.add_argument("--smoke", action="store_true", help="CPU, small clips of a second")
    args = ap.parse_args()
    if args.smoke:
        args.clips, args.seconds, args.long_seconds, args.segment_frames = 2, 0.5, 2.0, 20
    size = (320, 320) if args.smoke else tuple(int(v) for v in args.size.split("x"))
    flags = [*cli_flags(args.weights, args.detector_weights, args.smoke), "--quiet",
             "--segment-frames", args.segment_frames]
    rows: dict[str, object] = {"clips": args.clips, "seconds_each": args.seconds, "long_seconds": args.long_seconds,
                               "segment_frames": args.segment_frames, "size": args.size}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clips, long = root / "clips", root / "long"
        clips.mkdir()
        long.mkdir()
        first = build_clip(SHARED / SOURCE, clips / "clip00.mp4", args.seconds, size)
        for i in range(1, args.clips):  # the same frames: building each costs as much as restoring it
            (clips / f"clip{i:02d}.mp4").write_bytes(first.read_bytes())
        batches = [("clips", clips)]
        if args.long_seconds:
            build_clip(SHARED / SOURCE, long / "long.mp4", args.long_seconds, size)
            batches.append(("long", long))
        home = root / "home"
        if not args.smoke:  # the compile cache, once for both; a smoke run only checks the harness
            timed_cli(home, first, root / "warm.mp4", *flags)
        for name, folder in batches:
            plain, _ = timed_cli(home, folder, root / f"{name}-plain", *flags)
            ray, _ = timed_cli(home, folder, root / f"{name}-ray", *flags, "--ray", "local")
            plain, ray = round(plain, 2), round(ray, 2)
            rows[f"{name}_plain_s"], rows[f"{name}_ray_s"] = plain, ray
            rows[f"{name}_ray_over_plain"] = round(ray / plain, 3)
            print(f"{name}: plain {plain:.1f} s, --ray local {ray:.1f} s ({ray / plain:.3f})", flush=True)
    print(json.dumps(rows, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
