"""Copies between the host and a device that do not stall the GPU, and work that is queued on a
device and read back later."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np
import torch

T = TypeVar("T")
U = TypeVar("U")


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


def to_host(values: torch.Tensor) -> torch.Tensor:
    """``values`` on the host: from a GPU, a copy into pinned memory that is only queued. Read it
    once the stream's work is done (:class:`Pending`); ``.cpu()`` would wait for that at once."""
    if values.device.type != "cuda":
        return values
    return torch.empty(values.shape, dtype=values.dtype, pin_memory=True).copy_(values, non_blocking=True)


class Pending(Generic[T]):
    """Work queued on a device; :meth:`result` waits for it (sleeping, not spinning: the encoder's
    threads need the cores) and builds the host-side result."""

    def __init__(self, finish: Callable[[], T], device: torch.device) -> None:
        self.finish = finish
        self.event = None
        if device.type == "cuda":
            self.event = torch.cuda.Event(blocking=True)
            self.event.record(torch.cuda.current_stream(device))

    def result(self) -> T:
        if self.event is not None:
            self.event.synchronize()
        return self.finish()

    def then(self, after: Callable[[T], U]) -> Pending[U]:
        """This work's result passed through ``after``, when collected."""
        return Pending(lambda: after(self.result()), torch.device("cpu"))
