"""How busy the GPUs were during a run: NVML's utilisation (the share of time in which at least
one kernel ran), sampled in a thread. Read through the driver's own library with ctypes, so the
bench needs no extra package; without a GPU or NVML it reports nothing."""

from __future__ import annotations

import ctypes
import threading
import time

import torch


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def _nvml() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    return lib if lib.nvmlInit_v2() == 0 else None


class GpuBusy:
    """``with GpuBusy([0, 1]) as busy: ...`` then ``busy.shares(since)``: the mean busy share per
    GPU (CUDA numbering) from ``since`` (a ``time.perf_counter()`` reading: model loading and
    compilation before a run should not count), or an empty dict without NVML."""

    def __init__(self, gpus: list[int], interval: float = 0.1) -> None:
        self.interval = interval
        self.lib = _nvml() if torch.cuda.is_available() else None
        self.handles: dict[int, ctypes.c_void_p] = {}
        for gpu in gpus if self.lib else []:
            p = torch.cuda.get_device_properties(gpu)
            handle = ctypes.c_void_p()
            bus_id = f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0".encode()
            if self.lib.nvmlDeviceGetHandleByPciBusId_v2(bus_id, ctypes.byref(handle)) == 0:
                self.handles[gpu] = handle
        self.samples: dict[int, list[tuple[float, int]]] = {gpu: [] for gpu in self.handles}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        reading = _Utilization()
        while not self.done.wait(self.interval):
            for gpu, handle in self.handles.items():
                if self.lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(reading)) == 0:
                    self.samples[gpu].append((time.perf_counter(), reading.gpu))

    def __enter__(self) -> GpuBusy:
        if self.handles:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()

    def shares(self, since: float = 0.0) -> dict[int, float]:
        shares = {}
        for gpu, samples in self.samples.items():
            window = [value for t, value in samples if t >= since]
            if window:
                shares[gpu] = round(sum(window) / len(window) / 100, 3)
        return shares
