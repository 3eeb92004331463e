"""The reference GPEN is the official FullGenerator: same checkpoint layout, same function."""

from __future__ import annotations

import pytest
import torch

from gpen_video.model.choices import OFFICIAL_MODELS
from gpen_video.model.reference import GPEN


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("name", list(OFFICIAL_MODELS))
def test_state_dict_layout_matches_official(name, official_layouts):
    layout = official_layouts[name]
    cfg = OFFICIAL_MODELS[name].config
    assert layout["config"]["size"] == cfg.size
    assert layout["config"]["channel_multiplier"] == cfg.channel_multiplier
    assert layout["config"]["narrow"] == cfg.narrow
    with torch.device("meta"):
        model = GPEN(cfg.size, cfg.channel_multiplier, cfg.narrow)
    sd = model.state_dict()
    buffers = {n for n, _ in model.named_buffers()}

    ours = [(k, list(v.shape), str(v.dtype).removeprefix("torch."), "buffer" if k in buffers else "parameter")
            for k, v in sd.items()]
    official = [(e["key"], e["shape"], e["dtype"], e["kind"]) for e in layout["state_dict"]]
    assert ours == official
    assert sum(p.numel() for p in model.parameters()) == layout["num_parameters"]


def test_golden_output_fp32(golden):
    c = golden["config"]
    model = GPEN(c["size"], c["channel_multiplier"], c["narrow"], c["style_dim"], c["n_mlp"]).eval()
    model.load_state_dict(golden["state_dict"], strict=True)
    with torch.no_grad():
        out = model(golden["input"])
    assert out.shape == golden["output"].shape
    assert _rel(out, golden["output"]) < 1e-4


def test_golden_output_fp64(golden):
    c = golden["config"]
    model = GPEN(c["size"], c["channel_multiplier"], c["narrow"], c["style_dim"], c["n_mlp"]).eval()
    model.load_state_dict(golden["state_dict"], strict=True)
    model = model.double()
    with torch.no_grad():
        out = model(golden["input"].double())
    assert _rel(out, golden["output_double"]) < 1e-10


def test_strict_load_rejects_a_wrong_shape(golden):
    c = golden["config"]
    model = GPEN(c["size"], c["channel_multiplier"], c["narrow"])
    sd = dict(golden["state_dict"])
    sd["ecd1.0.1.weight"] = sd["ecd1.0.1.weight"][:, :-1]
    with pytest.raises(RuntimeError, match="ecd1.0.1.weight"):
        model.load_state_dict(sd, strict=True)
