"""RetinaFace, the official GPEN's face detector, built as facexlib builds it so that facexlib's
checkpoints load unchanged: a MobileNet-0.25 or ResNet-50 backbone, a feature pyramid, an SSH
context module and three heads (scores, box offsets, landmark offsets) on each of three levels;
then its anchors, the decoding of its offsets, and the non-maximum suppression.

Defined here rather than imported from facexlib: facexlib's detector imports torchvision, and
torchvision's operators import ``torch._dynamo`` (sympy with it), 1.8 s of every process's start on
a CPU and 3.1 s on the GPU machine (BENCHMARKS.md, run BR), for a network that is never compiled.
``tests/test_detect.py`` holds it to facexlib's outputs on the real checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

#: Anchor sizes (pixels) and strides of the three pyramid levels, and the offsets' scales.
MIN_SIZES = ((16, 32), (64, 128), (256, 512))
STEPS = (8, 16, 32)
VARIANCE = (0.1, 0.2)


@dataclass(frozen=True)
class Backbone:
    """A backbone's channels: ``stage`` at the first level it gives (doubling at each next), and
    the pyramid's width."""

    stage: int
    pyramid: int


BACKBONES = {"mobile0.25": Backbone(stage=64, pyramid=64), "resnet50": Backbone(stage=512, pyramid=256)}


def _conv_bn(cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1,
             leaky: float | None = 0.0) -> list[nn.Module]:
    """A bias-free convolution and its batch norm, then a (leaky) ReLU unless ``leaky`` is None."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if leaky is not None:
        layers.append(nn.LeakyReLU(leaky, inplace=True))
    return layers


def _depthwise_separable(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(*_conv_bn(cin, cin, stride=stride, groups=cin, leaky=0.1),
                         *_conv_bn(cin, cout, kernel=1, leaky=0.1))


class MobileNetBody(nn.Module):
    """MobileNet-0.25 up to its third stage: features at strides 8, 16 and 32."""

    def __init__(self) -> None:
        super().__init__()
        self.stage1 = nn.Sequential(nn.Sequential(*_conv_bn(3, 8, stride=2, leaky=0.1)),
                                    *(_depthwise_separable(cin, cout, stride) for cin, cout, stride in
                                      ((8, 16, 1), (16, 32, 2), (32, 32, 1), (32, 64, 2), (64, 64, 1))))
        self.stage2 = nn.Sequential(_depthwise_separable(64, 128, 2),
                                    *(_depthwise_separable(128, 128, 1) for _ in range(5)))
        self.stage3 = nn.Sequential(_depthwise_separable(128, 256, 2), _depthwise_separable(256, 256, 1))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        first = self.stage1(x)
        second = self.stage2(first)
        return [first, second, self.stage3(second)]


class Bottleneck(nn.Module):
    """ResNet-50's block (torchvision's layout: the stride on the 3x3 convolution)."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, width * 4, 1, stride, bias=False), nn.BatchNorm2d(width * 4))
                           if stride != 1 or cin != width * 4 else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNetBody(nn.Module):
    """ResNet-50 up to its fourth layer: features of layers 2, 3 and 4 (strides 8, 16 and 32)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        for index, (width, blocks, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), 1):
            layer = []
            for block in range(blocks):
                layer.append(Bottleneck(cin, width, stride if block == 0 else 1))
                cin = width * 4
            setattr(self, f"layer{index}", nn.Sequential(*layer))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.layer1(self.maxpool(self.relu(self.bn1(self.conv1(x)))))
        second = self.layer2(x)
        third = self.layer3(second)
        return [second, third, self.layer4(third)]


class Pyramid(nn.Module):
    """The feature pyramid: each level to the pyramid's width, the coarser ones added in, top down."""

    def __init__(self, stage: int, width: int) -> None:
        super().__init__()
        leaky = 0.1 if width <= 64 else 0.0
        for level in (1, 2, 3):
            setattr(self, f"output{level}", nn.Sequential(*_conv_bn(stage * 2 ** (level - 1), width, kernel=1,
                                                                     leaky=leaky)))
        self.merge1 = nn.Sequential(*_conv_bn(width, width, leaky=leaky))
        self.merge2 = nn.Sequential(*_conv_bn(width, width, leaky=leaky))

    def forward(self, levels: list[torch.Tensor]) -> list[torch.Tensor]:
        first, second, third = self.output1(levels[0]), self.output2(levels[1]), self.output3(levels[2])
        second = self.merge2(second + F.interpolate(third, size=second.shape[2:], mode="nearest"))
        first = self.merge1(first + F.interpolate(second, size=first.shape[2:], mode="nearest"))
        return [first, second, third]


class ContextModule(nn.Module):
    """SSH's context module: 3x3, 5x5 and 7x7 receptive fields side by side (the larger ones as
    stacked 3x3 convolutions), concatenated."""

    def __init__(self, width: int) -> None:
        super().__init__()
        leaky = 0.1 if width <= 64 else 0.0
        self.conv3X3 = nn.Sequential(*_conv_bn(width, width // 2, leaky=None))
        self.conv5X5_1 = nn.Sequential(*_conv_bn(width, width // 4, leaky=leaky))
        self.conv5X5_2 = nn.Sequential(*_conv_bn(width // 4, width // 4, leaky=None))
        self.conv7X7_2 = nn.Sequential(*_conv_bn(width // 4, width // 4, leaky=leaky))
        self.conv7x7_3 = nn.Sequential(*_conv_bn(width // 4, width // 4, leaky=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = self.conv5X5_1(x)
        return F.relu(torch.cat([self.conv3X3(x), self.conv5X5_2(wide), self.conv7x7_3(self.conv7X7_2(wide))], 1))


class Head(nn.Module):
    """A 1x1 convolution giving ``values`` numbers for each of the two anchors of every position."""

    def __init__(self, width: int, values: int) -> None:
        super().__init__()
        self.values = values
        self.conv1x1 = nn.Conv2d(width, 2 * values, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1x1(x).permute(0, 2, 3, 1)
        return out.reshape(out.shape[0], -1, self.values)


class RetinaFace(nn.Module):
    """The network: BGR, mean-subtracted frames (N, 3, H, W) in; per anchor, box offsets (N, A, 4),
    face and background probabilities (N, A, 2) and landmark offsets (N, A, 10) out."""

    def __init__(self, backbone: str) -> None:
        super().__init__()
        channels = BACKBONES[backbone]
        self.body = MobileNetBody() if backbone == "mobile0.25" else ResNetBody()
        self.fpn = Pyramid(channels.stage, channels.pyramid)
        self.ssh1, self.ssh2, self.ssh3 = (ContextModule(channels.pyramid) for _ in range(3))
        self.ClassHead = nn.ModuleList(Head(channels.pyramid, 2) for _ in range(3))
        self.BboxHead = nn.ModuleList(Head(channels.pyramid, 4) for _ in range(3))
        self.LandmarkHead = nn.ModuleList(Head(channels.pyramid, 10) for _ in range(3))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        levels = self.fpn(self.body(x))
        features = [self.ssh1(levels[0]), self.ssh2(levels[1]), self.ssh3(levels[2])]

        def heads(which: nn.ModuleList) -> torch.Tensor:
            return torch.cat([head(feature) for head, feature in zip(which, features)], dim=1)

        return heads(self.BboxHead), F.softmax(heads(self.ClassHead), dim=-1), heads(self.LandmarkHead)


def anchors(height: int, width: int) -> torch.Tensor:
    """The anchors of a ``height`` x ``width`` input, (A, 4): centre x and y and size, as fractions
    of the input, level by level, row by row, two sizes per position (the network's order)."""
    rows = []
    for sizes, step in zip(MIN_SIZES, STEPS):
        ys, xs = np.meshgrid(np.arange(-(-height // step)), np.arange(-(-width // step)), indexing="ij")
        centres = np.stack([(xs.ravel() + 0.5) * step / width, (ys.ravel() + 0.5) * step / height], axis=1)
        for_size = [np.concatenate([centres, np.broadcast_to([size / width, size / height], centres.shape)], 1)
                    for size in sizes]
        rows.append(np.stack(for_size, axis=1).reshape(-1, 4))
    return torch.from_numpy(np.concatenate(rows).astype(np.float32))


def decode_boxes(offsets: torch.Tensor, priors: torch.Tensor) -> torch.Tensor:
    """Boxes (..., 4) as x0, y0, x1, y1 fractions of the input, from the network's offsets and their anchors."""
    centre = priors[..., :2] + offsets[..., :2] * VARIANCE[0] * priors[..., 2:]
    size = priors[..., 2:] * torch.exp(offsets[..., 2:] * VARIANCE[1])
    corner = centre - size / 2
    return torch.cat([corner, corner + size], dim=-1)


def decode_landmarks(offsets: torch.Tensor, priors: torch.Tensor) -> torch.Tensor:
    """The five landmarks (..., 10) as x, y fractions of the input, from the network's offsets."""
    points = offsets.unflatten(-1, (5, 2))
    centre, size = priors[..., None, :2], priors[..., None, 2:]
    return (centre + points * VARIANCE[0] * size).flatten(-2)


def suppress(boxes: np.ndarray, scores: np.ndarray, overlap: float) -> list[int]:
    """Greedy non-maximum suppression: the indices of the boxes (K, 4) kept, best score first; a
    box goes when it overlaps a better kept one by more than ``overlap`` (intersection over union)."""
    order = np.argsort(-scores, kind="stable")
    x0, y0, x1, y1 = (boxes[:, i] for i in range(4))
    areas = (x1 - x0) * (y1 - y0)
    kept: list[int] = []
    gone = np.zeros(len(boxes), bool)
    for position, i in enumerate(order):
        if gone[i]:
            continue
        kept.append(int(i))
        rest = order[position + 1 :]
        width = np.maximum(0, np.minimum(x1[i], x1[rest]) - np.maximum(x0[i], x0[rest]))
        height = np.maximum(0, np.minimum(y1[i], y1[rest]) - np.maximum(y0[i], y0[rest]))
        inter = width * height
        gone[rest[inter / (areas[i] + areas[rest] - inter) > overlap]] = True
    return kept
