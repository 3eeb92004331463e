"""Small host-to-device copies that do not stall the GPU."""

from __future__ import annotations

import numpy as np
import torch


def to_device(values: torch.Tensor | np.ndarray | list | tuple, device: torch.device | str,
              dtype: torch.dtype | None = None) -> torch.Tensor:
    """``values`` as a tensor on ``device``, without waiting for the work already queued there.

    A blocking copy of host memory (``torch.as_tensor(x, device=...)``) synchronises the stream:
    the host would wait for the GPU to drain before every small upload (a face's transform, a
    frame size), and the GPU would idle while the host queues the next kernels. CUDA stages a
    pageable source before an asynchronous copy returns, so the host array may go at once.
    """
    if not isinstance(values, torch.Tensor):
        values = torch.from_numpy(np.asarray(values))
    return values.to(device, dtype, non_blocking=True)
