"""The shape of a GPEN generator: everything needed to build one, nothing learned."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The FIR filter every official GPEN checkpoint was trained with.
BLUR_TAPS = (1, 3, 3, 1)
#: Learning-rate multiplier of the mapping MLP; its weights are stored divided by it.
MAPPING_LR_MUL = 0.01


@dataclass(frozen=True)
class GPENConfig:
    """Hyper-parameters of the official ``FullGenerator`` that change between checkpoints."""

    size: int
    channel_multiplier: int = 2
    narrow: float = 1.0
    style_dim: int = 512
    n_mlp: int = 8

    def __post_init__(self) -> None:
        if self.size < 8 or self.size & (self.size - 1):
            raise ValueError(f"GPEN size must be a power of two >= 8, got {self.size}")

    @property
    def log_size(self) -> int:
        return int(math.log2(self.size))

    def channels(self, resolution: int) -> int:
        """Feature channels at a resolution; ``int()`` truncates exactly as the official table does."""
        base = {
            4: 512, 8: 512, 16: 512, 32: 512,
            64: 256 * self.channel_multiplier,
            128: 128 * self.channel_multiplier,
            256: 64 * self.channel_multiplier,
            512: 32 * self.channel_multiplier,
            1024: 16 * self.channel_multiplier,
            2048: 8 * self.channel_multiplier,
        }[resolution]
        return int(base * self.narrow)

    @property
    def resolutions(self) -> list[int]:
        """Synthesis resolutions from 4 up to ``size``."""
        return [2**i for i in range(2, self.log_size + 1)]
