"""FIR filtering as GPEN (and StyleGAN2) defines it: zero-insert upsample, pad, filter, decimate."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def blur_kernel(taps: Sequence[float], gain: float = 1.0) -> torch.Tensor:
    """The separable 2-D filter built from 1-D taps, normalised to sum to ``gain``: on the CPU, also
    inside a module built on the meta device, where this arithmetic would import torch._dynamo."""
    k = torch.tensor(taps, dtype=torch.float32, device="cpu")
    k2d = k[None, :] * k[:, None]
    return k2d / k2d.sum() * gain


def upfirdn2d(
    x: torch.Tensor, kernel: torch.Tensor, up: int = 1, down: int = 1, pad: tuple[int, int] = (0, 0)
) -> torch.Tensor:
    """Upsample by zero insertion, pad, convolve with ``kernel`` per channel, keep every ``down``-th sample.

    A plain, obviously correct formulation (one single-channel convolution over all planes); it is the
    reference the fast path is checked against, not a fast operator.
    """
    n, c, h, w = x.shape
    if up > 1:
        z = x.new_zeros(n, c, h * up, w * up)
        z[:, :, ::up, ::up] = x
        x = z
    x = F.pad(x, (pad[0], pad[1], pad[0], pad[1]))
    planes = x.reshape(n * c, 1, x.shape[2], x.shape[3])
    # upfirdn convolves (flipped kernel); conv2d correlates.
    k = torch.flip(kernel, (0, 1)).to(x.dtype)[None, None]
    out = F.conv2d(planes, k)
    out = out[:, :, ::down, ::down]
    return out.reshape(n, c, out.shape[2], out.shape[3])
