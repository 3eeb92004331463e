"""``--mask parse``: the paste-back mask from a face-parsing network, as the official GPEN makes it.

ParseNet (faces/parsenet.py, run with facexlib's checkpoint) labels every pixel of the restored
face (19 classes, at 512 px). The mask keeps what is the person's face and head (skin, brows,
eyes and glasses, ears and earrings, nose, mouth and lips, hair, neck and necklace) and drops
the background, a hat and clothes, so that a hand, a microphone or a collar in front of or
beside the face stays as decoded. As in
GPEN's own paste-back, the mask's outer 20 px (of 512) are cleared and it is blurred twice
(Gaussian, 101 px, sigma 11) so that no edge shows. It is worked out in the aligned crop, where a
face holds still from frame to frame, so a track's masks can be averaged over time there
(:class:`MaskSmoother`) and do not flicker where the labels waver (hair against a busy background).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import WeightsError
from ..model.kinds import key_mismatch, misplaced
from ..model.weights import helper_weights
from .choices import PARSE_URL
from .parsenet import SIZE as PARSE_SIZE
from .parsenet import ParseNet

#: ParseNet's labels, in its output's channel order (CelebAMask-HQ's classes).
LABELS = ("background", "skin", "nose", "eye_g", "l_eye", "r_eye", "l_brow", "r_brow", "l_ear", "r_ear", "mouth",
          "u_lip", "l_lip", "hair", "hat", "ear_r", "neck_l", "neck", "cloth")
#: Labels the mask leaves out, as the official GPEN's mask map does.
DROPPED = frozenset({"background", "hat", "cloth"})
_BORDER = 20 / 512  # cleared at the crop's edges
_BLUR_SIDE, _BLUR_SIGMA = 101 / 512, 11 / 512  # applied twice
_CHUNK = 16  # faces per network call


def label_mask(labels: torch.Tensor) -> torch.Tensor:
    """(F, H, W) label ids -> (F, H, W) float: 1 where the label is kept, 0 where it is dropped."""
    keep = torch.tensor([name not in DROPPED for name in LABELS], dtype=torch.float32, device=labels.device)
    return keep[labels]


def _gaussian(side: int, sigma: float, device: torch.device) -> torch.Tensor:
    x = torch.arange(side, dtype=torch.float32, device=device) - (side - 1) / 2
    kernel = torch.exp(-0.5 * (x / sigma) ** 2)
    return kernel / kernel.sum()


def soften(mask: torch.Tensor) -> torch.Tensor:
    """The kept pixels (F, S, S) as the paste-back mask: the border cleared, then blurred twice
    with a separable Gaussian (edges mirrored, as OpenCV does by default)."""
    size = mask.shape[-1]
    border = round(_BORDER * size)
    mask = mask.clone()
    mask[:, :border], mask[:, -border:], mask[:, :, :border], mask[:, :, -border:] = 0, 0, 0, 0
    side = 2 * round(_BLUR_SIDE * size / 2) + 1
    kernel = _gaussian(side, _BLUR_SIGMA * size, mask.device)
    x = mask[:, None]
    for _ in range(2):
        x = F.conv2d(F.pad(x, (side // 2, side // 2, 0, 0), mode="reflect"), kernel.view(1, 1, 1, -1))
        x = F.conv2d(F.pad(x, (0, 0, side // 2, side // 2), mode="reflect"), kernel.view(1, 1, -1, 1))
    return x[:, 0]


class FaceParser:
    """ParseNet on one device: restored faces in, paste-back masks out, in batches."""

    def __init__(self, weights: str | Path | None = None, device: str | torch.device = "cpu",
                 half: bool = False, progress: bool = True) -> None:
        path = helper_weights("face parser", PARSE_URL, weights, "--parse-weights", progress)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise WeightsError(f"{path} is not a readable face-parser checkpoint: {exc}") from None
        net = ParseNet(labels=len(LABELS))
        try:
            net.load_state_dict(state, strict=True)
        except RuntimeError:
            why = misplaced(state, "a ParseNet face parser") or key_mismatch(net.state_dict(), state)
            raise WeightsError(f"{path} does not fit ParseNet: {why}") from None
        self.device = torch.device(device)
        self.dtype = torch.float16 if half else torch.float32
        self.net = net.eval().to(self.device, self.dtype).requires_grad_(False)

    @torch.no_grad()
    def labels(self, faces: torch.Tensor) -> torch.Tensor:
        """(F, 3, S, S) RGB faces in [0, 255] -> (F, 512, 512) label ids."""
        x = F.interpolate(faces.float(), size=(PARSE_SIZE, PARSE_SIZE), mode="bilinear", align_corners=False)
        x = (x / 127.5 - 1.0).to(self.dtype)
        return torch.cat([self.net(x[i : i + _CHUNK]).argmax(1) for i in range(0, len(x), _CHUNK)])

    def masks(self, faces: torch.Tensor) -> torch.Tensor:
        """(F, 3, S, S) restored RGB faces in [0, 255] -> their (F, S, S) paste-back masks in [0, 1]."""
        mask = soften(label_mask(self.labels(faces)))
        size = faces.shape[-1]
        if size != PARSE_SIZE:
            mask = F.interpolate(mask[:, None], size=(size, size), mode="bilinear", align_corners=False)[:, 0]
        return mask.clamp(0, 1)


class MaskSmoother:
    """Each track's masks averaged over time, in the aligned crop: an exponential average with
    ``weight`` on the newest picture (0.5: a label that flips for one picture moves the mask
    halfway). A track last restored more than ``gap`` pictures before starts afresh (its last picture went
    to another GPU, or it was lost and found again); what was not used in the last ``calls``
    calls is forgotten, so memory stays bounded over long videos and many jobs. A face without a
    track (-1) is not smoothed. One per worker, called from its thread alone."""

    def __init__(self, weight: float = 0.5, gap: int = 2, calls: int = 8) -> None:
        self.weight = weight
        self.gap = gap
        self.calls = calls
        self._count = 0
        self._last: dict[tuple[int, int], tuple[int, int, torch.Tensor]] = {}  # (clip, track) -> call, picture, mask

    def __call__(self, clip: int, keys: list[tuple[int, int]], masks: torch.Tensor) -> torch.Tensor:
        """``masks`` (F, S, S) of the faces ``keys`` ((picture index, track) each, in picture order)
        of the job ``clip``, smoothed."""
        self._count += 1
        out = []
        for (index, track), mask in zip(keys, masks):
            if track >= 0:
                previous = self._last.get((clip, track))
                if previous is not None and 0 < index - previous[1] <= self.gap:
                    mask = self.weight * mask + (1 - self.weight) * previous[2]
                self._last[(clip, track)] = (self._count, index, mask)
            out.append(mask)
        self._last = {key: value for key, value in self._last.items() if self._count - value[0] < self.calls}
        return torch.stack(out)
