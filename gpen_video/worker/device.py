"""The work of one device: detect faces in frames, and restore the tracked faces of frames
(with its :class:`~.restorer.FaceRestorer`, loaded for jobs that restore). One instance per GPU
(or one for the CPU).

Frames come and go as YUV planes: they are uploaded once, through pinned buffers, for detection,
and converted to RGB there once; planes and RGB stay on the device until restoration, and only the
merged planes of restored frames come back, one buffer per frame that the encoder reads as it is
(:func:`~gpen_video.media.colour.packed_to_frame`). Detection and restoration are queued on the device and
collected later (:class:`Pending`), so the host can queue more work meanwhile. On a GPU, detection
runs in a CUDA stream of its own: the tracker needs its results soon, and on the restoration
stream their read-back would wait for every restoration queued before it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import av
import numpy as np
import torch

from ..faces.detect import Face, FaceDetector
from ..faces.track import gray_thumbnails, thumbnail_means
from ..media.colour import pack_planes, packed_size, packed_to_frame, unpack_planes
from ..media.frames import SourceFrame
from ..options import RestoreOptions
from ..transfer import Pending, to_device, to_host
from .messages import FaceSpec, Paste, Restored
from .restorer import FaceRestorer


def stage_planes(frame: av.VideoFrame, pinned: bool) -> torch.Tensor:
    """The frame's three planes packed one after another into one host buffer (pinned, for a GPU),
    from which a single asynchronous copy uploads the frame. The pipeline's decode thread stages
    each frame as it decodes it, so this copy is off the GPU worker's thread."""
    dtype, count = packed_size(frame)
    staged = torch.empty(count, dtype=dtype, pin_memory=pinned)
    pack_planes(frame, staged.numpy())
    return staged


def _groups(frames: Sequence[SourceFrame]) -> list[list[int]]:
    """The frames (by position) that share format and layout, so they convert as one batch: the
    fields of an interlaced video form two groups (top and bottom lines), a progressive video one.
    Every group comes out at the video's upright size, so their RGB is one batch again."""
    groups: dict[tuple, list[int]] = {}
    for i, f in enumerate(frames):
        groups.setdefault((f.frame.width, f.frame.height, f.frame.format.name, f.layout), []).append(i)
    return list(groups.values())


def _in_order(parts: list[torch.Tensor], groups: list[list[int]]) -> torch.Tensor:
    """The groups' batches (in :func:`_groups` order) as one batch in the frames' own order."""
    if len(parts) == 1:
        return parts[0]
    order = np.argsort([i for group in groups for i in group])
    return torch.cat(parts).index_select(0, to_device(order, parts[0].device))


def _of_group(batch: torch.Tensor, group: list[int], groups: list[list[int]]) -> torch.Tensor:
    """The rows of ``batch`` (in the frames' order) that belong to ``group``."""
    return batch if len(groups) == 1 else batch.index_select(0, to_device(np.array(group), batch.device))


class DeviceWorker:
    """The detector, and once a job restores, the restorer, living on one device."""

    def __init__(self, options: RestoreOptions, device: str, compiled: bool = False) -> None:
        self.options = options
        self.device = torch.device(device)
        self.compiled = compiled and self.device.type == "cuda"  # torch.compile + CUDA graphs: GPUs only
        # The detector runs in fp32: in fp16 RetinaFace found none of the ~6 small faces per frame of
        # the 1080p crowd clip on an H200 (fp32 found all), and it is a small share of the work.
        self.detector = FaceDetector(options.detector, options.detector_weights, device=self.device,
                                     threshold=options.threshold, min_size=options.min_face,
                                     max_faces=options.max_faces, progress=False)
        self.detect_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.restorer: FaceRestorer | None = None

    def stage(self, frame: SourceFrame) -> None:
        """On the decode thread: a GPU worker's frames are packed into pinned memory there, from
        which the worker's upload is one asynchronous copy; a CPU worker reads the frame itself."""
        if self.device.type == "cuda":
            frame.buffers.stage(stage_planes(frame.frame, pinned=True))

    @property
    def restores(self) -> bool:
        """Whether GPEN is loaded here."""
        return self.restorer is not None

    @property
    def alive(self) -> bool:
        """A worker in this process lives as long as the process."""
        return True

    def load_restorer(self, state_dict: dict[str, torch.Tensor]) -> Pending[None]:
        """Build GPEN (compiled if this worker is) and the paste-back here, once (done on return)."""
        if self.restorer is None:
            self.restorer = FaceRestorer(state_dict, self.options, self.device, self.compiled)
        return Pending(lambda: None, self.device)

    @property
    def face_batch(self) -> int:
        """Faces per GPEN call now (lowered after running out of memory)."""
        return self.restorer.face_batch if self.restorer is not None else self.options.batch_size

    @property
    def out_of_memory(self) -> int:
        """Times the GPEN batch was lowered."""
        return self.restorer.out_of_memory if self.restorer is not None else 0

    def take_notes(self) -> list[str]:
        """What the restorer has to say in the next job's summary (a precision fallback), once."""
        if self.restorer is None:
            return []
        notes, self.restorer.notes = self.restorer.notes, []
        return notes

    def close(self) -> None:
        """Let the restorer's warm-up finish (see :meth:`FaceRestorer.close`)."""
        if self.restorer is not None:
            self.restorer.close()

    def _detecting(self) -> contextlib.AbstractContextManager:
        """Work in this block runs on the detection stream (on a GPU)."""
        return torch.cuda.stream(self.detect_stream) if self.detect_stream is not None else contextlib.nullcontext()

    def prepare_detection(self, frames: int, height: int, width: int) -> None:
        """Ready the detector for batches of up to ``frames`` upright frames of ``height`` x
        ``width`` (once per size; the pool calls it before each detection). On a GPU every batch
        is padded to one shape, whose convolution algorithms are chosen here; compiled, the
        detector also becomes a CUDA graph: one launch instead of ~200 calls from the worker's
        thread."""
        if self.device.type == "cuda":
            with self._detecting():
                self.detector.fix_batch(frames, height, width, graph=self.compiled)

    def _upload(self, frames: Sequence[SourceFrame]) -> list[torch.Tensor]:
        """The frames' planes on the device, (N, h, w) per plane: from the buffers the decoder
        staged (staged here if it did not), one asynchronous copy per frame on a GPU, from pinned
        host memory, or from NVDEC's GPU without crossing the host."""
        pinned = self.device.type == "cuda"
        staged = [f.buffers.take_staged() for f in frames]
        staged = [s if s is not None else stage_planes(f.frame, pinned) for s, f in zip(staged, frames)]
        if pinned:
            batch = torch.empty((len(staged), len(staged[0])), dtype=staged[0].dtype, device=self.device)
            for row, buffer in zip(batch, staged):
                row.copy_(buffer, non_blocking=True)
                if buffer.is_cuda:  # made on the decoder's stream: not to be reused before this copy
                    buffer.record_stream(torch.cuda.current_stream(self.device))
        else:
            batch = torch.stack(staged)
        return unpack_planes(batch, frames[0].frame)

    def _resident(self, frames: Sequence[SourceFrame]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The frames' planes on this device, (N, h, w) per plane, and their upright RGB (N, 3, H, W)
        float: those kept since detection when all of them are here (copied on the device), else
        uploaded and converted again. The frames let go of them."""
        kept = [f.buffers.take_kept() for f in frames]
        if any(k is None or k[1].device != self.device for k in kept):
            planes = self._upload(frames)
            return planes, frames[0].layout.to_rgb(planes)
        if self.detect_stream is not None:
            # Allocated on the detection stream: their memory must not be reused there before this
            # stream has read them (the upload itself finished before the detection's results came
            # back, which the tracker needed to send this restoration).
            for tensor in (t for planes, rgb in kept for t in (*planes, rgb)):
                tensor.record_stream(torch.cuda.current_stream(self.device))
        planes = [torch.stack(plane) for plane in zip(*(planes for planes, _ in kept))]
        return planes, torch.stack([rgb for _, rgb in kept]).float()

    def _download(self, planes: list[torch.Tensor]) -> torch.Tensor:
        """(N, h, w) planes packed as an upload is (N, total), and copied to the host in one piece
        (pinned, on a GPU); read it once the copy is done. Each frame's row becomes its encoder frame."""
        return to_host(torch.cat([p.flatten(1) for p in planes], dim=1))

    def detect(self, frames: Sequence[SourceFrame]) -> tuple[list[list[Face]], np.ndarray]:
        """The faces of each frame, and each frame's scene thumbnail for the tracker's cut detection."""
        return self.queue_detect(frames).result()

    @torch.no_grad()
    def queue_detect(self, frames: Sequence[SourceFrame]) -> Pending[tuple[list[list[Face]], np.ndarray]]:
        """:meth:`detect`, queued on the device: returns once the work is queued, not done. The
        frames keep their planes and RGB on the device for their restoration."""
        with self._detecting():
            rgbs, groups = [], _groups(frames)
            for group in groups:
                members = [frames[i] for i in group]
                planes = self._upload(members)
                rgb = members[0].layout.to_rgb(planes)
                kept = rgb.to(torch.uint8)
                for i, frame in enumerate(members):
                    frame.buffers.keep([p[i] for p in planes], kept[i])
                rgbs.append(rgb)
            rgb = _in_order(rgbs, groups)
            found = self.detector.queue_rgb(rgb)
            means = to_host(thumbnail_means(rgb))

            def finish() -> tuple[list[list[Face]], np.ndarray]:
                return found.result(), gray_thumbnails(means.numpy())

            return Pending(finish, self.device)

    def restore(self, frames: Sequence[SourceFrame], faces: Sequence[Sequence[FaceSpec]]) -> list[Restored]:
        """Restore ``faces[i]`` in ``frames[i]``: their encoder frames, merged with the decoded samples."""
        return self.queue_restore(frames, faces).result()

    def queue_restore(self, frames: Sequence[SourceFrame], faces: Sequence[Sequence[FaceSpec]],
                      clip: int = 0, paste: Paste = Paste()) -> Pending[list[Restored]]:
        """:meth:`restore`, queued on the device: returns once the work is queued, not done.
        ``clip`` numbers the job the frames belong to (their tracks' masks are smoothed per job),
        ``paste`` says how its faces go back."""
        return self.queue_restore_packed(frames, faces, clip, paste).then(
            lambda rows: [Restored(packed_to_frame(row, f.frame), len(fs)) for row, f, fs in zip(rows, frames, faces)])

    @torch.no_grad()
    def queue_restore_packed(self, frames: Sequence[SourceFrame], faces: Sequence[Sequence[FaceSpec]],
                             clip: int = 0, paste: Paste = Paste()) -> Pending[list[np.ndarray]]:
        """:meth:`queue_restore`, up to each frame's new planes packed in one host buffer (the
        layout of an upload), which a worker process writes back into the frame's shared slot."""
        if self.restorer is None:
            raise RuntimeError(f"{self.device}: restoration before the restorer was loaded")
        groups = _groups(frames)
        resident = [self._resident([frames[i] for i in group]) for group in groups]
        image, changed = self.restorer.restore_rgb(_in_order([rgb for _, rgb in resident], groups), faces,
                                          [f.index for f in frames], clip, paste)
        nonfinite = self.restorer.take_nonfinite()  # the half-precision guard's count, read back with the frames
        nonfinite = to_host(nonfinite) if nonfinite is not None else None
        downloads = []
        for group, (planes, _) in zip(groups, resident):
            layout = frames[group[0]].layout
            new = layout.to_planes(_of_group(image, group, groups), planes[0].dtype)
            downloads.append(self._download(layout.merge(new, planes, _of_group(changed, group, groups))))

        def finish() -> list[np.ndarray]:
            if nonfinite is not None:
                self.restorer.note_nonfinite(int(nonfinite))
            rows: list[np.ndarray | None] = [None] * len(frames)
            for group, host in zip(groups, downloads):
                packed = host.numpy()
                for row, i in enumerate(group):
                    rows[i] = packed[row]
            return rows

        return Pending(finish, self.device)
