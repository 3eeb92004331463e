"""CUDA-graph replay of a model for fixed batch shapes: one launch instead of hundreds per batch.

A GPU worker thread that launches every kernel from Python holds the GIL for most of the batch and
starves the decoder and encoder threads (see PERFORMANCE_NOTES in the reference data); replaying a
captured graph leaves the GIL free while the GPU works.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Outputs = torch.Tensor | tuple[torch.Tensor, ...]


def padded(x: torch.Tensor, size: int) -> torch.Tensor:
    """``x`` with its last item repeated up to ``size`` items, so that a short last batch replays
    the graph captured for full ones instead of capturing one of its own."""
    return torch.cat([x, x[-1:].expand(size - len(x), *x.shape[1:])]) if len(x) < size else x


class GraphedModel:
    """Calls ``model`` through one captured CUDA graph per input shape (captured on first use)."""

    def __init__(self, model: Callable[[torch.Tensor], Outputs]) -> None:
        self.model = model
        self._graphs: dict[tuple[int, ...], tuple[torch.cuda.CUDAGraph, torch.Tensor, Outputs]] = {}
        self._pool = None

    def _capture(self, x: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, Outputs]:
        # Capture runs on the current device's streams: it must be the input's (GPU 1's worker
        # would otherwise capture on GPU 0's stream and fail).
        with torch.cuda.device(x.device):
            return self._capture_here(x)

    def _capture_here(self, x: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, Outputs]:
        static_in = x.clone()
        side = torch.cuda.Stream(x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(2):  # warm-up selects kernels and allocates workspaces outside the capture
                self.model(static_in)
        torch.cuda.current_stream(x.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # An explicit capture stream: torch.cuda.graph's default one is created once, on whichever
        # device was current then, and a second GPU's capture would run on the first GPU's stream.
        # Thread-local capture: the other threads (decoder, other workers) keep using CUDA meanwhile.
        with torch.cuda.graph(graph, pool=self._pool, stream=side, capture_error_mode="thread_local"), \
                torch.no_grad():
            static_out = self.model(static_in)
        self._pool = graph.pool()  # graphs of different batch sizes share one memory pool
        return graph, static_in, static_out

    def __call__(self, x: torch.Tensor) -> Outputs:
        """The model's output for ``x``, in fresh tensors (the graph's own are overwritten next call)."""
        key = tuple(x.shape)
        if key not in self._graphs:
            self._graphs[key] = self._capture(x)
        graph, static_in, static_out = self._graphs[key]
        with torch.cuda.device(x.device):
            static_in.copy_(x)
            graph.replay()
            if isinstance(static_out, tuple):
                return tuple(t.clone() for t in static_out)
            return static_out.clone()
