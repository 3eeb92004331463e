"""ParseNet, the face parser the official GPEN pastes back with (PSFRGAN's, as facexlib ships its
checkpoint): an encoder of strided residual blocks, ten residual blocks at 32x32, a decoder of
upsampling ones, and two heads, for the labels and an image. Defined here, with the
checkpoint's own keys, so that ``--mask parse`` needs no facexlib (which brings torchvision,
numba and a second OpenCV with it); ``tests/test_parse.py`` checks it against facexlib's.

Every convolution is 3x3 over a reflection-padded input. Where it samples down it strides by
two; where it samples up, the input is first doubled by nearest-neighbour interpolation. Batch
norm, then a leaky ReLU (0.2), follow where a block has them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: ParseNet as GPEN runs it: 512 px in and out, features from 64 channels, at most 256, 32x32 at the bottom.
SIZE, BASE, WIDEST, BOTTOM, BODY_BLOCKS = 512, 64, 256, 32, 10


class _BatchNorm(nn.Module):
    """Batch norm under the checkpoint's key (``norm.norm.*``)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class Conv(nn.Module):
    """A 3x3 convolution over a reflection-padded input: ``resample`` "down" strides by two, "up"
    doubles the input first; ``norm`` adds batch norm (and drops the bias), ``act`` a leaky ReLU."""

    def __init__(self, in_channels: int, out_channels: int, resample: str = "", norm: bool = False,
                 act: bool = False) -> None:
        super().__init__()
        self.up = resample == "up"
        self.act = act
        self.conv2d = nn.Conv2d(in_channels, out_channels, 3, 2 if resample == "down" else 1, bias=not norm)
        self.norm = _BatchNorm(out_channels) if norm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.up:
            x = F.interpolate(x, scale_factor=2, mode="nearest")
        x = self.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"))
        if self.norm is not None:
            x = self.norm(x)
        return F.leaky_relu(x, 0.2) if self.act else x


class Residual(nn.Module):
    """Two normalised convolutions (the first activated) beside a shortcut: the identity, or a
    plain convolution where the block resamples or changes width. Down, the second convolution
    strides; up, the first upsamples."""

    def __init__(self, in_channels: int, out_channels: int, resample: str = "") -> None:
        super().__init__()
        self.shortcut_func = Conv(in_channels, out_channels, resample) \
            if resample or in_channels != out_channels else None
        self.conv1 = Conv(in_channels, out_channels, "up" if resample == "up" else "", norm=True, act=True)
        self.conv2 = Conv(out_channels, out_channels, "down" if resample == "down" else "", norm=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.shortcut_func is None else self.shortcut_func(x)
        return identity + self.conv2(self.conv1(x))


def _width(channels: int) -> int:
    return max(BASE // 2, min(channels, WIDEST))


class ParseNet(nn.Module):
    """``labels`` classes per pixel of a 512 px face in [-1, 1]: :meth:`forward` gives their
    scores, (N, labels, 512, 512). The image head is kept for the checkpoint, not run."""

    def __init__(self, labels: int = 19) -> None:
        super().__init__()
        steps = (SIZE // BOTTOM).bit_length() - 1
        widths = [BASE * 2**i for i in range(steps + 1)]  # before clipping to [32, 256]
        self.encoder = nn.Sequential(
            Conv(3, BASE), *(Residual(_width(widths[i]), _width(widths[i + 1]), "down") for i in range(steps)))
        self.body = nn.Sequential(*(Residual(_width(widths[-1]), _width(widths[-1])) for _ in range(BODY_BLOCKS)))
        self.decoder = nn.Sequential(
            *(Residual(_width(widths[i]), _width(widths[i - 1]), "up") for i in range(steps, 0, -1)))
        self.out_img_conv = Conv(_width(BASE), 3)
        self.out_mask_conv = Conv(_width(BASE), labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.encoder(x)
        return self.out_mask_conv(self.decoder(features + self.body(features)))
