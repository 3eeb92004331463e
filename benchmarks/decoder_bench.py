"""The decoders side by side (issue 21), in one process on one GPU, and what the default detector costs.

- decode only: PyAV's threaded decoder against NVDEC, through ``demux`` as the pipeline reads a
  video, on the 1080p one-face clip and its 3840x2160 build: fps and the process's CPU ms per frame.
- one face at 1080p, one face at 4K, the 1080p crowd: a CPU transcode of the clip (PyAV decode,
  the same x264 settings), the encoder alone (the clip's frames decoded into memory first: the
  ceiling of any render that encodes on this CPU), then a render with each decoder (``--compile
  on``, the real mobile detector): fps, its ratios to the transcode and to the encoder alone,
  faces/s, and the CPU ms per frame of the pipeline's own threads (decode, track, encode,
  workers: not x264's, not libavcodec's), beside the whole process's. The crowd's faces/s are set
  against GPEN alone, as the pipeline builds it (fp16, compiled, batch 16), timed in the same process.
- the detectors' networks alone (random weights time the same): ``retinaface-r50``, the
  default, and ``retinaface-mobile``, fp32, a batch of 16 frames at the size a 1080p frame is
  detected at (1000 px wide): ms per frame.

    python benchmarks/decoder_bench.py --weights GPEN.pth --detector-weights retinaface_mobilenet0.25.pth
    make bench DECODER_BENCH_ARGS="--weights GPEN.pth --detector-weights retinaface_mobilenet0.25.pth"
    python benchmarks/decoder_bench.py --smoke ...   # CPU, a few frames, the CPU decoder: checks the harness
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from pipeline_bench import SHARED, build_clip, encode_only_fps, hd_size, transcode_fps
from thread_cpu import ThreadCPU

from gpen_video.api import restore_video
from gpen_video.media.decoders import choose_decoder
from gpen_video.media.demux import demux
from gpen_video.media.opening import open_input
from gpen_video.media.probe import probe
from gpen_video.model.weights import read_state_dict
from gpen_video.options import RestoreOptions
from gpen_video.worker.restorer import FaceRestorer

#: The threads the pipeline runs itself (its Python threads); the rest are x264's, libavcodec's, CUDA's.
PIPELINE_THREADS = ("decode", "track", "encode", "worker-")


def decode_only(clip: Path, decoder: str) -> dict[str, float]:
    """Every picture of ``clip`` through ``demux`` with ``decoder``: fps and process CPU ms per frame."""
    info = probe(clip)
    assert info.traits is not None
    choice = choose_decoder(decoder, info.traits, 0 if torch.cuda.is_available() else None, info.display_matrix)
    container = open_input(clip)
    cpu, start = time.process_time(), time.perf_counter()
    frames = sum(1 for _ in demux(container, set(), decoding=choice))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    container.close()
    return {"fps": round(frames / wall, 1), "cpu_ms_per_frame": round(1000 * cpu / frames, 2)}


def render(clip: Path, output: Path, decoder: str, options: dict) -> dict[str, object]:
    """One timed render: fps, faces/s, and CPU ms per frame of the pipeline's threads and of the
    process. The job's fps is split at its first frame written: the seconds until then (the first
    batches' way through every stage, each stage's share in ``first_picture_s``) and the fps after
    it (the pipeline's throughput, which a longer clip approaches), counted to the render's return,
    so the engine's closing is in it."""
    cpu = time.process_time()
    with ThreadCPU() as threads:
        summary = restore_video(clip, output, decoder=decoder, **options)
        returned = time.perf_counter()
    cpu = time.process_time() - cpu
    first = summary.first_picture()
    after_first = returned - summary.milestones["written"]
    groups = threads.by_group()
    own = sum(v for k, v in groups.items() if k.startswith(PIPELINE_THREADS))
    return {"fps": round(summary.fps, 1), "faces_per_s": round(summary.faces / summary.seconds, 1),
            "first_frame_s": round(first["written"], 2),
            "first_picture_s": {stage: round(seconds, 3) for stage, seconds in first.items()},
            "after_first_frame_fps": round((summary.frames - 1) / after_first, 1),
            "decoder": summary.decoder, "pipeline_cpu_ms_per_frame": round(1000 * own / summary.frames, 2),
            "process_cpu_ms_per_frame": round(1000 * cpu / summary.frames, 2),
            "thread_cpu_s": {k: v for k, v in groups.items() if k.startswith(PIPELINE_THREADS)}}


def gpen_alone(weights: str, repeats: int) -> float:
    """Faces/s of GPEN by itself, built as a GPU worker builds it (precision, batch, compiled into a
    CUDA graph), on random faces: the ceiling for a render's restored faces/s."""
    from model_throughput import time_ms

    options = RestoreOptions()
    restorer = FaceRestorer(read_state_dict(weights), options, torch.device("cuda"), compiled=True)
    size = restorer.crop_size
    faces = torch.rand(options.batch_size, 3, size, size, device="cuda") * 2 - 1
    with torch.no_grad():
        ms = time_ms(lambda: restorer.model(faces), torch.device("cuda"), repeats)
    restorer.close()
    return round(options.batch_size / ms * 1e3, 1)


def detector_ms(name: str, device: str, batch: int, repeats: int) -> float:
    """The detector's network alone on ``batch`` frames at 1080p's detection size, ms per frame."""
    from gpen_video.faces.choices import DETECTORS
    from gpen_video.faces.retinaface import RetinaFace

    torch.manual_seed(0)
    net = RetinaFace(DETECTORS[name][0]).eval().to(device)
    torch.backends.cudnn.allow_tf32 = True  # as the pipeline's detector runs
    x = torch.rand(batch, 3, 562, 1000, device=device) * 255
    with torch.no_grad():
        net(x)  # the convolutions' choices
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            net(x)
        if device == "cuda":
            torch.cuda.synchronize()
    return round(1000 * (time.perf_counter() - start) / (repeats * batch), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="a GPEN checkpoint (default: the official GPEN-BFR-512, downloaded once); "
                                      "random weights time the same")
    ap.add_argument("--detector-weights", help="the mobile detector's checkpoint (default: the official file, "
                                               "downloaded once)")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the 1080p one-face clip")
    ap.add_argument("--uhd-seconds", type=float, default=10.0, help="length of the 3840x2160 one-face clip")
    ap.add_argument("--crowd-seconds", type=float, default=20.0)
    ap.add_argument("--preset", default="veryfast")
    ap.add_argument("--crowd-preset", default="ultrafast")
    ap.add_argument("--smoke", action="store_true", help="CPU, a few frames of small video, the CPU decoder only")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()

    gpu = torch.cuda.is_available() and not args.smoke
    decoders = ("cpu", "nvdec") if gpu else ("cpu",)
    size, uhd = ((1920, 1080), (3840, 2160)) if not args.smoke else (None, None)
    seconds = (args.seconds, args.uhd_seconds, args.crowd_seconds) if not args.smoke else (1.0, 0.5, 0.5)
    options = dict(weights=args.weights, detector="retinaface-mobile", detector_weights=args.detector_weights,
                   progress=False, overwrite=True, compile="on" if gpu else "off",
                   **({"gpus": [0]} if gpu else {"device": "cpu"}))
    rows: dict[str, object] = {"device": torch.cuda.get_device_name() if gpu else "CPU", "decoders": decoders}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        talking = SHARED / "talking_head_speech_retalking2.mp4"
        clips = {"one_face": (build_clip(talking, tmp_path / "one.mp4", seconds[0], size), args.preset),
                 "one_face_4k": (build_clip(talking, tmp_path / "uhd.mp4", seconds[1], uhd), args.preset),
                 "crowd": (build_clip(SHARED / "multi_face_crowd_facenet_pytorch.mp4", tmp_path / "crowd.mp4",
                                      seconds[2], hd_size(args.smoke)), args.crowd_preset)}
        for name in ("one_face", "one_face_4k"):
            for decoder in decoders:
                rows[f"decode_only_{name}_{decoder}"] = decode_only(clips[name][0], decoder)
                print(f"decode only, {name}, {decoder}: {rows[f'decode_only_{name}_{decoder}']}", flush=True)
        restore_video(clips["crowd"][0], tmp_path / "warm.mp4", decoder=decoders[-1], preset=args.crowd_preset,
                      **options)  # compiles, chooses kernels and opens NVDEC once: not timed
        for name, (clip, preset) in clips.items():
            transcode = transcode_fps(clip, tmp_path / "t.mp4", RestoreOptions(preset=preset))
            rows[f"{name}_transcode_fps"] = round(transcode, 1)
            rows[f"{name}_encode_only_fps"] = round(encode_only_fps(clip, tmp_path / "e.mp4",
                                                                    RestoreOptions(preset=preset)), 1)
            for decoder in decoders:
                row = render(clip, tmp_path / "o.mp4", decoder, {**options, "preset": preset})
                row["over_transcode"] = round(row["fps"] / rows[f"{name}_transcode_fps"], 3)
                row["over_encode_only"] = round(row["fps"] / rows[f"{name}_encode_only_fps"], 3)
                rows[f"{name}_{decoder}"] = row
                print(f"{name}, {decoder}: {row}", flush=True)
    if gpu and args.weights:
        rows["gpen_alone_faces_per_s"] = gpen_alone(args.weights, 50)
        for decoder in decoders:
            row = rows[f"crowd_{decoder}"]
            row["over_gpen_alone"] = round(row["faces_per_s"] / rows["gpen_alone_faces_per_s"], 3)
        print(f"GPEN alone: {rows['gpen_alone_faces_per_s']} faces/s", flush=True)
    device = "cuda" if gpu else "cpu"
    batch, repeats = (16, 20) if gpu else (1, 1)
    for name in ("retinaface-r50", "retinaface-mobile"):
        rows[f"detector_ms_per_frame_{name}"] = detector_ms(name, device, batch, repeats)
        print(f"{name}: {rows[f'detector_ms_per_frame_{name}']} ms per 1080p frame", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
