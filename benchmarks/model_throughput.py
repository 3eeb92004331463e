"""GPEN model throughput: the official way of running it against our fast path, side by side, one process.

Prints one markdown table (faces/s, achieved TFLOP/s counted as the official code's FLOPs, error
against an fp64 reference) and optionally writes the rows as JSON. Weights are random with the
GPEN-BFR-512 shapes: speed does not depend on their values.

    python benchmarks/model_throughput.py                      # the full comparison (needs a GPU)
    python benchmarks/model_throughput.py --smoke              # tiny model on the CPU: checks the harness
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from gpen_video.model.config import GPENConfig
from gpen_video.model.fast import BLUR_MODES, build_inference_model
from gpen_video.model.graphs import GraphedModel
from gpen_video.model.reference import GPEN


@dataclass
class Row:
    variant: str
    precision: str
    batch: int
    ms_per_batch: float
    faces_per_s: float
    tflops: float
    rel_error: float


def time_ms(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median wall time of ``fn`` in ms, synchronised, after warm-up."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def official_flops(cfg: GPENConfig) -> float:
    """FLOPs of one face as the official code runs it (convolutions and linears; 276.22 G for GPEN-BFR-512).

    Counted on the meta device: no memory, no arithmetic.
    """
    with torch.device("meta"):
        model = GPEN(cfg.size, cfg.channel_multiplier, cfg.narrow)
        x = torch.zeros(1, 3, cfg.size, cfg.size)
    with FlopCounterMode(display=False) as counter:
        model(x)
    return float(counter.get_total_flops())


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny model, few repeats, CPU allowed")
    ap.add_argument("--batches", default="1,8,16,32,64")
    ap.add_argument("--precisions", default="fp16,bf16")
    ap.add_argument("--blur", default=",".join(BLUR_MODES))
    ap.add_argument("--variants", default="eager,graph,triton,compile",
                    help="fast-path variants: eager, graph (CUDA graph replay), triton (eager with the fused "
                         "Triton kernels), triton-graph, compile (torch.compile + graph)")
    ap.add_argument("--compile-batches", default="32,64", help="batch sizes to try torch.compile on")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not args.smoke:
        raise SystemExit("the full benchmark needs a CUDA GPU; use --smoke on the CPU")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False  # the official path is plain fp32
    torch.backends.cuda.matmul.allow_tf32 = False

    if args.smoke:
        cfg, batches, repeats = GPENConfig(64, 1, 0.125), [1, 2], 2
        variants = [v for v in args.variants.split(",") if v == "eager" or device.type == "cuda"]
    else:
        cfg, repeats = GPENConfig(512, 2, 1.0), args.repeats
        batches = [int(b) for b in args.batches.split(",")]
        variants = args.variants.split(",")
    torch.manual_seed(0)
    official = GPEN(cfg.size, cfg.channel_multiplier, cfg.narrow).eval().to(device)
    state_dict = official.state_dict()
    flops = official_flops(cfg)
    probe = torch.rand(4, 3, cfg.size, cfg.size, device=device) * 2 - 1
    with torch.no_grad():
        reference = official.double()(probe.double()).float()
        official.float()

    rows: list[Row] = []

    def record(variant: str, precision: str, batch: int, model: Callable[[torch.Tensor], torch.Tensor]) -> None:
        x = torch.rand(batch, 3, cfg.size, cfg.size, device=device) * 2 - 1
        with torch.no_grad():
            ms = time_ms(lambda: model(x), device, repeats)
            err = rel_error(model(probe), reference)
        faces = batch / ms * 1e3
        rows.append(Row(variant, precision, batch, ms, faces, faces * flops / 1e12, err))
        print(f"  {variant:28s} {precision:5s} batch {batch:3d}: {faces:8.1f} faces/s  err {err:.1e}", flush=True)

    record("official (grouped conv)", "fp32", 1, official)
    for blur in args.blur.split(","):
        for precision in args.precisions.split(","):
            fast = build_inference_model(state_dict, device=device, precision=precision, blur=blur)
            fused = (build_inference_model(state_dict, device=device, precision=precision, blur=blur,
                                           kernels="triton") if device.type == "cuda" else None)
            for variant in variants:
                for batch in batches:
                    if variant == "eager":
                        record(f"fast eager, blur={blur}", precision, batch, fast)
                    elif variant == "graph":
                        record(f"fast graph, blur={blur}", precision, batch, GraphedModel(fast))
                    elif variant == "triton" and fused is not None:
                        record(f"fast eager+triton, blur={blur}", precision, batch, fused)
                    elif variant == "triton-graph" and fused is not None:
                        record(f"fast graph+triton, blur={blur}", precision, batch, GraphedModel(fused))
                    elif variant == "compile" and str(batch) in args.compile_batches.split(","):
                        t0 = time.perf_counter()
                        torch._dynamo.reset()  # each model and batch size is a fresh compile, not a recompile
                        compiled = GraphedModel(torch.compile(fast, fullgraph=True, dynamic=False))
                        with torch.no_grad():
                            compiled(probe[:1].expand(batch, -1, -1, -1).contiguous())
                        print(f"  (compiled for batch {batch} in {time.perf_counter() - t0:.0f} s)", flush=True)
                        record(f"fast compile+graph, blur={blur}", precision, batch, compiled)
                    if device.type == "cuda":
                        torch.cuda.empty_cache()

    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    base = rows[0].faces_per_s
    print(f"\nGPEN {cfg.size} (channel_multiplier {cfg.channel_multiplier}, {flops / 1e9:.2f} GFLOP/face) "
          f"on {name}, torch {torch.__version__}")
    print("| variant | precision | batch | ms/batch | faces/s | x official | TFLOP/s | rel. error vs fp64 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.variant} | {r.precision} | {r.batch} | {r.ms_per_batch:.2f} | {r.faces_per_s:.1f} | "
              f"{r.faces_per_s / base:.1f} | {r.tflops:.0f} | {r.rel_error:.1e} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "rows": [asdict(r) for r in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
