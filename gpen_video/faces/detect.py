"""Face detection: RetinaFace (the official GPEN's network, facexlib's checkpoints), batched over frames,
with GPU pre- and post-processing."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from ..errors import WeightsError
from ..model.graphs import GraphedModel, padded
from ..model.kinds import key_mismatch, misplaced
from ..model.weights import helper_weights
from ..transfer import Pending, to_device, to_host
from .choices import DEFAULT_DETECTOR, DEFAULT_THRESHOLD, DETECTORS
from .retinaface import RetinaFace, anchors, decode_boxes, decode_landmarks, suppress

_BGR_MEAN = (104.0, 117.0, 123.0)  # RetinaFace was trained on mean-subtracted BGR
#: Pixels (at the detection size) the network sees in one call on a CPU: larger calls allocate
#: activations glibc maps fresh each time, and their page faults cost more than batching saves
#: (720p frames: 51 ms each one at a time, 100 ms each sixteen at a time, 76 of them in the kernel).
CPU_CALL_PIXELS = 1_000_000
#: Boxes per frame, the best by score, that come back for the non-maximum suppression: a face
#: gives a few dozen over the threshold. A frame with more over it has all of them brought back.
CANDIDATES = 1024


@dataclass
class Face:
    """One detected face, in pixels of the upright frame."""

    box: np.ndarray  # (4,) x0, y0, x1, y1
    score: float
    landmarks: np.ndarray  # (5, 2): left eye, right eye, nose, left and right mouth corners

    @property
    def size(self) -> float:
        return box_size(self.box)


class Detections(NamedTuple):
    """What the tracker is given for one picture: its index and time, its faces as detected and
    its scene thumbnail."""

    index: int
    time: float
    faces: list[Face]
    thumbnail: np.ndarray


def box_size(box: np.ndarray) -> float:
    """The shorter side of a face box: what the official code compares with 100 px."""
    return float(min(box[2] - box[0], box[3] - box[1]))


def fold_batch_norms(net: nn.Module) -> nn.Module:
    """``net`` (in eval mode) with each batch norm that directly follows a convolution in a
    Sequential folded into that convolution: the same function, in fewer kernels. RetinaFace's
    47 batch norms each cost a kernel launch from the GPU worker's thread and a pass over the
    activations."""
    for block in [m for m in net.modules() if isinstance(m, nn.Sequential)]:
        children = list(block.named_children())
        for (conv_name, conv), (norm_name, norm) in itertools.pairwise(children):
            if isinstance(conv, nn.Conv2d) and isinstance(norm, nn.BatchNorm2d):
                setattr(block, conv_name, fuse_conv_bn_eval(conv, norm))
                setattr(block, norm_name, nn.Identity())
    return net


def detector_weights(name: str, path: str | Path | None = None, progress: bool = True) -> Path:
    """The detector checkpoint: ``path`` if given (never downloads), else the cached official file."""
    if name not in DETECTORS:
        raise WeightsError(f"unknown detector {name!r}; choose one of {', '.join(DETECTORS)}")
    what = "detector" if path is not None else name
    return helper_weights(what, DETECTORS[name][1], path, "--detector-weights", progress)


class FaceDetector:
    """RetinaFace over batches of RGB frames.

    Frames whose long side exceeds ``downscale_above`` are detected at ``detect_long_side`` (the
    official GPEN detects frames over 1500 px at 1000 px), and coordinates are mapped back.
    """

    def __init__(self, name: str = DEFAULT_DETECTOR, weights: str | Path | None = None,
                 device: str | torch.device = "cpu", half: bool = False, threshold: float = DEFAULT_THRESHOLD,
                 nms_threshold: float = 0.4, min_size: float = 0.0, max_faces: int | None = None,
                 detect_long_side: int = 1000, downscale_above: int = 1500, progress: bool = True) -> None:
        path = detector_weights(name, weights, progress)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise WeightsError(f"{path} is not a readable detector checkpoint: {exc}") from None
        state = {k.removeprefix("module."): v for k, v in state.items()}
        self.device = torch.device(device)
        net = RetinaFace(DETECTORS[name][0])
        try:
            net.load_state_dict(state, strict=True)
        except RuntimeError:
            why = misplaced(state, f"the {name} detector") or key_mismatch(net.state_dict(), state)
            raise WeightsError(f"{path} does not fit {name}: {why}") from None
        self.dtype = torch.float16 if half else torch.float32
        self.net = fold_batch_norms(net.eval()).to(self.device, self.dtype).requires_grad_(False)
        self.threshold = threshold
        self.nms_threshold = nms_threshold
        self.min_size = min_size
        self.max_faces = max_faces
        self.detect_long_side = detect_long_side
        self.downscale_above = downscale_above
        self._priors: dict[tuple[int, int], torch.Tensor] = {}
        self._batch: dict[tuple[int, int], int] = {}  # (height, width) -> the batch calls are padded to
        self._mean = torch.tensor(_BGR_MEAN[::-1], device=self.device).view(1, 3, 1, 1)  # in RGB order

    def _priors_for(self, h: int, w: int) -> torch.Tensor:
        if (h, w) not in self._priors:
            self._priors[(h, w)] = anchors(h, w).to(self.device)
        return self._priors[(h, w)]

    def fix_batch(self, batch: int, height: int, width: int, graph: bool) -> None:
        """Pad every later call on frames of ``height`` x ``width`` to ``batch`` frames (the largest
        asked for that size), so that the network meets one shape per frame size, and run it once
        now: its convolution algorithms are chosen here (about a second on a GPU's first call),
        and with ``graph`` (a GPU only) the network becomes a CUDA graph, captured here."""
        if graph and not isinstance(self.net, GraphedModel):
            self.net = GraphedModel(self.net)
        if self._batch.get((height, width), 0) < batch:
            self._batch[(height, width)] = batch
            self.detect_rgb(torch.zeros(batch, 3, height, width, device=self.device))

    def detect(self, frames: torch.Tensor | np.ndarray) -> list[list[Face]]:
        """Faces in each of ``frames``: uint8 RGB, (N, H, W, 3), on any device. Best score first."""
        return self.detect_rgb(torch.as_tensor(frames).to(self.device).permute(0, 3, 1, 2))

    def detect_rgb(self, rgb: torch.Tensor) -> list[list[Face]]:
        """Faces in each of ``rgb``: (N, 3, H, W) RGB in [0, 255], any dtype, on this detector's device."""
        return self.queue_rgb(rgb).result()

    @torch.no_grad()
    def queue_rgb(self, rgb: torch.Tensor) -> Pending[list[list[Face]]]:
        """:meth:`detect_rgb`, queued on the device: returns once the work is queued, not done.

        Nothing here waits for the GPU. Each frame's best :data:`CANDIDATES` boxes by score come
        back (a fixed size, unlike the boxes over the threshold, whose count the host would have to
        wait for) and the non-maximum suppression, over a few dozen boxes, runs on the host.
        """
        h, w = rgb.shape[2:]
        size = self._network_size(h, w)
        loc, conf, landm = self._network(rgb, size, self._batch.get((h, w), 0))
        priors = self._priors_for(*size)
        scores = conf[:, :, 1].float()
        # Decoded coordinates are fractions of the image: scaling by the original size maps them back.
        size = to_device([w, h], self.device, torch.float32)
        best, order = scores.topk(min(CANDIDATES, scores.shape[1]), dim=1)  # sorted, best first
        over = to_host((scores > self.threshold).sum(1))
        found = [to_host(t) for t in (best, *self._decoded(loc, landm, priors, order, size))]

        def finish() -> list[list[Face]]:
            faces = []
            for i, count in enumerate(over.tolist()):
                if count <= order.shape[1]:
                    score, boxes, points = (t[i, :count] for t in found)
                else:  # more boxes over the threshold than came back: all of this frame's, once more
                    score, everything = scores[i].sort(descending=True)
                    decoded = self._decoded(loc[i : i + 1], landm[i : i + 1], priors, everything[None, :count], size)
                    score, boxes, points = score[:count].cpu(), *(t[0].cpu() for t in decoded)
                faces.append(self._kept(boxes, points, score))
            return faces

        return Pending(finish, self.device)

    def _network_size(self, h: int, w: int) -> tuple[int, int]:
        """The size frames of ``h`` x ``w`` are detected at."""
        if max(h, w) <= self.downscale_above:
            return h, w
        scale = self.detect_long_side / max(h, w)
        return round(h * scale), round(w * scale)

    def _network(self, rgb: torch.Tensor, size: tuple[int, int],
                 batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The network's box offsets, scores and landmark offsets for each of ``rgb``, detected at
        ``size``: on a GPU in one call padded to ``batch`` frames, on a CPU in calls of
        :data:`CPU_CALL_PIXELS`, each prepared on its own and padded to the same count (a CPU's
        convolutions may round differently for another count: a video cut into segments must
        find the same faces)."""
        if self.device.type != "cpu":
            return tuple(t[: len(rgb)] for t in self.net(padded(self._prepared(rgb, size), batch)))
        frames = max(1, CPU_CALL_PIXELS // (size[0] * size[1]))
        calls = [[t[: len(part)] for t in self.net(padded(self._prepared(part, size), frames))]
                 for part in rgb.split(frames)]
        return tuple(torch.cat(parts) for parts in zip(*calls))

    def _prepared(self, rgb: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        """``rgb`` as the network takes it: mean-subtracted BGR at ``size``, in its precision."""
        x = rgb.float() - self._mean
        if x.shape[2:] != size:
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
        return x.flip(1).to(self.dtype)  # RGB -> BGR

    def _decoded(self, loc: torch.Tensor, landm: torch.Tensor, priors: torch.Tensor, order: torch.Tensor,
                 size: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Boxes (N, K, 4) and landmarks (N, K, 10) in pixels of the priors ``order`` (N, K) picks."""
        def pick(t: torch.Tensor) -> torch.Tensor:
            return t.gather(1, order[:, :, None].expand(-1, -1, t.shape[2]))

        chosen = priors[order]
        boxes = decode_boxes(pick(loc).float(), chosen) * size.repeat(2)
        points = decode_landmarks(pick(landm).float(), chosen) * size.repeat(5)
        return boxes, points

    def _kept(self, boxes: torch.Tensor, points: torch.Tensor, scores: torch.Tensor) -> list[Face]:
        """One frame's faces from its boxes over the threshold (on the host): the non-maximum
        suppression's survivors, best score first, then the size and count limits."""
        faces: list[Face] = []
        for k in suppress(boxes.numpy(), scores.numpy(), self.nms_threshold):
            face = Face(boxes[k].numpy().astype(np.float64), float(scores[k]),
                        points[k].numpy().reshape(5, 2).astype(np.float64))
            if face.size >= self.min_size and (self.max_faces is None or len(faces) < self.max_faces):
                faces.append(face)
        return faces
