"""Face detection: facexlib's RetinaFace network, batched over frames, with GPU pre- and post-processing."""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from ..transfer import to_device
from ..weights import WeightsError, cache_dir, download

#: Detector name -> (facexlib network name, official facexlib download URL).
DETECTORS = {
    "retinaface-r50": ("resnet50",
                       "https://github.com/xinntao/facexlib/releases/download/v0.1.0/detection_Resnet50_Final.pth"),
    "retinaface-mobile": ("mobile0.25",
                          "https://github.com/xinntao/facexlib/releases/download/v0.1.0/"
                          "detection_mobilenet0.25_Final.pth"),
}
DEFAULT_DETECTOR = "retinaface-r50"
_BGR_MEAN = (104.0, 117.0, 123.0)  # RetinaFace was trained on mean-subtracted BGR


@dataclass
class Face:
    """One detected face, in pixels of the upright frame."""

    box: np.ndarray  # (4,) x0, y0, x1, y1
    score: float
    landmarks: np.ndarray  # (5, 2): left eye, right eye, nose, left and right mouth corners

    @property
    def size(self) -> float:
        return box_size(self.box)


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
    if path is not None:
        if not Path(path).is_file():
            raise WeightsError(f"detector weights not found: {path}")
        return Path(path)
    url = DETECTORS[name][1]
    dest = cache_dir() / url.rsplit("/", 1)[1]
    if dest.is_file():
        return dest
    try:
        return download(url, dest, progress=progress)
    except WeightsError as exc:
        raise WeightsError(f"{name} weights are not in the cache and could not be downloaded ({exc}). "
                           f"Download {url} by hand and save it as {dest}, or pass --detector-weights PATH.") from None


class FaceDetector:
    """RetinaFace over batches of RGB frames.

    Frames whose long side exceeds ``downscale_above`` are detected at ``detect_long_side`` (the
    official GPEN detects frames over 1500 px at 1000 px), and coordinates are mapped back.
    """

    def __init__(self, name: str = DEFAULT_DETECTOR, weights: str | Path | None = None,
                 device: str | torch.device = "cpu", half: bool = False, threshold: float = 0.9,
                 nms_threshold: float = 0.4, min_size: float = 0.0, max_faces: int | None = None,
                 detect_long_side: int = 1000, downscale_above: int = 1500, progress: bool = True) -> None:
        from facexlib.detection.retinaface import RetinaFace

        path = detector_weights(name, weights, progress)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise WeightsError(f"{path} is not a readable detector checkpoint: {exc}") from None
        state = {k.removeprefix("module."): v for k, v in state.items()}
        self.device = torch.device(device)
        with warnings.catch_warnings():  # facexlib passes torchvision's deprecated `pretrained=False`
            warnings.simplefilter("ignore")
            net = RetinaFace(network_name=DETECTORS[name][0], device=torch.device("cpu"))
        try:
            net.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise WeightsError(f"{path} does not fit {name}: {str(exc).splitlines()[0]}") from None
        self.dtype = torch.float16 if half else torch.float32
        self.net = fold_batch_norms(net.eval()).to(self.device, self.dtype).requires_grad_(False)
        self.cfg = net.cfg
        self.threshold = threshold
        self.nms_threshold = nms_threshold
        self.min_size = min_size
        self.max_faces = max_faces
        self.detect_long_side = detect_long_side
        self.downscale_above = downscale_above
        self._priors: dict[tuple[int, int], torch.Tensor] = {}
        self._mean = torch.tensor(_BGR_MEAN[::-1], device=self.device).view(1, 3, 1, 1)  # in RGB order

    def _priors_for(self, h: int, w: int) -> torch.Tensor:
        if (h, w) not in self._priors:
            from facexlib.detection.retinaface_utils import PriorBox

            self._priors[(h, w)] = PriorBox(self.cfg, image_size=(h, w)).forward().to(self.device)
        return self._priors[(h, w)]

    def detect(self, frames: torch.Tensor | np.ndarray) -> list[list[Face]]:
        """Faces in each of ``frames``: uint8 RGB, (N, H, W, 3), on any device. Best score first."""
        return self.detect_rgb(torch.as_tensor(frames).to(self.device).permute(0, 3, 1, 2))

    @torch.no_grad()
    def detect_rgb(self, rgb: torch.Tensor) -> list[list[Face]]:
        """Faces in each of ``rgb``: (N, 3, H, W) RGB in [0, 255], any dtype, on this detector's device."""
        from facexlib.detection.retinaface_utils import batched_decode, batched_decode_landm

        n, _, h, w = rgb.shape
        x = rgb.float() - self._mean
        if max(h, w) > self.downscale_above:
            scale = self.detect_long_side / max(h, w)
            x = F.interpolate(x, size=(round(h * scale), round(w * scale)), mode="bilinear", align_corners=False)
        x = x.flip(1).to(self.dtype)  # RGB -> BGR
        loc, conf, landm = self.net(x)
        priors = self._priors_for(x.shape[2], x.shape[3])[None]
        # Decoded coordinates are fractions of the image: scaling by the original size maps them back.
        size = to_device([w, h], self.device, torch.float32)
        boxes = batched_decode(loc.float(), priors, self.cfg["variance"]) * size.repeat(2)
        points = batched_decode_landm(landm.float(), priors, self.cfg["variance"]) * size.repeat(5)
        scores = conf[:, :, 1].float()

        keep = scores > self.threshold
        frame_of = torch.arange(n, device=self.device)[:, None].expand_as(scores)[keep]
        boxes, points, scores = boxes[keep], points[keep], scores[keep]
        kept = torchvision.ops.batched_nms(boxes, scores, frame_of, self.nms_threshold)  # sorted by score
        boxes, points, scores, frame_of = (t[kept].cpu().numpy() for t in (boxes, points, scores, frame_of))

        faces: list[list[Face]] = [[] for _ in range(n)]
        for box, pts, score, f in zip(boxes, points, scores, frame_of):
            face = Face(box.astype(np.float64), float(score), pts.reshape(5, 2).astype(np.float64))
            if face.size >= self.min_size and (self.max_faces is None or len(faces[f]) < self.max_faces):
                faces[f].append(face)
        return faces
