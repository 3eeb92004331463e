"""GPEN as the official code computes it, with a module tree that matches the official checkpoints.

The attribute names, registration order and buffers below are dictated by the official
``FullGenerator.state_dict()`` layout (yangxy/GPEN), so official ``.pth`` files load with
``strict=True``. The forward pass follows the official algorithm step for step (per-sample grouped
modulated convolutions, zero-insertion transposed convolutions followed by FIR blurs). It is the
numerical reference; :mod:`gpen_video.model.fast` is what runs in production.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import BLUR_TAPS, MAPPING_LR_MUL, GPENConfig
from .fir import blur_kernel, upfirdn2d

SQRT2 = math.sqrt(2.0)
LRELU_SLOPE = 0.2


def bias_lrelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Leaky ReLU after a per-channel bias, scaled by sqrt(2) to keep unit variance (StyleGAN2's fused op)."""
    return F.leaky_relu(x + bias.view(1, -1, *([1] * (x.dim() - 2))), LRELU_SLOPE) * SQRT2


class PixelNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-8)


class BiasLeakyReLU(nn.Module):
    """Holds the learned bias of :func:`bias_lrelu` (the official ``FusedLeakyReLU``)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bias_lrelu(x, self.bias)


class EqualLinear(nn.Module):
    """Linear layer with equalised learning rate: weights are stored unscaled and scaled at run time."""

    def __init__(self, in_dim: int, out_dim: int, bias_init: float = 0.0, lr_mul: float = 1.0,
                 activate: bool = False) -> None:
        super().__init__()
        # In place, so that expected_layout can skip it: out of place on the meta device it imports torch._dynamo.
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))
        self.bias = nn.Parameter(torch.full((out_dim,), float(bias_init)))
        self.scale = lr_mul / math.sqrt(in_dim)
        self.lr_mul = lr_mul
        self.activate = activate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias * self.lr_mul
        if self.activate:
            return bias_lrelu(F.linear(x, self.weight * self.scale), bias)
        return F.linear(x, self.weight * self.scale, bias)


class EqualConv2d(nn.Module):
    """Bias-free convolution with equalised learning rate (GPEN's encoder never uses the conv bias)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size, kernel_size))
        self.scale = 1.0 / math.sqrt(in_channels * kernel_size**2)
        self.stride = stride
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight * self.scale, stride=self.stride, padding=self.padding)


class Blur(nn.Module):
    """FIR low-pass filter with asymmetric padding; ``gain`` compensates zero insertion before it."""

    def __init__(self, pad: tuple[int, int], gain: float = 1.0) -> None:
        super().__init__()
        self.register_buffer("kernel", blur_kernel(BLUR_TAPS, gain))
        self.pad = pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return upfirdn2d(x, self.kernel, pad=self.pad)


class Upsample(nn.Module):
    """2x FIR upsampling of the RGB skip branch."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("kernel", blur_kernel(BLUR_TAPS, gain=4.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return upfirdn2d(x, self.kernel, up=2, pad=(2, 1))


class ModulatedConv2d(nn.Module):
    """StyleGAN2 convolution whose weights are scaled per sample by a style, optionally demodulated.

    As in the official code, each sample gets its own weights and the batch runs as one grouped
    convolution; upsampling is a stride-2 transposed convolution followed by a blur.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, style_dim: int,
                 demodulate: bool = True, upsample: bool = False) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.upsample = upsample
        self.demodulate = demodulate
        if upsample:
            self.blur = Blur(pad=(1, 1), gain=4.0)
        self.weight = nn.Parameter(torch.randn(1, out_channels, in_channels, kernel_size, kernel_size))
        self.modulation = EqualLinear(style_dim, in_channels, bias_init=1.0)
        self.scale = 1.0 / math.sqrt(in_channels * kernel_size**2)

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        s = self.modulation(style).view(n, 1, self.in_channels, 1, 1)
        weight = self.scale * self.weight * s  # (n, out, in, k, k)
        if self.demodulate:
            weight = weight * torch.rsqrt(weight.pow(2).sum(dim=(2, 3, 4), keepdim=True) + 1e-8)
        k = self.kernel_size
        grouped = x.reshape(1, n * self.in_channels, h, w)
        if self.upsample:
            # conv_transpose2d wants (in, out) per group.
            weight = weight.transpose(1, 2).reshape(n * self.in_channels, self.out_channels, k, k)
            out = F.conv_transpose2d(grouped, weight, stride=2, groups=n)
            return self.blur(out.reshape(n, self.out_channels, out.shape[2], out.shape[3]))
        out = F.conv2d(grouped, weight.reshape(n * self.out_channels, self.in_channels, k, k),
                       padding=k // 2, groups=n)
        return out.reshape(n, self.out_channels, h, w)


class NoiseInjection(nn.Module):
    """Concatenates the weighted "noise" to the features; in GPEN the noise is an encoder feature map."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return torch.cat((x, self.weight * noise), dim=1)


class ConstantInput(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.input = nn.Parameter(torch.randn(1, channels, 4, 4))

    def forward(self, batch: int) -> torch.Tensor:
        return self.input.expand(batch, -1, -1, -1)


class StyledConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, style_dim: int, upsample: bool = False) -> None:
        super().__init__()
        self.conv = ModulatedConv2d(in_channels, out_channels, 3, style_dim, upsample=upsample)
        self.noise = NoiseInjection()
        self.activate = BiasLeakyReLU(out_channels * 2)

    def forward(self, x: torch.Tensor, style: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.activate(self.noise(self.conv(x, style), noise))


class ToRGB(nn.Module):
    def __init__(self, in_channels: int, style_dim: int, upsample: bool = True) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))
        if upsample:
            self.upsample = Upsample()
        self.conv = ModulatedConv2d(in_channels, 3, 1, style_dim, demodulate=False)

    def forward(self, x: torch.Tensor, style: torch.Tensor, skip: torch.Tensor | None = None) -> torch.Tensor:
        out = self.conv(x, style) + self.bias
        if skip is not None:
            out = out + self.upsample(skip)
        return out


class Generator(nn.Module):
    """The StyleGAN2 decoder: mapping MLP, constant input, styled convolutions, RGB skip outputs."""

    def __init__(self, cfg: GPENConfig) -> None:
        super().__init__()
        self.style = nn.Sequential(
            PixelNorm(),
            *(EqualLinear(cfg.style_dim, cfg.style_dim, lr_mul=MAPPING_LR_MUL, activate=True)
              for _ in range(cfg.n_mlp)),
        )
        c4 = cfg.channels(4)
        self.input = ConstantInput(c4)
        self.conv1 = StyledConv(c4, c4, cfg.style_dim)
        self.to_rgb1 = ToRGB(c4 * 2, cfg.style_dim, upsample=False)
        self.convs = nn.ModuleList()
        self.to_rgbs = nn.ModuleList()
        in_channels = c4
        for res in cfg.resolutions[1:]:
            out_channels = cfg.channels(res)
            self.convs.append(StyledConv(in_channels * 2, out_channels, cfg.style_dim, upsample=True))
            self.convs.append(StyledConv(out_channels * 2, out_channels, cfg.style_dim))
            self.to_rgbs.append(ToRGB(out_channels * 2, cfg.style_dim))
            in_channels = out_channels

    def forward(self, style: torch.Tensor, features: list[torch.Tensor]) -> torch.Tensor:
        """``features`` are the encoder outputs from 4x4 up to full size, one per synthesis resolution."""
        w = self.style(style)  # one style for every layer: GPEN never mixes styles at inference
        out = self.conv1(self.input(w.shape[0]), w, features[0])
        skip = self.to_rgb1(out, w)
        for i, to_rgb in enumerate(self.to_rgbs):
            noise = features[i + 1]
            out = self.convs[2 * i](out, w, noise)
            out = self.convs[2 * i + 1](out, w, noise)
            skip = to_rgb(out, w, skip)
        return skip


def _conv_layer(in_channels: int, out_channels: int, kernel_size: int, downsample: bool) -> nn.Sequential:
    """The official ``ConvLayer``: [blur,] conv, bias + leaky ReLU, as one indexed sequence."""
    layers: list[nn.Module] = []
    if downsample:
        layers.append(Blur(pad=(2, 2)))
        layers.append(EqualConv2d(in_channels, out_channels, kernel_size, stride=2))
    else:
        layers.append(EqualConv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2))
    layers.append(BiasLeakyReLU(out_channels))
    return nn.Sequential(*layers)


class GPEN(nn.Module):
    """The official ``FullGenerator``: a U-shaped encoder whose features drive the GAN decoder.

    ``forward`` takes RGB in [-1, 1], shape (N, 3, size, size), and returns the restored RGB image
    (unbounded, roughly [-1, 1]) of the same shape.
    """

    def __init__(self, size: int, channel_multiplier: int = 2, narrow: float = 1.0,
                 style_dim: int = 512, n_mlp: int = 8) -> None:
        super().__init__()
        self.config = GPENConfig(size, channel_multiplier, narrow, style_dim, n_mlp)
        cfg = self.config
        self.generator = Generator(cfg)
        self.ecd0 = nn.Sequential(_conv_layer(3, cfg.channels(cfg.size), 1, downsample=False))
        in_channels = cfg.channels(cfg.size)
        for i, res in enumerate(reversed(cfg.resolutions[:-1]), start=1):
            out_channels = cfg.channels(res)
            setattr(self, f"ecd{i}", nn.Sequential(_conv_layer(in_channels, out_channels, 3, downsample=True)))
            in_channels = out_channels
        self.final_linear = nn.Sequential(EqualLinear(cfg.channels(4) * 16, style_dim, activate=True))

    @property
    def encoder(self) -> list[nn.Module]:
        return [getattr(self, f"ecd{i}") for i in range(self.config.log_size - 1)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = []
        for stage in self.encoder:
            x = stage(x)
            features.append(x)
        style = self.final_linear(x.flatten(1))
        return self.generator(style, features[::-1])
