"""Another version's outputs beside this one's, sample for sample: a restructuring must change no
output. Each version (a folder holding its ``gpen_video``, e.g. from ``git archive REV gpen_video``)
runs the command line, in a process of its own, on the same inputs in each way a user runs it: a
render, a ``--resume`` render in segments, a render of a time range, a render of the largest face
(after the first pass that chooses it), a ``--preview`` sheet, ``--detect-only``'s tracks file,
a batch of a folder (two videos and a photo), a photo, and with ``--ray`` a batch on a local Ray
cluster. Every output is then decoded and compared:
each video frame's planes, every timestamp, and the other streams' packets, byte for byte. Video
is encoded with FFV1: x264's output differs from run to run of the same version (its threads),
so only a lossless, deterministic encoder compares versions sample for sample.

    git archive REV gpen_video | tar -x -C /tmp/REV
    python benchmarks/compare_outputs.py --old /tmp/REV --weights G.pth --detector-weights R.pth [--ray]

Runs on the CPU (``--device cpu``) unless ``--gpu``: the comparison needs no speed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import av
import numpy as np
from pipeline_bench import SHARED

NEW = Path(__file__).resolve().parents[1]
#: The inputs: a talking head with its sound, a crowd, and a photo.
VIDEOS = ("talking_head_speech_retalking2.mp4", "multi_face_crowd_facenet_pytorch.mp4")
PHOTO = SHARED.parent / "images" / "whole_two_people.jpg"


def run_cli(root: Path, *args: object) -> None:
    """The version in ``root`` on the command line (its folder first on the module path)."""
    subprocess.run([sys.executable, "-m", "gpen_video.cli", *map(str, args)], cwd=root, check=True,
                   capture_output=True, text=True)


def video_difference(old: Path, new: Path) -> str:
    """Where ``new`` differs from ``old``: the first differing frame, timestamp or packet; "" if none."""
    with av.open(str(old)) as a, av.open(str(new)) as b:
        if len(a.streams) != len(b.streams):
            return f"{len(a.streams)} against {len(b.streams)} streams"
        frames = 0
        for x, y in zip(a.decode(video=0), b.decode(video=0), strict=False):
            if x.pts != y.pts or not np.array_equal(x.to_ndarray(), y.to_ndarray()):
                return f"frame {frames}"
            frames += 1
        if a.streams.video[0].frames != b.streams.video[0].frames:
            return f"{a.streams.video[0].frames} against {b.streams.video[0].frames} frames"
        others = [(s.index, s.type) for s in a.streams if s.type != "video"]
    for index, kind in others:
        with av.open(str(old)) as a, av.open(str(new)) as b:
            left = [(bytes(p), p.pts) for p in a.demux(a.streams[index]) if p.size]
            right = [(bytes(p), p.pts) for p in b.demux(b.streams[index]) if p.size]
        if left != right:
            return f"stream {index} ({kind})"
    return ""


def image_difference(old: Path, new: Path) -> str:
    from PIL import Image

    with Image.open(old) as a, Image.open(new) as b:
        return "" if np.array_equal(np.asarray(a), np.asarray(b)) else "pixels"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="a folder holding another version's gpen_video")
    ap.add_argument("--weights", required=True)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--seconds", type=float, default=2.0, help="how much of each video to restore")
    ap.add_argument("--ray", action="store_true", help="also a batch through --ray local (the [ray] extra)")
    ap.add_argument("--gpu", action="store_true", help="run on the GPU instead of the CPU")
    args = ap.parse_args()
    flags = ["--weights", Path(args.weights).resolve(), "--detector", "retinaface-mobile",
             "--detector-weights", Path(args.detector_weights).resolve(), "--quiet", "--codec", "ffv1",
             *([] if args.gpu else ["--device", "cpu"])]
    versions = {"old": Path(args.old).resolve(), "new": NEW}
    differences: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inputs = tmp / "inputs"
        inputs.mkdir()
        for name in VIDEOS:  # the first seconds, their packets copied
            with av.open(str(SHARED / name)) as whole, av.open(str(inputs / name), "w") as part:
                copies = {s.index: part.add_stream_from_template(s) for s in whole.streams
                          if s.type in ("video", "audio")}
                for packet in whole.demux(*[whole.streams[i] for i in copies]):
                    if packet.dts is not None and packet.dts * packet.time_base < args.seconds:
                        packet.stream = copies[packet.stream.index]
                        part.mux(packet)
        shutil.copy(PHOTO, inputs / PHOTO.name)
        for version, root in versions.items():
            out = tmp / version
            out.mkdir()
            clip = inputs / VIDEOS[0]
            run_cli(root, clip, out / "render.mp4", *flags)
            run_cli(root, clip, out / "resume.mp4", "--resume", "--segment-frames", 20, *flags)
            run_cli(root, clip, out / "range.mp4", "--start", args.seconds / 4, "--end", args.seconds / 2, *flags)
            crowd = inputs / VIDEOS[1]
            run_cli(root, crowd, out / "largest.mp4", "--faces", "largest", *flags)
            run_cli(root, crowd, out / "preview.png", "--preview", 3, *flags)
            run_cli(root, crowd, "--detect-only", "--tracks-out", out / "tracks.json", *flags)
            run_cli(root, inputs / PHOTO.name, out / "photo.png", *flags)
            run_cli(root, inputs, out / "batch", *flags)
            if args.ray:
                run_cli(root, inputs, out / "ray", "--ray", "local", "--segment-frames", 20, *flags)
        old, new = tmp / "old", tmp / "new"
        for path in sorted(p.relative_to(old) for p in old.rglob("*") if p.is_file()):
            if not (new / path).exists():
                differences[str(path)] = "missing"
            elif path.suffix in (".png", ".jpg"):
                differences[str(path)] = image_difference(old / path, new / path)
            elif path.suffix == ".json":
                same = json.loads((old / path).read_text()) == json.loads((new / path).read_text())
                differences[str(path)] = "" if same else "records"
            else:
                differences[str(path)] = video_difference(old / path, new / path)
    print("| output | against the old version |\n|---|---|")
    for path, difference in differences.items():
        print(f"| {path} | {difference or 'the same, sample for sample'} |")
    if any(differences.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
