"""Many short clips: one batch call against separate CLI calls, and against transcoding alone.

Builds ``--clips`` one-face 1080p clips of ``--seconds`` each from a shared sample, then times,
in one run on one machine:

- transcode: each clip decoded and re-encoded by the tool's own reader and writer, no restoration
  (the floor), summed over the clips;
- batch: one ``gpen-video CLIPS/ OUT/`` process, start-up included, as a user gets it (``--jobs``
  at its default: files overlapping): first with an empty compile cache (a machine's first run,
  which compiles cold), then again with the cache it left (every later run), and again warm with
  each ``--other-jobs`` (default 1: one file after another);
- separate: ``--separate`` clips each restored by a ``gpen-video IN OUT`` process of its own,
  start-up included; the mean per call is what twenty calls would cost per clip.

Every process starts the way a user's would (``python -m gpen_video.cli``), with a
``GPEN_VIDEO_HOME`` of its own for the run. Prints the seconds and the ratios (to the warm batch).

    python benchmarks/batch_bench.py --weights G.pth --detector-weights R.pth [--clips 20 --seconds 10]
    python benchmarks/batch_bench.py --smoke ...   # CPU, tiny clips: checks the harness
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from pipeline_bench import SHARED, build_clip, cli_flags, timed_cli, transcode_fps

from gpen_video.options import RestoreOptions

SOURCE = "talking_head_speech_retalking2.mp4"


def cli(home: Path, *args: object) -> float:
    """Seconds one ``gpen-video`` process takes (:func:`pipeline_bench.timed_cli`)."""
    return timed_cli(home, *args)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--clips", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--separate", type=int, default=3, help="clips also restored by separate calls")
    ap.add_argument("--other-jobs", type=int, nargs="*", default=[1], help="--jobs values also timed, warm")
    ap.add_argument("--size", default="1920x1080")
    ap.add_argument("--json", help="also write the numbers to this file")
    ap.add_argument("--smoke", action="store_true", help="CPU, three small clips of half a second")
    args = ap.parse_args()
    if args.smoke:
        args.clips, args.seconds, args.separate = 3, 0.5, 1
    size = (320, 320) if args.smoke else tuple(int(v) for v in args.size.split("x"))
    flags = [*cli_flags(args.weights, args.detector_weights, args.smoke), "--quiet"]
    rows: dict[str, object] = {"clips": args.clips, "seconds_each": args.seconds, "size": args.size}
    with tempfile.TemporaryDirectory() as tmp:
        clips = Path(tmp) / "clips"
        clips.mkdir()
        first = build_clip(SHARED / SOURCE, clips / "clip00.mp4", args.seconds, size)
        for i in range(1, args.clips):  # the same frames: building each costs as much as restoring it
            (clips / f"clip{i:02d}.mp4").write_bytes(first.read_bytes())
        scratch = Path(tmp) / "transcode.mp4"
        start = time.perf_counter()
        for clip in sorted(clips.iterdir()):
            transcode_fps(clip, scratch, RestoreOptions())
        rows["transcode_s"] = round(time.perf_counter() - start, 2)
        home = Path(tmp) / "home"
        rows["batch_cold_s"] = round(cli(home, clips, Path(tmp) / "batch-cold", *flags), 2)
        rows["batch_s"] = round(cli(home, clips, Path(tmp) / "batch", *flags), 2)
        for jobs in args.other_jobs:
            rows[f"batch_jobs{jobs}_s"] = round(cli(home, clips, Path(tmp) / f"batch-jobs{jobs}", *flags,
                                                    "--jobs", jobs), 2)
        separate = [cli(home, c, Path(tmp) / f"alone-{c.name}", *flags)
                    for c in sorted(clips.iterdir())[: args.separate]]
        rows["separate_mean_s"] = round(sum(separate) / len(separate), 2)
        rows["separate_first_s"] = round(separate[0], 2)
    rows["batch_cold_over_transcode"] = round(rows["batch_cold_s"] / rows["transcode_s"], 3)
    rows["batch_over_transcode"] = round(rows["batch_s"] / rows["transcode_s"], 3)
    for jobs in args.other_jobs:
        rows[f"jobs{jobs}_over_batch"] = round(rows[f"batch_jobs{jobs}_s"] / rows["batch_s"], 3)
    rows["separate_over_batch"] = round(rows["separate_mean_s"] * args.clips / rows["batch_s"], 2)
    print(json.dumps(rows, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
