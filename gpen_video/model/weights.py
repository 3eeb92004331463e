"""GPEN checkpoints: which file a run loads (an official one from the cache, or the user's own),
and the strict loading of any GPEN state dict."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from ..errors import WeightsError
from .choices import DEFAULT_MODEL, OFFICIAL_MODELS
from .config import GPENConfig
from .downloads import fetch, helper_file, official_file
from .kinds import misplaced
from .reference import GPEN


def helper_weights(what: str, url: str, path: str | Path | None, flag: str, progress: bool = True) -> Path:
    """A helper network's checkpoint (a detector, the face parser): ``path`` if given (never
    downloads), else the cached official file from ``url``, downloaded on first use; offline, the
    error names the file to fetch and where to save it."""
    if path is not None:
        if not Path(path).is_file():
            raise WeightsError(f"{what} weights not found: {path}")
        return Path(path)
    return fetch(helper_file(what, url, flag), progress)


# ---- loading and validation -------------------------------------------------------------------------

def _unwrap(obj: object) -> dict[str, torch.Tensor]:
    """Accept the dict shapes checkpoints come in: bare, under ``g_ema``/``params``/``state_dict``, DDP prefixes."""
    for key in ("g_ema", "params_ema", "params", "state_dict"):
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise WeightsError("it holds no tensor state dict")
    return {re.sub(r"^module\.", "", k): v for k, v in obj.items()}


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Load a checkpoint file to CPU without running any pickled code."""
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"weights file not found: {path}")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
        return _unwrap(obj)
    except WeightsError as exc:
        raise WeightsError(f"{path} is not a GPEN checkpoint: {exc}") from None
    except Exception as exc:  # torch reports truncation and non-checkpoints with many exception types
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WeightsError(f"{path} is not a readable PyTorch checkpoint (truncated or corrupt?): {reason}") from None


def infer_config(state_dict: Mapping[str, torch.Tensor]) -> GPENConfig:
    """Read size, width and style size of a GPEN generator from its tensor shapes."""
    try:
        encoder_stages = [int(m.group(1)) for k in state_dict if (m := re.match(r"ecd(\d+)\.", k))]
        if not encoder_stages:
            raise WeightsError("not a GPEN generator state dict (no encoder layers: ecd0, ecd1, ...)")
        size = 2 ** (max(encoder_stages) + 2)
        style_dim = state_dict["generator.style.1.weight"].shape[1]
        n_mlp = len([k for k in state_dict if re.fullmatch(r"generator\.style\.\d+\.weight", k)])
        narrow = state_dict["generator.input.input"].shape[1] / 512
        top_channels = state_dict["ecd0.0.0.weight"].shape[0]
    except (KeyError, ValueError, IndexError) as exc:
        raise WeightsError(f"not a GPEN generator state dict (missing {exc})") from None
    multiplier = 2
    if size >= 64:  # from 64 px up the top channel count is 16384 / size * multiplier * narrow
        multiplier = max(1, round(top_channels * size / (16384 * narrow)))
    return GPENConfig(size, multiplier, narrow, style_dim, n_mlp)


class _ShapesOnly(TorchFunctionMode):
    """Builds modules on the meta device for their shapes alone: random initialisation makes empty
    tensors and in-place arithmetic is skipped. Run as written, torch's Python meta kernels check
    their arguments with code that imports sympy, 0.4 s of every start for values nobody reads."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.randn, torch.rand):
            return torch.empty(*args, **{**kwargs, "device": "meta"})
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.startswith("_") and args and getattr(args[0], "is_meta", False):
            return args[0]  # an in-place operation keeps its tensor's shape
        return func(*args, **kwargs)


def expected_layout(config: GPENConfig) -> dict[str, tuple[int, ...]]:
    """Key -> shape of the official state dict for ``config``, in official order (built without memory)."""
    with torch.device("meta"), _ShapesOnly():
        model = GPEN(config.size, config.channel_multiplier, config.narrow, config.style_dim, config.n_mlp)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def check_layout(state_dict: Mapping[str, torch.Tensor], config: GPENConfig) -> None:
    """Raise naming the first key that is missing, unexpected, or of the wrong shape."""
    expected = expected_layout(config)
    for key, shape in expected.items():
        if key not in state_dict:
            raise WeightsError(f"missing key {key!r} (expected shape {list(shape)})")
        got = tuple(state_dict[key].shape)
        if got != shape:
            raise WeightsError(f"key {key!r} has shape {list(got)}, expected {list(shape)}")
    extra = [k for k in state_dict if k not in expected]
    if extra:
        raise WeightsError(f"unexpected key {extra[0]!r}")


def load_gpen_weights(model: str = DEFAULT_MODEL, weights: str | Path | None = None,
                      progress: bool = True) -> tuple[dict[str, torch.Tensor], GPENConfig]:
    """The state dict and configuration to run: ``weights`` if given (never downloads), else the official ``model``.

    Every checkpoint is checked key by key against the official layout before use.
    """
    if weights is None:
        if model not in OFFICIAL_MODELS:
            raise WeightsError(f"unknown model {model!r}; choose one of {', '.join(OFFICIAL_MODELS)} or pass --weights")
        path = fetch(official_file(OFFICIAL_MODELS[model]), progress)
    else:
        path = Path(weights)
    state_dict = read_state_dict(path)
    other = misplaced(state_dict, "a GPEN generator")
    if other:
        raise WeightsError(f"{path} is not a GPEN checkpoint: {other}")
    try:
        config = infer_config(state_dict)
        check_layout(state_dict, config)
    except WeightsError as exc:
        raise WeightsError(f"{path} is not a GPEN checkpoint: {exc}") from None
    if weights is None and config != OFFICIAL_MODELS[model].config:
        raise WeightsError(f"{path} holds a {config} generator, not {model}; delete it to download again")
    return state_dict, config

