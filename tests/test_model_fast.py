"""The fast inference build computes the reference function, in every precision, for any batch."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch

from gpen_video.model.config import GPENConfig
from gpen_video.model.fast import BLUR_MODES, KERNELS, build_inference_model
from gpen_video.model.reference import GPEN

from .conftest import requires_cuda, shared_file

TOLERANCE = {"fp32": 1e-5, "fp16": 1e-2, "bf16": 1e-2}


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double().cpu() - ref.double().cpu()).norm() / ref.double().cpu().norm()).item()


@pytest.fixture(scope="module")
def wide_model() -> GPEN:
    """A random GPEN with channel_multiplier 2 and unequal widths per level, unlike the golden one."""
    torch.manual_seed(7)
    return GPEN(128, channel_multiplier=2, narrow=1 / 16).eval()


@pytest.mark.parametrize("blur", BLUR_MODES)
@pytest.mark.parametrize("precision", list(TOLERANCE))
def test_matches_official_golden_output(golden, precision, blur):
    model = build_inference_model(golden["state_dict"], precision=precision, blur=blur)
    with torch.no_grad():
        out = model(golden["input"])
    assert out.dtype == torch.float32 and out.shape == golden["output"].shape
    assert _rel(out, golden["output_double"]) < TOLERANCE[precision]


@pytest.mark.parametrize("blur", BLUR_MODES)
@pytest.mark.parametrize("precision", list(TOLERANCE))
def test_matches_reference_on_fresh_inputs(wide_model, precision, blur):
    torch.manual_seed(11)
    x = torch.rand(4, 3, 128, 128) * 2 - 1
    fast = build_inference_model(wide_model.state_dict(), precision=precision, blur=blur)
    with torch.no_grad():
        ref = copy.deepcopy(wide_model).double()(x.double())
        out = fast(x)
    assert _rel(out, ref) < TOLERANCE[precision]


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_batch_items_equal_single_runs(golden, batch):
    model = build_inference_model(golden["state_dict"], precision="fp32")
    torch.manual_seed(batch)
    x = torch.rand(batch, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        together = model(x)
        for i in range(batch):
            alone = model(x[i : i + 1])
            assert _rel(together[i : i + 1], alone) < 1e-5


def test_infers_config_from_shapes(wide_model):
    fast = build_inference_model(wide_model.state_dict())
    assert fast.config == GPENConfig(128, channel_multiplier=2, narrow=1 / 16)


def test_rejects_unknown_precision(golden):
    with pytest.raises(ValueError, match="precision"):
        build_inference_model(golden["state_dict"], precision="int8")


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("blur", BLUR_MODES)
@pytest.mark.parametrize("precision", list(TOLERANCE))
def test_matches_reference_on_gpu(golden, wide_model, precision, blur, kernels, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    for sd, x, ref_model in (
        (golden["state_dict"], golden["input"], None),
        (wide_model.state_dict(), torch.rand(8, 3, 128, 128) * 2 - 1, wide_model),
    ):
        if ref_model is None:
            ref = golden["output_double"]
        else:
            with torch.no_grad():
                ref = copy.deepcopy(ref_model).double()(x.double())
        model = build_inference_model(sd, device="cuda", precision=precision, blur=blur, kernels=kernels)
        with torch.no_grad():
            out = model(x.cuda())
        assert _rel(out, ref) < TOLERANCE[precision]


# Triton's interpreter runs the fused kernels on the CPU, as a GPU runs them compiled; it is chosen
# when Triton is imported, so these run in a process of their own.
_INTERPRETED = """
import sys, torch
from gpen_video.model.fast import build_inference_model
golden = torch.load(sys.argv[1], weights_only=True)
for precision, blur, faces in (("fp32", "fold", 3), ("fp16", "fold", 3), ("fp32", "separable", 1)):
    model = build_inference_model(golden["state_dict"], precision=precision, blur=blur, kernels="triton")
    with torch.no_grad():
        out = model(golden["input"][:faces])
    ref = golden["output_double"][:faces]
    print(precision, blur, ((out.double() - ref).norm() / ref.norm()).item())
"""


def test_fused_triton_kernels_match_the_official_output(golden):
    pytest.importorskip("triton")
    run = subprocess.run([sys.executable, "-c", _INTERPRETED, str(shared_file("gpen_reference/golden_small.pt"))],
                         capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr
    errors = [line.split() for line in run.stdout.splitlines()]
    assert [(precision, blur) for precision, blur, _ in errors] == [
        ("fp32", "fold"), ("fp16", "fold"), ("fp32", "separable")]
    for precision, _, error in errors:
        assert float(error) < TOLERANCE[precision]
