"""End-to-end throughput: the whole tool against a transcode of the same clip with no face work.

Builds its clips from the real samples in ../shared (scaled to 1080p and looped), then prints one
table: transcode-only fps, our fps on a one-face clip and the ratio, the official-style baseline
(benchmarks/official_style.py) and our speed-up over it, restored faces/s on the crowd clip, peak
host memory, and each stage's busy share.

    python benchmarks/pipeline_bench.py --weights GPEN.pth --detector-weights retinaface.pth
    python benchmarks/pipeline_bench.py --smoke ...   # CPU, a few frames: checks the harness
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import tempfile
import threading
import time
from pathlib import Path

import av
import numpy as np
import torch
from official_style import official_style_fps

from gpen_video.api import restore_video
from gpen_video.video.decode import SourceFrame, demux, open_input, probe
from gpen_video.video.encode import EncoderSettings, VideoWriter

SHARED = Path(os.environ.get("GPEN_VIDEO_SHARED") or Path(__file__).resolve().parents[2] / "shared") / "media" / "videos"


def build_clip(source: Path, dest: Path, seconds: float, size: tuple[int, int] | None) -> Path:
    """``source`` scaled to ``size`` (letterboxed) and looped to ``seconds``, H.264 at high quality."""
    with av.open(str(source)) as src:
        frames = [f.to_ndarray(format="rgb24") for f in src.decode(video=0)]
        rate = src.streams.video[0].average_rate or 25
    if size is not None:
        import cv2

        w, h = size
        fitted = []
        for f in frames:
            scale = min(w / f.shape[1], h / f.shape[0])
            small = cv2.resize(f, (round(f.shape[1] * scale) // 2 * 2, round(f.shape[0] * scale) // 2 * 2),
                               interpolation=cv2.INTER_CUBIC)
            canvas = np.zeros((h, w, 3), np.uint8)
            y, x = (h - small.shape[0]) // 2, (w - small.shape[1]) // 2
            canvas[y : y + small.shape[0], x : x + small.shape[1]] = small
            fitted.append(canvas)
        frames = fitted
    total = max(1, round(seconds * float(rate)))
    with av.open(str(dest), "w") as out:
        stream = out.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        stream.codec_context.options = {"preset": "ultrafast", "crf": "16"}
        for i in range(total):
            frame = av.VideoFrame.from_ndarray(frames[i % len(frames)], format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return dest


def transcode_fps(src: Path, dst: Path, settings: EncoderSettings) -> float:
    """Decode in one thread and encode in another, with the tool's own reader and writer."""
    container = open_input(src)
    writer = VideoWriter(dst, container, probe(src), settings)
    items: queue.Queue = queue.Queue(maxsize=64)

    def decode() -> None:
        for item in demux(container, writer.copied_streams):
            items.put(item)
        items.put(None)

    start = time.perf_counter()
    thread = threading.Thread(target=decode)
    thread.start()
    frames = 0
    while (item := items.get()) is not None:
        if isinstance(item, SourceFrame):
            writer.write(item)
            frames += 1
        else:
            writer.write_packet(item)
    writer.close()
    thread.join()
    container.close()
    return frames / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True, help="a GPEN checkpoint (random weights time the same)")
    ap.add_argument("--detector", default="retinaface-mobile")
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the one-face clip")
    ap.add_argument("--crowd-seconds", type=float, default=20.0)
    ap.add_argument("--preset", default="veryfast")
    ap.add_argument("--baseline-frames", type=int, default=150, help="frames the official-style baseline runs")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--precision", default=None)
    ap.add_argument("--smoke", action="store_true", help="CPU, two seconds of small video")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()

    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    size = None if args.smoke else (1920, 1080)
    seconds, crowd_seconds = (2.0, 1.0) if args.smoke else (args.seconds, args.crowd_seconds)
    settings = EncoderSettings(preset=args.preset)
    options = dict(device=device, weights=args.weights, detector=args.detector, detector_weights=args.detector_weights,
                   batch_size=args.batch_size, precision=args.precision, preset=args.preset, progress=False,
                   overwrite=True)
    rows: dict[str, object] = {"device": torch.cuda.get_device_name() if device == "cuda" else "CPU"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        one_face = build_clip(SHARED / "talking_head_speech_retalking2.mp4", tmp_path / "one.mp4", seconds, size)
        crowd = build_clip(SHARED / "multi_face_crowd_facenet_pytorch.mp4", tmp_path / "crowd.mp4", crowd_seconds,
                           size)
        rows["transcode_fps"] = transcode_fps(one_face, tmp_path / "t.mp4", settings)
        warm = restore_video(crowd, tmp_path / "warm.mp4", **options)  # compiles the model: not timed
        rows["warmup_seconds"] = warm.seconds
        ours = restore_video(one_face, tmp_path / "o.mp4", **options)
        rows["our_fps"] = ours.fps
        rows["ratio"] = ours.fps / rows["transcode_fps"]
        rows["one_face_busy"] = {k: round(v / ours.seconds, 3) for k, v in ours.busy.items()}
        baseline_frames = 10 if args.smoke else args.baseline_frames
        rows["baseline_fps"] = official_style_fps(one_face, tmp_path / "b.mp4", args.weights, args.detector,
                                                  args.detector_weights, settings, device, limit=baseline_frames)
        rows["speedup"] = rows["our_fps"] / rows["baseline_fps"]
        many = restore_video(crowd, tmp_path / "c.mp4", **options)
        rows["crowd_faces_per_s"] = many.faces / many.seconds
        rows["crowd_faces_per_frame"] = many.faces / many.frames
        rows["crowd_busy"] = {k: round(v / many.seconds, 3) for k, v in many.busy.items()}
    rows["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(rows, indent=1))
    print(f"\n| transcode fps | our fps (1 face) | ratio | official-style fps | speed-up | crowd faces/s | "
          f"faces/frame | peak RSS MiB |\n|---|---|---|---|---|---|---|---|\n"
          f"| {rows['transcode_fps']:.1f} | {rows['our_fps']:.1f} | {rows['ratio']:.2f} | {rows['baseline_fps']:.2f} | "
          f"{rows['speedup']:.1f} | {rows['crowd_faces_per_s']:.1f} | {rows['crowd_faces_per_frame']:.1f} | "
          f"{rows['peak_rss_mib']:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
