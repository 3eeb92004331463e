"""The baseline the pipeline benchmark compares against: a video processed the way the official GPEN
scripts process an image, frame after frame in one thread (detect; each face aligned with OpenCV,
through GPEN in fp32 at batch 1, pasted back with OpenCV; then encode). Same model function, same
detector, same encoder settings: only the way of working differs."""

from __future__ import annotations

import time
from pathlib import Path

import av
import cv2
import numpy as np
import torch

from gpen_video.faces.align import invert_affine, reference_points, similarity_transforms
from gpen_video.faces.detect import FaceDetector
from gpen_video.media.demux import demux
from gpen_video.media.frames import SourceFrame
from gpen_video.media.opening import open_input
from gpen_video.media.probe import probe
from gpen_video.media.writer import VideoWriter
from gpen_video.model.reference import GPEN
from gpen_video.model.weights import load_gpen_weights
from gpen_video.options import RestoreOptions
from gpen_video.worker.compose import SMALL_FACE, face_mask

_SMALL_FACE_BLUR = np.outer([1, 2, 1], [1, 2, 1]).astype(np.float32) / 16


def _restore_frame(rgb: np.ndarray, detector: FaceDetector, model: GPEN, mask: np.ndarray, device: str) -> np.ndarray:
    size = model.config.size
    height, width = rgb.shape[:2]
    full_mask = np.zeros((height, width), np.float32)
    full_face = np.zeros_like(rgb)
    for face in detector.detect(rgb[None])[0]:
        m = similarity_transforms(face.landmarks[None], reference_points(size))[0]
        crop = cv2.warpAffine(rgb, m, (size, size), flags=cv2.INTER_CUBIC)
        x = torch.from_numpy(crop).permute(2, 0, 1)[None].float().to(device) / 127.5 - 1
        with torch.no_grad():
            y = model(x)[0].permute(1, 2, 0).cpu().numpy()
        restored = (np.clip(y * 0.5 + 0.5, 0, 1) * 255).astype(np.uint8)
        if face.size < SMALL_FACE:
            restored = cv2.filter2D(restored, -1, _SMALL_FACE_BLUR)
        inverse = invert_affine(m[None])[0]
        warped_mask = cv2.warpAffine(mask, inverse, (width, height), flags=cv2.INTER_CUBIC)
        warped_face = cv2.warpAffine(restored, inverse, (width, height), flags=cv2.INTER_CUBIC)
        wins = warped_mask > full_mask
        full_mask[wins] = warped_mask[wins]
        full_face[wins] = warped_face[wins]
    blend = full_mask[:, :, None]
    return cv2.convertScaleAbs(rgb * (1 - blend) + full_face * blend)


def official_style_fps(src: Path, dst: Path, weights: str, detector: str, detector_weights: str,
                       settings: RestoreOptions, device: str, limit: int | None = None) -> float:
    """Frames per second of the one-thread, per-face, fp32 way of working on ``src``."""
    state_dict, config = load_gpen_weights(weights=weights, progress=False)
    model = GPEN(config.size, config.channel_multiplier, config.narrow).eval()
    model.load_state_dict(state_dict, strict=True)
    model.to(device)
    finder = FaceDetector(detector, detector_weights, device=device, progress=False)
    mask = face_mask(config.size)
    container = open_input(src)
    # A scratch file, written again by each run: replacing it is no loss.
    writer = VideoWriter(dst, container, probe(src), settings, overwrite=True)
    frames = 0
    start = time.perf_counter()
    for item in demux(container, writer.copied_streams):
        if not isinstance(item, SourceFrame):
            writer.write_packet(item)
            continue
        if limit is not None and frames >= limit:
            break
        # The official scripts read and write frames through OpenCV: a CPU colour conversion each way.
        restored = _restore_frame(item.frame.to_ndarray(format="rgb24"), finder, model, mask, device)
        back = av.VideoFrame.from_ndarray(restored, format="rgb24").reformat(format=item.frame.format.name)
        writer.write(item, back)
        frames += 1
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    writer.abort()  # only the speed matters; a video cut at `limit` frames is not kept
    container.close()
    return frames / seconds
