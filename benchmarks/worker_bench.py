"""Thread workers against process workers (``--worker``), on one GPU and on all of ``--gpus``,
side by side in one run (issue 24): restored faces/s on the 1080p crowd clip (GPU-bound, with
x264 ultrafast) and fps on a one-face 1080p clip (encoder-bound: beside a transcode of the same
clip, with x264 veryfast). Each row is one job on a fresh engine, its start-up not counted.

    python benchmarks/worker_bench.py --weights G.pth --detector-weights R.pth --gpus 0,1
    python benchmarks/worker_bench.py --smoke ...   # CPU, tiny clips: checks the harness
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from pipeline_bench import SHARED, build_clip, hd_size, transcode_fps

from gpen_video.api import restore_video
from gpen_video.options import RestoreOptions

KINDS = ("thread", "process")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="a GPEN checkpoint (default: the official GPEN-BFR-512, downloaded once); "
                                      "random weights time the same")
    ap.add_argument("--detector-weights", help="retinaface-mobile's (default: the official file, downloaded once)")
    ap.add_argument("--gpus", default="0", help="the GPUs of the 'all' rows, e.g. 0,1")
    ap.add_argument("--crowd-seconds", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=30.0, help="length of the one-face clip")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--json", help="also write the numbers to this file")
    ap.add_argument("--smoke", action="store_true", help="CPU, small clips: one and two workers stand for the GPUs")
    args = ap.parse_args()
    gpus = [int(g) for g in args.gpus.split(",")]
    if args.smoke:
        args.crowd_seconds, args.seconds = 0.2, 0.2
        places = {"one": {"device": "cpu"}, "all": {"device": "cpu", "workers_per_device": 2}}
    else:
        places = {"one": {"gpus": gpus[:1]}, "all": {"gpus": gpus}}
    # The CPU decoder for both kinds: process workers decode on the CPU, and thread workers left
    # to --decoder auto took NVDEC where it was installed (run BK), which is not the same race.
    common = {"weights": args.weights, "detector": "retinaface-mobile", "detector_weights": args.detector_weights,
              "precision": args.precision, "progress": False, "overwrite": True, "decoder": "cpu",
              "compile": "off" if args.smoke else "on"}  # steady-state speed: auto is eager for short clips
    rows: dict[str, object] = {"gpus": args.gpus if not args.smoke else "cpu", "detector": common["detector"],
                               "decoder": common["decoder"]}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        crowd = build_clip(SHARED / "multi_face_crowd_facenet_pytorch.mp4", root / "crowd.mp4", args.crowd_seconds,
                           hd_size(args.smoke))
        face = build_clip(SHARED / "talking_head_speech_retalking2.mp4", root / "face.mp4", args.seconds,
                          (320, 320) if args.smoke else (1920, 1080))
        rows["one_face_transcode_fps"] = round(transcode_fps(face, root / "t.mp4", RestoreOptions(preset="veryfast")),
                                               1)
        if not args.smoke:  # the compile cache, once for every row
            restore_video(crowd, root / "warm.mp4", **places["all"], **common, preset="ultrafast")
        for kind in KINDS:
            for place, where in places.items():
                crowd_run = restore_video(crowd, root / "c.mp4", **where, **common, preset="ultrafast", worker=kind)
                face_run = restore_video(face, root / "f.mp4", **where, **common, preset="veryfast", worker=kind)
                fps = round(face_run.fps, 1)
                rows[f"{kind}_{place}"] = {
                    "crowd_faces_per_s": round(crowd_run.faces / crowd_run.seconds, 1), "one_face_fps": fps,
                    "one_face_over_transcode": round(fps / rows["one_face_transcode_fps"], 3)}
                print(f"{kind} workers, {place}: {rows[f'{kind}_{place}']}", flush=True)
    for kind in KINDS:
        one, every = rows[f"{kind}_one"], rows[f"{kind}_all"]
        rows[f"{kind}_all_over_one"] = round(every["crowd_faces_per_s"] / one["crowd_faces_per_s"], 3)
    for place in places:
        rows[f"process_over_thread_{place}"] = round(rows[f"process_{place}"]["crowd_faces_per_s"]
                                                     / rows[f"thread_{place}"]["crowd_faces_per_s"], 3)
    print(json.dumps(rows, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
