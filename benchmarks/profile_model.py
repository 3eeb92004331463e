"""Where the fast GPEN spends its GPU time: the top kernels of one batch, from torch.profiler.

    python benchmarks/profile_model.py --precision fp16 --blur fold --batch 32 [--compile]
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from gpen_video.model.choices import PRECISIONS
from gpen_video.model.fast import BLUR_MODES, build_inference_model
from gpen_video.model.reference import GPEN


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--precision", default="fp16", choices=sorted(PRECISIONS))
    ap.add_argument("--blur", default="fold", choices=BLUR_MODES)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--rows", type=int, default=20)
    args = ap.parse_args()

    torch.backends.cudnn.benchmark = True
    with torch.device("meta"):
        shapes = GPEN(args.size).state_dict()
    state_dict = {k: torch.randn(v.shape) for k, v in shapes.items()}
    model = build_inference_model(state_dict, device="cuda", precision=args.precision, blur=args.blur)
    if args.compile:
        model = torch.compile(model, fullgraph=True, dynamic=False)
    x = torch.rand(args.batch, 3, args.size, args.size, device="cuda") * 2 - 1
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            model(x)
            torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.rows, max_name_column_width=70))


if __name__ == "__main__":
    main()
