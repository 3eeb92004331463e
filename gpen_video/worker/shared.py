"""Frames in shared memory, for workers in processes of their own: each frame's planes are packed
once, by the decode thread, into a slot of a block that every worker process has mapped, and the
worker that restores the frame writes its new planes back into the same slot. Only the slot's
place (block and offset) crosses the pipe; no frame is pickled."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch

from ..media.colour import pack_planes, packed_size

if TYPE_CHECKING:
    import av

#: Slots per block: a block is one shared-memory segment, mapped once by each worker process.
BLOCK_SLOTS = 16
_PAGE = 4096


class SlotRef(NamedTuple):
    """Where a frame's packed planes lie: ``count`` samples of ``dtype`` at byte ``offset`` of block ``block``."""

    block: int
    offset: int
    count: int
    dtype: torch.dtype  # uint8, or int16 for samples over 8 bits

    def view(self, blocks: dict[int, torch.Tensor]) -> torch.Tensor:
        """The slot's samples, in whichever process ``blocks`` (block number -> bytes) belongs to."""
        return blocks[self.block][self.offset : self.offset + self.count * self.dtype.itemsize].view(self.dtype)


class SharedFrames:
    """Blocks of shared memory cut into slots of one size each: a slot is taken when a frame is
    staged and given back when the frame lets go of it. Blocks are made as more frames are in
    flight than the free slots of their size hold, and kept for the next frames while the engine
    that owns them lives, so a steady stream of frames reuses the same memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.blocks: dict[int, torch.Tensor] = {}  # block number -> its bytes, in shared memory
        self._numbers: dict[int, int] = {}  # a block's address -> its number
        self._free: dict[int, list[tuple[int, int]]] = {}  # slot bytes -> free (block, offset)

    def stage(self, frame: av.VideoFrame) -> tuple[torch.Tensor, Callable[[], None]]:
        """``frame``'s planes packed into a free slot (as :func:`~.device.stage_planes` packs them):
        the slot's samples, and the call that gives the slot back."""
        dtype, count = packed_size(frame)
        size = -(-count * dtype.itemsize // _PAGE) * _PAGE
        with self._lock:
            free = self._free.setdefault(size, [])
            if not free:
                number = len(self.blocks)
                self.blocks[number] = torch.empty(size * BLOCK_SLOTS, dtype=torch.uint8).share_memory_()
                self._numbers[self.blocks[number].data_ptr()] = number
                free.extend((number, k * size) for k in range(BLOCK_SLOTS))
            block, offset = free.pop()
        samples = SlotRef(block, offset, count, dtype).view(self.blocks)
        pack_planes(frame, samples.numpy())
        return samples, self._giver(size, block, offset)

    def _giver(self, size: int, block: int, offset: int) -> Callable[[], None]:
        def give_back() -> None:
            with self._lock:
                self._free[size].append((block, offset))

        return give_back

    def locate(self, samples: torch.Tensor) -> SlotRef:
        """The place of a slot's samples, from the tensor :meth:`stage` gave."""
        block = self._numbers[samples.untyped_storage().data_ptr()]
        return SlotRef(block, samples.storage_offset() * samples.element_size(), samples.numel(), samples.dtype)
