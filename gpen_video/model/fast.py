"""The production GPEN: the same function as :class:`~gpen_video.model.reference.GPEN`, restructured for speed.

Built once from static weights:

* Modulated convolutions share one weight across the batch: scale the input by the style, convolve,
  then demodulate the output. This equals the official per-sample grouped convolution because
  demodulation is a per-(sample, output channel) factor, ``rsqrt(sum_i s_i^2 * sum_k W_oik^2)``,
  which is a small matrix product.
* Every equalised-learning-rate scale, learning-rate multiplier and FIR gain is folded into the
  stored weights.
* The FIR blur around each stride-2 convolution is either folded into the convolution kernel
  (a 6x6 kernel, exact because convolution is associative, but 4x the multiply-adds of those layers)
  or run separably as shifted sums that torch.compile fuses into the epilogue; ``make bench``
  measures both.
* The 1x1 RGB convolutions, which need no demodulation, use per-sample weights in one batched
  matrix product instead of rescaling a large feature map.
* The modulation of every layer comes from one matrix product of the style.
* Weights are converted once to the working precision and kept channels-last; there is no autocast.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from .choices import PRECISIONS
from .config import BLUR_TAPS, MAPPING_LR_MUL, GPENConfig
from .fir import blur_kernel

BLUR_MODES = ("fold", "separable")
#: How the elementwise work runs: PyTorch's operations (which torch.compile fuses), or one Triton
#: kernel per layer (model.kernels: GPUs, eager).
KERNELS = ("torch", "triton")
SQRT2 = math.sqrt(2.0)
_BLUR_DOWN = blur_kernel(BLUR_TAPS)
_BLUR_UP = blur_kernel(BLUR_TAPS, gain=4.0)  # after zero insertion, the filter restores the mean


def _lrelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.leaky_relu(x + bias, 0.2) * SQRT2


def _full_conv(weight: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Full 2-D convolution of every (out, in) plane of ``weight`` with one small symmetric ``kernel``."""
    o, i, kh, kw = weight.shape
    planes = weight.reshape(o * i, 1, kh, kw)
    k = kernel.to(weight)[None, None]
    return F.conv_transpose2d(planes, k).reshape(o, i, kh + k.shape[2] - 1, kw + k.shape[3] - 1)


class _Params(nn.Module):
    """A flat bag of tensors registered as buffers, so ``.to()`` moves them and nothing trains them."""

    def __init__(self, **tensors: torch.Tensor) -> None:
        super().__init__()
        for name, t in tensors.items():
            self.register_buffer(name, t, persistent=False)


class FastGPEN(nn.Module):
    """GPEN inference with static, pre-folded weights. Input and output as :class:`GPEN`."""

    def __init__(self, state_dict: Mapping[str, torch.Tensor], config: GPENConfig,
                 dtype: torch.dtype = torch.float32, blur: str = "separable", kernels: str = "torch") -> None:
        super().__init__()
        if blur not in BLUR_MODES:
            raise ValueError(f"blur must be one of {BLUR_MODES}, got {blur!r}")
        if kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
        self.config = config
        self.dtype = dtype
        self.blur = blur
        self.fused = None
        if kernels == "triton":
            from .kernels import fused

            self.fused = fused
        sd = {k: v.detach().float().cpu() for k, v in state_dict.items()}

        self.encoder = nn.ModuleList(self._encoder_stage(sd, i) for i in range(config.log_size - 1))
        fl = "final_linear.0"
        self.final_linear = _Params(weight=sd[f"{fl}.weight"] / math.sqrt(sd[f"{fl}.weight"].shape[1]),
                                    bias=sd[f"{fl}.bias"])
        self.mapping = nn.ModuleList(
            _Params(weight=sd[f"generator.style.{i}.weight"] * MAPPING_LR_MUL
                    / math.sqrt(sd[f"generator.style.{i}.weight"].shape[1]),
                    bias=sd[f"generator.style.{i}.bias"] * MAPPING_LR_MUL)
            for i in range(1, config.n_mlp + 1)
        )
        self.const = _Params(value=sd["generator.input.input"].to(dtype).contiguous(memory_format=torch.channels_last))

        g = "generator"
        self.convs = nn.ModuleList([self._styled_conv(sd, f"{g}.conv1", upsample=False)])
        self.to_rgbs = nn.ModuleList([self._to_rgb(sd, f"{g}.to_rgb1")])
        for i in range(len(config.resolutions) - 1):
            self.convs.append(self._styled_conv(sd, f"{g}.convs.{2 * i}", upsample=True))
            self.convs.append(self._styled_conv(sd, f"{g}.convs.{2 * i + 1}", upsample=False))
            self.to_rgbs.append(self._to_rgb(sd, f"{g}.to_rgbs.{i}"))

        # All layers' style modulations as one (sum of in_channels, style_dim) matrix.
        mods = [f"{p}.conv.modulation" for p in self._modulated_prefixes()]
        style_dim = config.style_dim
        self.modulation = _Params(weight=torch.cat([sd[f"{m}.weight"] for m in mods]) / math.sqrt(style_dim),
                                  bias=torch.cat([sd[f"{m}.bias"] for m in mods]))
        self._mod_sizes = [sd[f"{m}.bias"].shape[0] for m in mods]

    # ---- construction -------------------------------------------------------------------------

    def _modulated_prefixes(self) -> list[str]:
        n = len(self.config.resolutions) - 1
        prefixes = ["generator.conv1", "generator.to_rgb1"]
        for i in range(n):
            prefixes += [f"generator.convs.{2 * i}", f"generator.convs.{2 * i + 1}", f"generator.to_rgbs.{i}"]
        return prefixes

    def _conv_weight(self, w: torch.Tensor) -> torch.Tensor:
        return w.to(self.dtype).contiguous(memory_format=torch.channels_last)

    def _encoder_stage(self, sd: dict[str, torch.Tensor], i: int) -> _Params:
        if i == 0:
            w = sd["ecd0.0.0.weight"]
            return _Params(weight=self._conv_weight(w / math.sqrt(w[0].numel())),
                           bias=sd["ecd0.0.1.bias"].view(1, -1, 1, 1))
        w = sd[f"ecd{i}.0.1.weight"]
        w = w / math.sqrt(w[0].numel())
        if self.blur == "fold":
            w = _full_conv(w, _BLUR_DOWN)
        return _Params(weight=self._conv_weight(w), bias=sd[f"ecd{i}.0.2.bias"].view(1, -1, 1, 1))

    def _styled_conv(self, sd: dict[str, torch.Tensor], prefix: str, upsample: bool) -> _Params:
        w = sd[f"{prefix}.conv.weight"][0]  # (out, in, k, k)
        w = w / math.sqrt(w[0].numel())
        demod = w.pow(2).sum(dim=(2, 3))  # (out, in): demodulation is s^2 @ demod.T
        if upsample:
            if self.blur == "fold":
                w = _full_conv(w, _BLUR_UP)
            w = w.transpose(0, 1)  # conv_transpose2d takes (in, out, k, k)
        params = _Params(weight=self._conv_weight(w), demod=demod.t().contiguous(),
                         noise_weight=sd[f"{prefix}.noise.weight"],
                         bias=sd[f"{prefix}.activate.bias"].view(1, -1, 1, 1))
        params.noise_scale = float(sd[f"{prefix}.noise.weight"])  # the fused kernel's, read without a sync
        return params

    def _to_rgb(self, sd: dict[str, torch.Tensor], prefix: str) -> _Params:
        w = sd[f"{prefix}.conv.weight"][0, :, :, 0, 0]  # (3, in)
        return _Params(weight=w / math.sqrt(w.shape[1]), bias=sd[f"{prefix}.bias"].view(1, 3, 1, 1))

    # ---- forward ------------------------------------------------------------------------------

    @staticmethod
    def _separable_blur(x: torch.Tensor, pad: int, gain: float) -> torch.Tensor:
        """The [1, 3, 3, 1] FIR as shifted sums along each axis: elementwise work that torch.compile fuses
        into the neighbouring epilogue (cuDNN's depthwise convolution is several times slower)."""
        taps = [t / 8 * math.sqrt(gain) for t in BLUR_TAPS]
        x = F.pad(x, (pad, pad, pad, pad))
        h, w = x.shape[2] - 3, x.shape[3] - 3
        x = sum(t * x[:, :, :, i : i + w] for i, t in enumerate(taps))
        return sum(t * x[:, :, i : i + h, :] for i, t in enumerate(taps))

    @classmethod
    def _upsample_skip(cls, rgb: torch.Tensor) -> torch.Tensor:
        """The RGB skip at twice the size: zeros inserted between samples, then the FIR with gain 4
        (the official transposed convolution with the 4x4 kernel, stride 2, padding 1). A grouped
        3-channel transposed convolution would cost cuDNN about 0.2 s of planning per level on
        eager GPEN's first call at each batch size."""
        n, c, h, w = rgb.shape
        spread = rgb.new_zeros(n, c, 2 * h, 2 * w)
        spread[:, :, ::2, ::2] = rgb
        return cls._separable_blur(F.pad(spread, (1, 0, 1, 0)), 1, 4.0)

    def _encode(self, x: torch.Tensor) -> list[torch.Tensor]:
        features = []
        for i, stage in enumerate(self.encoder):
            if i == 0:
                x = F.conv2d(x, stage.weight)
            elif self.blur == "fold":
                x = F.conv2d(x, stage.weight, stride=2, padding=2)
            elif self.fused is not None:
                x = F.conv2d(self.fused(x, blur_pad=2), stage.weight, stride=2)
            else:
                x = F.conv2d(self._separable_blur(x.float(), 2, 1.0).to(self.dtype), stage.weight, stride=2)
            if self.fused is not None:
                x = self.fused(x, bias=stage.bias)
            else:
                x = _lrelu(x.float(), stage.bias).to(self.dtype)
            features.append(x)
        return features

    def _styled(self, layer: _Params, x: torch.Tensor, s: torch.Tensor, noise: torch.Tensor,
                upsample: bool) -> torch.Tensor:
        demod = torch.rsqrt(s.square() @ layer.demod + 1e-8)
        x = x * s.to(x.dtype)[:, :, None, None]
        if not upsample:
            out = F.conv2d(x, layer.weight, padding=1)
        elif self.blur == "fold":
            out = F.conv_transpose2d(x, layer.weight, stride=2, padding=2)
        elif self.fused is not None:
            return self.fused(F.conv_transpose2d(x, layer.weight, stride=2), blur_pad=1, gain=4.0, demod=demod,
                              noise=noise, noise_weight=layer.noise_scale, bias=layer.bias)
        else:
            out = self._separable_blur(F.conv_transpose2d(x, layer.weight, stride=2).float(), 1, 4.0)
        if self.fused is not None:
            return self.fused(out, demod=demod, noise=noise, noise_weight=layer.noise_scale, bias=layer.bias)
        # The epilogue runs in fp32 and rounds once: in fp16/bf16 each extra rounding costs accuracy.
        out = out.float() * demod[:, :, None, None]
        out = torch.cat((out, noise.float() * layer.noise_weight), dim=1)
        return _lrelu(out, layer.bias).to(self.dtype)

    def _to_rgb_out(self, layer: _Params, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        per_sample = (layer.weight[None] * s[:, None, :]).to(x.dtype)  # (n, 3, c)
        # channels-last x is (n, h*w, c) in memory: one batched matrix product, no rescaled copy of x.
        flat = x.permute(0, 2, 3, 1).reshape(n, h * w, c)
        rgb = torch.bmm(flat, per_sample.transpose(1, 2)).float()
        return rgb.reshape(n, h, w, 3).permute(0, 3, 1, 2) + layer.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype).contiguous(memory_format=torch.channels_last)
        features = self._encode(x)
        enc = features[-1].float().flatten(1)
        style = _lrelu(enc @ self.final_linear.weight.t(), self.final_linear.bias)
        w = style * torch.rsqrt(style.square().mean(dim=1, keepdim=True) + 1e-8)
        for layer in self.mapping:
            w = _lrelu(w @ layer.weight.t(), layer.bias)
        # Per level: the upsampling conv, the plain conv, the RGB conv (see _modulated_prefixes).
        styles = torch.split(torch.addmm(self.modulation.bias, w, self.modulation.weight.t()), self._mod_sizes, dim=1)
        noises = features[::-1]

        out = self.const.value.expand(x.shape[0], -1, -1, -1)
        out = self._styled(self.convs[0], out, styles[0], noises[0], upsample=False)
        skip = self._to_rgb_out(self.to_rgbs[0], out, styles[1])
        for i in range(1, len(noises)):
            s_up, s_conv, s_rgb = styles[3 * i - 1 : 3 * i + 2]
            out = self._styled(self.convs[2 * i - 1], out, s_up, noises[i], upsample=True)
            out = self._styled(self.convs[2 * i], out, s_conv, noises[i], upsample=False)
            rgb = self._to_rgb_out(self.to_rgbs[i], out, s_rgb)
            skip = rgb + self._upsample_skip(skip)
        return skip


def build_inference_model(state_dict: Mapping[str, torch.Tensor], device: str | torch.device = "cpu",
                          precision: str = "fp32", blur: str = "separable", kernels: str = "torch",
                          config: GPENConfig | None = None) -> FastGPEN:
    """Build the fast GPEN from an official-layout state dict, ready for ``torch.no_grad()`` inference.

    ``config`` is inferred from the tensor shapes when not given. ``kernels="triton"`` fuses the
    elementwise work for eager runs on a GPU; a model to compile keeps PyTorch's, which the
    compiler fuses itself.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    if config is None:
        from .weights import infer_config

        config = infer_config(state_dict)
    model = FastGPEN(state_dict, config, getattr(torch, PRECISIONS[precision]), blur, kernels)
    return model.to(device).eval().requires_grad_(False)
