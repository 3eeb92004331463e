"""What can be chosen of GPEN: the official checkpoints, and the precision it runs in.

Plain data, so that the options and ``--help`` can name the choices without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import GPENConfig

_MODELSCOPE = ("https://www.modelscope.cn/api/v1/models/damo/cv_gpen_image-portrait-enhancement-hires/"
               "repo?Revision=master&FilePath=")
_VIGEN = "https://public-vigen-video.oss-cn-shanghai.aliyuncs.com/robin/models/"


@dataclass(frozen=True)
class OfficialModel:
    name: str
    config: GPENConfig
    url: str
    filename: str
    #: Size of ``torch.save`` of the state dict; the official files match it to within a few kB.
    approx_bytes: int


OFFICIAL_MODELS: dict[str, OfficialModel] = {
    m.name: m
    for m in (
        OfficialModel("GPEN-BFR-256", GPENConfig(256, channel_multiplier=1, narrow=0.5),
                      _VIGEN + "GPEN-BFR-256.pth", "GPEN-BFR-256.pth", 75_568_031),
        OfficialModel("GPEN-BFR-512", GPENConfig(512, channel_multiplier=2, narrow=1.0),
                      _VIGEN + "GPEN-BFR-512.pth", "GPEN-BFR-512.pth", 284_079_929),
        OfficialModel("GPEN-BFR-1024", GPENConfig(1024, channel_multiplier=2, narrow=1.0),
                      _MODELSCOPE + "pytorch_model.pt", "GPEN-BFR-1024.pt", 284_900_000),
        OfficialModel("GPEN-BFR-2048", GPENConfig(2048, channel_multiplier=2, narrow=1.0),
                      _MODELSCOPE + "pytorch_model-2048.pt", "GPEN-BFR-2048.pt", 285_240_000),
    )
}
DEFAULT_MODEL = "GPEN-BFR-512"

#: Precision name -> the torch dtype it runs GPEN in (an attribute of ``torch``).
PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
