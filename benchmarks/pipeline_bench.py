"""End-to-end throughput: the whole tool against a transcode of the same clip with no face work.

Builds its clips from the real samples in ../shared (scaled to 1080p and looped), then prints one
table: transcode-only fps, our fps on a one-face clip and the ratio, the official-style baseline
(benchmarks/official_style.py) and our speed-up over it, restored faces/s on the crowd clip (on
one GPU and on all of ``--gpus``), the peak host memory of a short and a long run and the long
run's ratio to a transcode, and each stage's busy share, each thread's CPU share and each GPU's
busy share (NVML utilisation).

    python benchmarks/pipeline_bench.py --weights GPEN.pth --detector-weights retinaface.pth
    python benchmarks/pipeline_bench.py --smoke ...   # CPU, a few frames: checks the harness
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import torch
from gpu_busy import GpuBusy
from official_style import official_style_fps
from thread_cpu import ThreadCPU

from gpen_video.api import restore_video
from gpen_video.media.colour import frame_planes, planes_to_frame
from gpen_video.media.demux import demux
from gpen_video.media.frames import SourceFrame
from gpen_video.media.opening import open_input
from gpen_video.media.probe import probe
from gpen_video.media.writer import VideoWriter
from gpen_video.options import RestoreOptions
from gpen_video.worker.device import stage_planes

SHARED_ROOT = os.environ.get("GPEN_VIDEO_SHARED") or Path(__file__).resolve().parents[2] / "shared"
SHARED = Path(SHARED_ROOT) / "media" / "videos"


def timed_cli(home: Path, *args: object) -> tuple[float, str]:
    """Seconds one ``gpen-video`` process takes, from its start to its exit, with ``home`` as its
    ``GPEN_VIDEO_HOME`` (where the compile cache lives), and what it printed on stderr."""
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "gpen_video.cli", *map(str, args)], check=True, text=True,
                         env={**os.environ, "GPEN_VIDEO_HOME": str(home)}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    return time.perf_counter() - start, run.stderr


def cli_flags(weights: str, detector_weights: str, smoke: bool) -> list[str]:
    """The flags every timed CLI process gets: the GPEN and mobile-detector checkpoints, the CPU for a smoke run."""
    return ["--weights", weights, "--detector", "retinaface-mobile", "--detector-weights", detector_weights,
            *(["--device", "cpu"] if smoke else [])]


def hd_size(smoke: bool) -> tuple[int, int]:
    """A 1080p clip's frame size, or half of it for a smoke run on the CPU: the detector, which
    works at 1000 px wide, finds the same faces (the crowd's too) in a quarter of the pixels."""
    return (960, 540) if smoke else (1920, 1080)


def build_clip(source: Path, dest: Path, seconds: float, size: tuple[int, int] | None,
               camera: bool = False) -> Path:
    """``source`` scaled to ``size`` (letterboxed) and looped to ``seconds``, H.264 at high quality:
    x264 ``ultrafast`` (quick to build, and quick to decode), or with ``camera`` as cameras and
    phones encode (``medium``: High profile, B-frames, CABAC), which costs the decoder more."""
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
        stream.codec_context.options = {"preset": "medium" if camera else "ultrafast", "crf": "16"}
        for i in range(total):
            frame = av.VideoFrame.from_ndarray(frames[i % len(frames)], format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return dest


def transcode_fps(src: Path, dst: Path, settings: RestoreOptions, planes: bool = False, queued: int = 64,
                  staged: bool = False) -> float:
    """Decode in one thread and encode in another, with the tool's own reader and writer, at most
    ``queued`` frames between them (with ``planes``, each frame is copied into a new frame in the
    encoding thread, as restored frames were until session 10; with ``staged``, the decode thread
    packs each frame into a pinned buffer, as the pipeline's does for its GPUs)."""
    container = open_input(src)
    # A scratch file, written again by each run: replacing it is no loss.
    writer = VideoWriter(dst, container, probe(src), settings, overwrite=True)
    items: queue.Queue = queue.Queue(maxsize=queued)

    def decode() -> None:
        for item in demux(container, writer.copied_streams):
            if staged and isinstance(item, SourceFrame):
                item.buffers.stage(stage_planes(item.frame, pinned=torch.cuda.is_available()))
            items.put(item)
        items.put(None)

    start = time.perf_counter()
    thread = threading.Thread(target=decode)
    thread.start()
    frames = write_all(writer, iter(items.get, None), planes)
    thread.join()
    container.close()
    return frames / (time.perf_counter() - start)


def encode_only_fps(src: Path, dst: Path, settings: RestoreOptions) -> float:
    """The encoder alone: every frame of ``src`` decoded into memory first, then timed through the
    tool's writer with ``settings``. No pipeline that encodes on this CPU runs faster, so with the
    decoding on the GPU this is the ceiling of a one-face render (issue 21)."""
    container = open_input(src)
    writer = VideoWriter(dst, container, probe(src), settings, overwrite=True)  # a scratch file
    items = list(demux(container, writer.copied_streams))
    start = time.perf_counter()
    frames = write_all(writer, iter(items))
    container.close()
    return frames / (time.perf_counter() - start)


def write_all(writer: VideoWriter, items: Iterator[SourceFrame | av.Packet], planes: bool = False) -> int:
    """Every frame and packet of ``items`` through ``writer``, which is then closed: the frames written
    (with ``planes``, each frame copied into a new one first)."""
    frames = 0
    for item in items:
        if isinstance(item, SourceFrame):
            writer.write(item, planes_to_frame(frame_planes(item.frame), item.frame) if planes else None)
            frames += 1
        else:
            writer.write_packet(item)
    writer.close()
    return frames


class _Rows(dict):
    """The numbers so far, printed and saved as each arrives: a run cut short still reports them."""

    def __init__(self, path: str | None) -> None:
        super().__init__()
        self.path = path

    def __setitem__(self, key: str, value: object) -> None:
        super().__setitem__(key, value)
        print(f"{key}: {value}", flush=True)
        if self.path:
            Path(self.path).write_text(json.dumps(self, indent=1))


# VmHWM, not getrusage: ru_maxrss survives exec, so the child would report the bench's own peak.
_WHOLE_RUN = """
import json, re, sys
from pathlib import Path
from gpen_video.api import restore_video
from gpen_video.worker.device import stage_planes
summary = restore_video(sys.argv[1], sys.argv[2], **json.loads(sys.argv[3]))
peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
print(json.dumps({"peak_rss_mib": peak / 1024, "fps": summary.fps}))
"""

# The same clip through the tool's reader and writer alone, with the writer's settings and two
# frames between them, as a plain transcode holds them: what any re-encode of it takes.
_TRANSCODE_RUN = """
import json, re, sys
from pathlib import Path
from pipeline_bench import transcode_fps
from gpen_video.options import RestoreOptions
fps = transcode_fps(Path(sys.argv[1]), Path(sys.argv[2]), RestoreOptions(preset=sys.argv[3]), queued=2)
peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
print(json.dumps({"peak_rss_mib": peak / 1024, "fps": fps}))
"""


def whole_run(clip: Path, output: Path, options: dict) -> dict:
    """A whole run in a process of its own: its peak resident memory (MiB) and its fps."""
    run = subprocess.run([sys.executable, "-c", _WHOLE_RUN, str(clip), str(output), json.dumps(options)],
                         check=True, capture_output=True, text=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def transcode_run(clip: Path, output: Path, preset: str) -> dict:
    """A plain transcode of ``clip`` in a process of its own: its peak resident memory (MiB) and fps."""
    run = subprocess.run([sys.executable, "-c", _TRANSCODE_RUN, str(clip), str(output), preset], check=True,
                         capture_output=True, text=True, cwd=Path(__file__).parent)
    return json.loads(run.stdout.strip().splitlines()[-1])


def _busy(summary) -> dict[str, float]:
    return {k: round(v / summary.seconds, 3) for k, v in sorted(summary.busy.items())}


def _restore(rows: _Rows, name: str, clip: Path, output: Path, sampled: list[int], **options):
    """One timed run; records under ``name`` the decoder that ran, each stage's busy share (wall
    time inside its work), each thread group's CPU share (a stage thread whose CPU share is near
    its busy share is bound by its own host work, not by waits), and each GPU's busy share in
    ``sampled`` (NVML)."""
    with GpuBusy(sampled) as gpu, ThreadCPU() as cpu:
        summary = restore_video(clip, output, **options)
        end = time.perf_counter()
    rows[f"{name}_decoder"] = summary.decoder  # --decoder auto: NVDEC where it is installed, else the CPU
    rows[f"{name}_busy"] = _busy(summary)
    # The stage threads live only while the pipeline runs; other groups include the set-up.
    rows[f"{name}_thread_cpu"] = {k: round(v / summary.seconds, 3) for k, v in cpu.by_group().items()}
    rows[f"{name}_gpu_busy"] = gpu.shares(since=end - summary.seconds)  # the pipeline's run, not the set-up
    return summary


def _throughput(rows: _Rows, args: argparse.Namespace, one_face: Path, crowd: Path, tmp_path: Path, device: str,
                gpus: list[int], one_gpu: dict, options: dict, settings: RestoreOptions) -> None:
    """The speed rows: transcode-only, one face, the official-style baseline, the crowd, all GPUs."""
    rows["transcode_fps"] = transcode_fps(one_face, tmp_path / "t.mp4", settings)
    warm = restore_video(crowd, tmp_path / "warm.mp4", **one_gpu, **options)  # first batches autotune: not timed
    rows["warmup_seconds"] = warm.seconds
    ours = _restore(rows, "one_face", one_face, tmp_path / "o.mp4", gpus[:1], **one_gpu, **options)
    rows["our_fps"] = ours.fps
    rows["ratio"] = ours.fps / rows["transcode_fps"]
    baseline_frames = 10 if args.smoke else args.baseline_frames
    rows["baseline_fps"] = official_style_fps(one_face, tmp_path / "b.mp4", args.weights, args.detector,
                                              args.detector_weights, settings, device, limit=baseline_frames)
    rows["speedup"] = rows["our_fps"] / rows["baseline_fps"]
    crowd_options = {**options, "preset": args.crowd_preset}
    crowd_settings = RestoreOptions(preset=args.crowd_preset)
    rows["crowd_transcode_fps"] = transcode_fps(crowd, tmp_path / "ct.mp4", crowd_settings)
    many = _restore(rows, "crowd", crowd, tmp_path / "c.mp4", gpus[:1], **one_gpu, **crowd_options)
    rows["crowd_faces_per_s"] = many.faces / many.seconds
    rows["crowd_fps"] = many.fps
    rows["crowd_faces_per_frame"] = many.faces / many.frames
    if device == "cuda" and len(gpus) > 1:
        many_all = _restore(rows, "crowd_all_gpus", crowd, tmp_path / "c2.mp4", gpus, gpus=gpus, **crowd_options)
        rows["gpus"] = len(gpus)
        rows["crowd_faces_per_s_all_gpus"] = many_all.faces / many_all.seconds
        rows["crowd_scaling"] = rows["crowd_faces_per_s_all_gpus"] / rows["crowd_faces_per_s"]
        ours_all = _restore(rows, "one_face_all_gpus", one_face, tmp_path / "o2.mp4", gpus, gpus=gpus, **options)
        rows["our_fps_all_gpus"] = ours_all.fps


def _memory_beside_transcode(rows: _Rows, size: str, clip: Path, run: dict, tmp_path: Path, preset: str) -> None:
    """A whole run's peak memory set beside a plain transcode's of the same clip: the difference is
    what the tool holds beyond what any re-encode takes (the encoder's own frames grow with the
    frame size and its threads, and are the same in both)."""
    transcode = transcode_run(clip, tmp_path / f"tr_{size}.mp4", preset)
    rows[f"transcode_rss_mib_{size}"] = transcode["peak_rss_mib"]
    rows[f"run_over_transcode_mib_{size}"] = run["peak_rss_mib"] - transcode["peak_rss_mib"]


def _share(shares: dict[int, float]) -> str:
    return "/".join(f"{v:.0%}" for v in shares.values()) or "n/a"


def _print_long(rows: _Rows, seconds: float, long_seconds: float) -> None:
    if "run_rss_growth" in rows:
        print(f"\npeak RSS of a whole run: {rows['run_rss_mib_short']:.0f} MiB ({seconds:g} s clip), "
              f"{rows['run_rss_mib_long']:.0f} MiB ({long_seconds:g} s clip): {rows['run_rss_growth']:+.1%}")
        print(f"one face, {long_seconds:g} s clip: {rows['run_fps_long']:.1f} fps, transcode only "
              f"{rows['long_transcode_fps']:.1f} fps: ratio {rows['long_ratio']:.2f}")
    if "run_rss_mib_uhd" in rows:
        print(f"peak RSS of a whole 3840x2160 run: {rows['run_rss_mib_uhd']:.0f} MiB, "
              f"{rows['run_rss_uhd_over_hd']:.2f}x the 1080p run's")
    if "run_rss_mib_8k" in rows:
        print(f"peak RSS of a whole 7680x4320 run: {rows['run_rss_mib_8k']:.0f} MiB, "
              f"{rows['run_rss_8k_over_hd']:.2f}x the 1080p run's, {rows['run_fps_8k']:.1f} fps")
    for size in ("hd", "uhd", "8k"):
        if f"transcode_rss_mib_{size}" in rows:
            print(f"{size}: a plain transcode's peak {rows[f'transcode_rss_mib_{size}']:.0f} MiB; the run's "
                  f"{rows[f'run_over_transcode_mib_{size}']:+.0f} MiB beyond it")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="a GPEN checkpoint (default: the official GPEN-BFR-512, downloaded once); "
                                      "random weights time the same")
    ap.add_argument("--detector", default="retinaface-mobile")
    ap.add_argument("--detector-weights", help="default: the official file, downloaded once")
    ap.add_argument("--gpus", default="0", help="GPUs for the multi-GPU rows, e.g. 0,1 (one GPU: no such rows)")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the one-face clip")
    ap.add_argument("--crowd-seconds", type=float, default=20.0)
    ap.add_argument("--uhd-seconds", type=float, default=10.0,
                    help="length of a 3840x2160 one-face clip whose whole run's peak memory is set beside the "
                         "1080p one's (0: skip)")
    ap.add_argument("--8k-seconds", dest="eightk_seconds", type=float, default=2.0,
                    help="length of a 7680x4320 one-face clip whose whole run's peak memory and fps are set beside "
                         "the 1080p run's (0: none)")
    ap.add_argument("--long-seconds", type=float, default=600.0,
                    help="length of the long one-face clip: its peak memory is compared with the short one's, "
                         "its fps with a transcode's (0: skip)")
    ap.add_argument("--preset", default="veryfast")
    ap.add_argument("--crowd-preset", default="ultrafast",
                    help="x264 preset of the crowd runs: fast enough that the GPUs, not the encoder, set the pace")
    ap.add_argument("--baseline-frames", type=int, default=150, help="frames the official-style baseline runs")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--precision", default=None)
    ap.add_argument("--smoke", action="store_true", help="CPU, two seconds of small video")
    ap.add_argument("--memory-only", action="store_true",
                    help="only the whole short and long runs: peak memory, and the long clip's ratio")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()

    gpus = [int(g) for g in args.gpus.split(",")]
    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    size = (320, 320) if args.smoke else (1920, 1080)
    seconds, crowd_seconds = (2.0, 1.0) if args.smoke else (args.seconds, args.crowd_seconds)
    long_seconds = min(args.long_seconds, 4.0) if args.smoke else args.long_seconds
    settings = RestoreOptions(preset=args.preset)
    options = dict(weights=args.weights, detector=args.detector, detector_weights=args.detector_weights,
                   batch_size=args.batch_size, precision=args.precision, preset=args.preset, progress=False,
                   overwrite=True, compile="on")  # steady-state speed: --compile auto is eager for short clips
    one_gpu = {"device": "cpu"} if device == "cpu" else {"gpus": gpus[:1]}
    rows = _Rows(args.json)
    rows["device"] = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    rows["cpu_cores"] = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        one_face = build_clip(SHARED / "talking_head_speech_retalking2.mp4", tmp_path / "one.mp4", seconds, size)
        crowd = build_clip(SHARED / "multi_face_crowd_facenet_pytorch.mp4", tmp_path / "crowd.mp4", crowd_seconds,
                           hd_size(args.smoke))
        if not args.memory_only:
            _throughput(rows, args, one_face, crowd, tmp_path, device, gpus, one_gpu, options, settings)
        if long_seconds:
            longer = build_clip(SHARED / "talking_head_speech_retalking2.mp4", tmp_path / "long.mp4", long_seconds,
                                size)
            # Peak memory of whole runs, each in a fresh process: it must not grow with the length.
            rss_options = {**one_gpu, **options, "weights": args.weights and str(args.weights),
                           "detector_weights": args.detector_weights and str(args.detector_weights)}
            if device == "cuda":  # the first run compiles GPEN with a cold cache and peaks higher than any later one
                rows["run_rss_mib_first"] = whole_run(one_face, tmp_path / "rs.mp4", rss_options)["peak_rss_mib"]
            short = whole_run(one_face, tmp_path / "rs.mp4", rss_options)
            long = whole_run(longer, tmp_path / "rl.mp4", rss_options)
            rows["run_rss_mib_short"], rows["run_rss_mib_long"] = short["peak_rss_mib"], long["peak_rss_mib"]
            _memory_beside_transcode(rows, "hd", one_face, short, tmp_path, args.preset)
            if args.uhd_seconds and not args.smoke:  # bounded in bytes: 4K must not take 4x the memory
                uhd = build_clip(SHARED / "talking_head_speech_retalking2.mp4", tmp_path / "uhd.mp4",
                                 args.uhd_seconds, (3840, 2160))
                run = whole_run(uhd, tmp_path / "ru.mp4", rss_options)
                rows["run_rss_mib_uhd"] = run["peak_rss_mib"]
                rows["run_rss_uhd_over_hd"] = rows["run_rss_mib_uhd"] / rows["run_rss_mib_short"]
                _memory_beside_transcode(rows, "uhd", uhd, run, tmp_path, args.preset)
            if args.eightk_seconds and not args.smoke:  # 8K: memory bounded as 4K's, and its speed
                eightk = build_clip(SHARED / "talking_head_speech_retalking2.mp4", tmp_path / "8k.mp4",
                                    args.eightk_seconds, (7680, 4320))
                run = whole_run(eightk, tmp_path / "r8.mp4", rss_options)
                rows["run_rss_mib_8k"], rows["run_fps_8k"] = run["peak_rss_mib"], run["fps"]
                rows["run_rss_8k_over_hd"] = rows["run_rss_mib_8k"] / rows["run_rss_mib_short"]
                _memory_beside_transcode(rows, "8k", eightk, run, tmp_path, args.preset)
            rows["run_rss_growth"] = rows["run_rss_mib_long"] / rows["run_rss_mib_short"] - 1
            # The one-face ratio again on the long clip, where the pipeline's fixed start-up and
            # drain (filling ~120 frames in flight) weigh less than on the short one.
            rows["run_fps_long"] = long["fps"]
            rows["long_transcode_fps"] = transcode_fps(longer, tmp_path / "lt.mp4", settings)
            rows["long_ratio"] = rows["run_fps_long"] / rows["long_transcode_fps"]
    rows["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.memory_only:
        _print_long(rows, seconds, long_seconds)
        return
    print(f"\n| transcode fps | our fps (1 face) | ratio | official-style fps | speed-up | crowd faces/s | "
          f"faces/frame | GPU busy (1 face, crowd) | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|\n"
          f"| {rows['transcode_fps']:.1f} | {rows['our_fps']:.1f} | {rows['ratio']:.2f} | {rows['baseline_fps']:.2f} | "
          f"{rows['speedup']:.1f} | {rows['crowd_faces_per_s']:.1f} | {rows['crowd_faces_per_frame']:.1f} | "
          f"{_share(rows['one_face_gpu_busy'])}, {_share(rows['crowd_gpu_busy'])} | {rows['peak_rss_mib']:.0f} |")
    _print_long(rows, seconds, long_seconds)
    if "gpus" in rows:
        print(f"\n| GPUs | crowd faces/s | scaling | one-face fps | transcode fps |\n|---|---|---|---|---|\n"
              f"| 1 | {rows['crowd_faces_per_s']:.1f} | 1.00 | {rows['our_fps']:.1f} | {rows['transcode_fps']:.1f} |\n"
              f"| {rows['gpus']} | {rows['crowd_faces_per_s_all_gpus']:.1f} | {rows['crowd_scaling']:.2f} | "
              f"{rows['our_fps_all_gpus']:.1f} | {rows['transcode_fps']:.1f} |\n"
              f"\nGPU busy with all GPUs: crowd {rows['crowd_all_gpus_gpu_busy']}, "
              f"one face {rows['one_face_all_gpus_gpu_busy']}")


if __name__ == "__main__":
    main()
