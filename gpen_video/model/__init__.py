"""GPEN: the reference module that loads official checkpoints, and the fast inference build of it."""

from .config import GPENConfig
from .fast import PRECISIONS, FastGPEN, build_inference_model
from .reference import GPEN

__all__ = ["GPEN", "GPENConfig", "FastGPEN", "PRECISIONS", "build_inference_model"]
