"""What the half-precision guards cost, and fp16 against bf16, on GPEN as a GPU worker builds it.

- the check when GPEN loads: an eager restorer built as the pipeline builds it, its warm-up with
  the check turned off, then the check by itself (an fp32 model built from the checkpoint, one
  call on the shipped face, the comparison), first and second time in the process;
- the per-batch check: GPEN alone at the worker's batch, eager (fused Triton kernels) and compiled,
  with and without the check each restored batch runs (non-finite faces counted on the device and
  replaced by their input), taking turns; the ratio bounds the share of a render's faces/s;
- fp16 against bf16: the same faces/s, and each precision's difference from fp32 on the shipped face.

    python benchmarks/precision_guards.py [--weights G.pth]   # random GPEN-BFR-512 weights by default
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from model_throughput import time_ms

from gpen_video.model.config import GPENConfig
from gpen_video.model.precision import finite_faces, reference_face, relative_difference
from gpen_video.model.reference import GPEN
from gpen_video.model.weights import read_state_dict
from gpen_video.options import RestoreOptions
from gpen_video.worker.restorer import FaceRestorer


def guarded(model: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``model`` followed by the restorer's per-batch check, as ``FaceRestorer._gpen`` runs it."""
    def call(x: torch.Tensor) -> torch.Tensor:
        y = model(x)
        finite = finite_faces(y)
        y = torch.where(finite[:, None, None, None], y, x)
        call.counts.append((~finite).sum())
        return y
    call.counts = []
    return call


def seconds(fn: Callable[[], object]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="a GPEN checkpoint; random GPEN-BFR-512 weights time the same")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3, help="turns taken by the guarded and unguarded model")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()
    device = torch.device("cuda")
    if args.weights:
        state_dict = read_state_dict(args.weights)
    else:
        torch.manual_seed(0)
        cfg = GPENConfig(512, 2, 1.0)
        state_dict = GPEN(cfg.size, cfg.channel_multiplier, cfg.narrow).state_dict()
    rows: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}

    # The check when GPEN loads, measured apart from the start it rides on.
    checks = FaceRestorer._checks_precision
    FaceRestorer._checks_precision = property(lambda self: False)
    restorers = []
    rows["start_without_check_s"] = round(seconds(lambda: restorers.append(
        FaceRestorer(state_dict, RestoreOptions(), device, compiled=False)) or restorers[-1].close()), 3)
    FaceRestorer._checks_precision = checks
    restorer = restorers.pop()
    face = reference_face(restorer.crop_size, device)
    with torch.no_grad():
        restored = restorer.model(face)
        for call in ("first", "second"):
            rows[f"check_{call}_s"] = round(seconds(lambda: restorer._check_precision(restored, face)), 3)
    batch = restorer.face_batch

    # The per-batch check, and fp16 against bf16, at the worker's batch (the shipped face first).
    faces = torch.rand(batch, 3, 512, 512, device=device) * 2 - 1
    faces[:1] = face
    with torch.no_grad():
        exact = FaceRestorer(state_dict, RestoreOptions(precision="fp32"), device, compiled=False)
        exact.close()
        want = exact.model(faces)[:1]
        del exact
        for precision in ("fp16", "bf16"):
            for compiled in (False, True):
                torch._dynamo.reset()
                built = FaceRestorer(state_dict, RestoreOptions(precision=precision), device, compiled=compiled)
                built.close()
                name = f"{precision}_{'compiled' if compiled else 'eager'}"
                rows[f"{name}_difference_from_fp32"] = round(relative_difference(built.model(faces)[:1], want), 5)
                plain, checked = [], []
                for _ in range(args.rounds):
                    plain.append(time_ms(lambda: built.model(faces), device, args.repeats))
                    checked.append(time_ms(lambda check=guarded(built.model): check(faces), device, args.repeats))
                rows[f"{name}_faces_per_s"] = round(batch / statistics.median(plain) * 1e3, 1)
                rows[f"{name}_guarded_faces_per_s"] = round(batch / statistics.median(checked) * 1e3, 1)
                rows[f"{name}_guard_cost"] = round(statistics.median(checked) / statistics.median(plain) - 1, 4)
                print(json.dumps({k: v for k, v in rows.items() if k.startswith(name)}), flush=True)
    print(json.dumps(rows, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
