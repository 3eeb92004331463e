"""Versions of the tool on the same clips, side by side in one run: every run a fresh process,
the versions taking turns, so a change's effect on speed is measured on one machine rather than
across leases. Each older version is a folder holding its ``gpen_video`` package, named after
the folder; this checkout is "new", run with ``--compile on`` unless ``--with`` says otherwise
(older versions run with their defaults and ``--with``). ``--also NAME=JSON`` adds this checkout run with more
options of ``restore_video`` (e.g. ``two-workers='{"workers_per_device": 2}'``), and ``--with JSON``
gives every version the same options (e.g. ``'{"compile": "off"}'`` where the older versions
spell it so). Each row also has
every stage's busy share of the run (the summary's), which says where a difference comes from,
the process's wall time, and when the job's first picture left each stage (``first_picture_s``,
from the job's start; versions before the summary had it leave it empty). A version's fps counts
whatever it does inside its measured time once per job (session 11's code captured the
detector's CUDA graph before that time, later code inside it): ``--marginal SECONDS`` also runs
a clip that long and reports the speed over the frames the long clip has beyond it, in which
such costs cancel.

    git archive REV gpen_video | tar -x -C /tmp/REV      # each version to compare against
    python benchmarks/compare_versions.py --old /tmp/REV [/tmp/REV2 ...] --weights G.pth --detector-weights R.pth
    python benchmarks/compare_versions.py --smoke --old . ...   # CPU, tiny clips: checks the harness
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline_bench import SHARED, build_clip, hd_size

NEW = Path(__file__).resolve().parents[1]
#: One run, in a child whose working directory is the version's root, so its gpen_video comes first.
_RUN = """
import json, os, sys
import gpen_video
from gpen_video.api import restore_video
assert os.path.realpath(gpen_video.__file__).startswith(os.getcwd()), f"imported {gpen_video.__file__}"
summary = restore_video(sys.argv[1], sys.argv[2], **json.loads(sys.argv[3]))
first = summary.first_picture() if hasattr(summary, "first_picture") else {}  # older versions lack it
print(json.dumps({"fps": summary.fps, "faces_per_s": summary.faces / summary.seconds, "frames": summary.frames,
                  "faces": summary.faces, "seconds": summary.seconds,
                  "busy": {stage: round(s / summary.seconds, 3) for stage, s in sorted(summary.busy.items())},
                  "first_picture_s": {stage: round(s, 3) for stage, s in first.items()}}))
"""
#: name -> (shared sample, x264 preset): the one-face clip is encoder-bound, the crowd GPU-bound
CLIPS = {"one-face": ("talking_head_speech_retalking2.mp4", "veryfast"),
         "crowd": ("multi_face_crowd_facenet_pytorch.mp4", "ultrafast")}


def run(root: Path, clip: Path, output: Path, options: dict) -> dict:
    """One restoration in a fresh process: the summary's numbers, and the process's wall time."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _RUN, str(clip), str(output), json.dumps(options)], cwd=root,
                          check=True, capture_output=True, text=True)
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": round(time.perf_counter() - start, 2)}


def mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def marginal(long: list[dict], short: list[dict]) -> dict[str, float]:
    """Frames and faces per second of what the long clip has beyond the short one: whatever a
    version does once per job (a graph capture, a warm-up) inside its measured time cancels."""
    seconds = mean(long, "seconds") - mean(short, "seconds")
    return {key: (mean(long, key) - mean(short, key)) / seconds for key in ("frames", "faces")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", nargs="+", default=[], help="folders each holding another version's gpen_video")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=JSON",
                    help="this checkout again, with these restore_video options (repeatable)")
    ap.add_argument("--with", dest="common", default="{}", metavar="JSON",
                    help="restore_video options every version runs with")
    ap.add_argument("--weights", required=True)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each 1080p clip")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--marginal", type=float, metavar="SECONDS",
                    help="also run a clip this long, and report the speed over what the long one has beyond it")
    ap.add_argument("--clips", nargs="+", choices=list(CLIPS), default=list(CLIPS), help="which clips to run")
    ap.add_argument("--smoke", action="store_true", help="CPU, a second of small video")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    common = json.loads(args.common)
    versions = {Path(old).absolute().name: (Path(old).resolve(), common) for old in args.old}
    for also in args.also:
        name, _, extra = also.partition("=")
        versions[name] = (NEW, {**common, **json.loads(extra)})
    if len(versions) < len(args.old) + len(args.also) or "new" in versions:
        ap.error("each --old folder and --also variant needs a name of its own, other than 'new'")
    if not versions:
        ap.error("nothing to compare with: give --old or --also")
    # This checkout compiles as older versions always did (unless --with says otherwise): --compile
    # auto would pick eager for short clips, and these rows compare steady-state speed.
    versions["new"] = (NEW, {"compile": "on", **common})
    device = {"device": "cpu"} if args.smoke else {"gpus": [0]}
    rows = []
    lengths = {"long": 1.0 if args.smoke else args.seconds}
    if args.marginal is not None:
        lengths["short"] = args.marginal / 2 if args.smoke else args.marginal
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.clips:
            sample, preset = CLIPS[name]
            clips = {length: build_clip(SHARED / sample, Path(tmp) / f"{name}-{length}.mp4", seconds,
                                        hd_size(args.smoke))
                     for length, seconds in lengths.items()}
            options = {**device, "weights": str(Path(args.weights).resolve()), "detector": "retinaface-mobile",
                       "detector_weights": str(Path(args.detector_weights).resolve()), "preset": preset,
                       "progress": False, "overwrite": True}
            for repeat in range(args.repeats):
                order = list(versions) if repeat % 2 == 0 else list(versions)[::-1]
                for version in order:
                    root, extra = versions[version]
                    for length, clip in clips.items():
                        result = run(root, clip, Path(tmp) / "out.mp4", {**options, **extra})
                        rows.append({"clip": name, "length": length, "version": version, "repeat": repeat, **result})
                        print(json.dumps(rows[-1]), flush=True)
                        if args.json:
                            Path(args.json).write_text(json.dumps(rows, indent=1))
    first = next(iter(versions))
    extra_columns = " marginal fps | marginal faces/s | vs " + first + " |" if args.marginal is not None else ""
    print(f"\n| clip | version | fps | faces/s | vs {first} | process wall s | first frame s |{extra_columns}\n"
          f"|---|---|---|---|---|---|---|{'---|---|---|' if extra_columns else ''}")
    for name in args.clips:
        of = {v: {length: [r for r in rows if r["clip"] == name and r["version"] == v and r["length"] == length]
                  for length in lengths} for v in versions}
        means = {v: {k: mean(of[v]["long"], k) for k in ("fps", "faces_per_s", "wall_s")} for v in versions}
        margins = {v: marginal(of[v]["long"], of[v]["short"]) for v in versions} if args.marginal is not None else {}
        for version, m in means.items():
            written = [r["first_picture_s"]["written"] for r in of[version]["long"] if r["first_picture_s"]]
            line = (f"| {name} | {version} | {m['fps']:.1f} | {m['faces_per_s']:.1f} | "
                    f"{m['fps'] / means[first]['fps']:.2f} | {m['wall_s']:.1f} | "
                    f"{f'{sum(written) / len(written):.2f}' if written else ''} |")
            if margins:
                line += (f" {margins[version]['frames']:.1f} | {margins[version]['faces']:.1f} | "
                         f"{margins[version]['frames'] / margins[first]['frames']:.2f} |")
            print(line)
        print("\nmean busy share of each stage:")
        for version in versions:
            busy = [r["busy"] for r in of[version]["long"]]
            stages = sorted({stage for b in busy for stage in b})
            print(f"{name} {version}: " + ", ".join(
                f"{stage} {sum(b.get(stage, 0.0) for b in busy) / len(busy):.0%}" for stage in stages))


if __name__ == "__main__":
    main()
