"""Eager GPEN's elementwise work fused into one Triton kernel: what torch.compile fuses, without a per-run compile.

Eager PyTorch runs each styled convolution's epilogue (demodulation, the noise channels, bias,
leaky ReLU, the cast back) and the FIR blur around each stride-2 convolution as a dozen passes
over full-size fp32 tensors. :func:`fused` reads its input once and writes its output once, in the
working precision. Triton compiles it once per machine and keeps it in its own cache, so a fresh
process only loads it. The arithmetic is :class:`~.fast.FastGPEN`'s, in fp32 with one rounding at
the end; the CPU runs the same kernel in Triton's interpreter for the tests.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .config import BLUR_TAPS

_BLOCK_ROWS = 64
_BLOCK_CHANNELS = 32


#: Specialised only on what the addressing gains from (the channel counts, innermost in memory): a
#: specialisation per row count and side would compile eight variants for GPEN-512 on a fresh
#: machine where four serve, each a fraction of a second before the first face.
@triton.jit(do_not_specialize=["rows", "src_h", "src_w", "out_h", "out_w"])
def _fused_kernel(src, demod, noise, bias, dst, rows, src_h, src_w, out_h, out_w, channels, noise_channels,
                  noise_weight, BLUR_PAD: tl.constexpr, TAP_OUTER: tl.constexpr, TAP_INNER: tl.constexpr,
                  HAS_DEMOD: tl.constexpr, ACTIVATE: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                  BLOCK_CHANNELS: tl.constexpr):
    # Channels-last tensors: element (n, c, y, x) of an (N, C, H, W) tensor lies at ((n*H + y)*W + x)*C + c.
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)[:, None]
    channel = tl.program_id(1) * BLOCK_CHANNELS + tl.arange(0, BLOCK_CHANNELS)[None, :]
    total = channels + noise_channels
    in_rows = row < rows
    n = row // (out_h * out_w)
    y = (row // out_w) % out_h
    x = row % out_w
    from_src = in_rows & (channel < channels)
    if BLUR_PAD > 0:
        value = tl.zeros((BLOCK_ROWS, BLOCK_CHANNELS), dtype=tl.float32)
        for i in tl.static_range(4):
            for j in tl.static_range(4):
                sy = y + i - BLUR_PAD
                sx = x + j - BLUR_PAD
                inside = from_src & (sy >= 0) & (sy < src_h) & (sx >= 0) & (sx < src_w)
                sample = tl.load(src + ((n * src_h + sy) * src_w + sx) * channels + channel, mask=inside, other=0.0)
                tap_y = TAP_OUTER if (i == 0 or i == 3) else TAP_INNER
                tap_x = TAP_OUTER if (j == 0 or j == 3) else TAP_INNER
                value += sample.to(tl.float32) * (tap_y * tap_x)
    else:
        value = tl.load(src + row * channels + channel, mask=from_src, other=0.0).to(tl.float32)
    if HAS_DEMOD:
        value *= tl.load(demod + n * channels + channel, mask=from_src, other=0.0)
    from_noise = in_rows & (channel >= channels) & (channel < total)
    noise_value = tl.load(noise + row * noise_channels + (channel - channels), mask=from_noise, other=0.0)
    value = tl.where(channel < channels, value, noise_value.to(tl.float32) * noise_weight)
    if ACTIVATE:
        value += tl.load(bias + channel, mask=channel < total, other=0.0)
        value = tl.where(value >= 0, value, 0.2 * value) * 1.4142135623730951
    tl.store(dst + row * total + channel, value.to(dst.dtype.element_ty), mask=in_rows & (channel < total))


def fused(src: torch.Tensor, blur_pad: int = 0, gain: float = 1.0, demod: torch.Tensor | None = None,
          noise: torch.Tensor | None = None, noise_weight: float = 0.0,
          bias: torch.Tensor | None = None) -> torch.Tensor:
    """``src`` (N, C, H, W), optionally blurred by the [1, 3, 3, 1] FIR (``gain``, zero-padded by
    ``blur_pad``: (H + 2 pad - 3) rows out), times ``demod`` (N, C); then ``noise`` (N, Cn, h, w)
    times ``noise_weight`` as Cn more channels; then, with ``bias`` (C + Cn), the leaky ReLU times
    sqrt 2. Channels-last, in ``src``'s precision."""
    src = src.contiguous(memory_format=torch.channels_last)
    n, channels, src_h, src_w = src.shape
    out_h, out_w = (src_h + 2 * blur_pad - 3, src_w + 2 * blur_pad - 3) if blur_pad else (src_h, src_w)
    noise_channels = 0
    if noise is not None:
        noise = noise.contiguous(memory_format=torch.channels_last)
        noise_channels = noise.shape[1]
    out = torch.empty((n, channels + noise_channels, out_h, out_w), dtype=src.dtype, device=src.device,
                      memory_format=torch.channels_last)
    rows = n * out_h * out_w
    scale = math.sqrt(gain) / sum(BLUR_TAPS)
    grid = (triton.cdiv(rows, _BLOCK_ROWS), triton.cdiv(channels + noise_channels, _BLOCK_CHANNELS))
    _fused_kernel[grid](src, demod.contiguous() if demod is not None else src, noise if noise is not None else src,
                        bias.reshape(-1).contiguous() if bias is not None else src, out, rows, src_h, src_w, out_h,
                        out_w, channels, noise_channels, float(noise_weight), BLUR_PAD=blur_pad,
                        TAP_OUTER=BLUR_TAPS[0] * scale, TAP_INNER=BLUR_TAPS[1] * scale, HAS_DEMOD=demod is not None,
                        ACTIVATE=bias is not None, BLOCK_ROWS=_BLOCK_ROWS, BLOCK_CHANNELS=_BLOCK_CHANNELS)
    return out
