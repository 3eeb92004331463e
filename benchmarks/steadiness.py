"""How steady the landmarks are that each face's crop follows: the tracker's smoother beside the
fixed local-linear fit (Gaussian sigma 1 frame) it replaced, both on the same detections.

Two measurements, both with the real mobile RetinaFace on the CPU:

- **Real clips**: every talking-head, phone and multi-face clip in the shared media, per track of
  at least ``--min-frames`` frames:
  - *jitter ratio*: the smoothed landmarks' jitter (mean second difference, see
    :func:`~gpen_video.faces.smooth.landmark_jitter`) over the raw ones';
  - *bias*: the length of the mean offset of the smoothed landmarks from the raw ones, in % of
    the eye distance: a systematic pull, which noise averages away and lag does not.
- **Known paths**: a real photo moved along smooth paths (still, a slow pan, a fast turn, a
  zoom), each frame with its own sensor noise and JPEG compression so that the detector's noise
  is real, over ``--seeds`` draws of that noise; the truth is the path applied to the landmarks
  found on the unmoved photo. The mean error against it, raw and smoothed, in % of the eye
  distance.

    python benchmarks/steadiness.py --detector-weights retinaface_mobilenet0.25.pth [--smooth 1.0]
    python benchmarks/steadiness.py --smoke ...   # one clip's first frames and one path: checks the harness
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np
from pipeline_bench import SHARED

from gpen_video.faces.choices import DEFAULT_SMOOTH
from gpen_video.faces.detect import FaceDetector
from gpen_video.faces.smooth import eye_distance, gaussian_weights, landmark_jitter
from gpen_video.faces.track import TrackedFrame, track_faces
from gpen_video.media.demux import read_frames

CLIP_PREFIXES = ("talking_head", "phone_", "multi_face")
PHOTO = SHARED.parent / "images" / "whole_facexlib_test2.jpg"
PATH_FRAMES = 60
SMOKE_CLIP = "talking_head_vfr_retalking1.mp4"
BATCH = 8


def _detected(detector: FaceDetector, images: list[np.ndarray]) -> list[list]:
    return [faces for i in range(0, len(images), BATCH) for faces in detector.detect(np.stack(images[i:i + BATCH]))]


def _tracks(tracked: list[TrackedFrame]) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per track: its frames' times, raw landmarks and smoothed landmarks, (T, 5, 2) each."""
    series: dict[int, list] = {}
    for frame in tracked:
        for face in frame.faces:
            series.setdefault(face.track, []).append((frame.time, face.landmarks_raw, face.landmarks))
    return {track: tuple(np.array(column) for column in zip(*rows)) for track, rows in series.items()}


def previous_smoother(points: np.ndarray, times: np.ndarray, sigma: float = 1.0) -> np.ndarray:
    """The smoother the tracker had before, kept here as the baseline: at each frame, the weighted
    least-squares line through the samples within 3 sigma, Gaussian weights of ``sigma`` frames."""
    radius = int(np.ceil(3 * sigma))
    smoothed = np.empty_like(points, dtype=np.float64)
    for t in range(len(points)):
        window = np.arange(max(0, t - radius), min(len(points), t + radius + 1))
        weights, dx = gaussian_weights(window - t, sigma), times[window] - times[t]
        s0, s1, s2 = weights.sum(), weights @ dx, weights @ dx**2
        det = s0 * s2 - s1**2
        kernel = weights * (s2 - s1 * dx) / det if det > 1e-9 * s0 * s2 else weights / s0
        smoothed[t] = np.tensordot(kernel, points[window], axes=1)
    return smoothed


def _bias_pct(raw: np.ndarray, smoothed: np.ndarray) -> float:
    return round(100 * float(np.linalg.norm((smoothed - raw).mean(axis=(0, 1)))) / eye_distance(raw), 3)


def clip_rows(detector: FaceDetector, clip: Path, limit: int | None, smooth: float, min_frames: int) -> list[dict]:
    frames = list(read_frames(clip, limit))
    images = [frame.rgb() for frame in frames]
    found = _detected(detector, images)
    tracked = track_faces(((f.index, f.time, faces, image) for f, faces, image in zip(frames, found, images)),
                          smooth=smooth)
    rows = []
    for track, (times, raw, smoothed) in sorted(_tracks(tracked).items()):
        if len(times) < min_frames:
            continue
        before = previous_smoother(raw, times)
        jitter = landmark_jitter(raw, times)
        rows.append({"clip": clip.stem, "track": track, "frames": len(times),
                     "eye_distance_px": round(eye_distance(raw), 1), "jitter_raw_px": round(jitter, 3),
                     "jitter_ratio_before": round(landmark_jitter(before, times) / jitter, 3),
                     "jitter_ratio": round(landmark_jitter(smoothed, times) / jitter, 3),
                     "bias_pct_before": _bias_pct(raw, before), "bias_pct": _bias_pct(raw, smoothed)})
    return rows


def _smoothstep(x: float) -> float:
    x = min(max(x, 0.0), 1.0)
    return x * x * (3 - 2 * x)


def path_motion(name: str, t: int, size: tuple[int, int]) -> np.ndarray:
    """Frame ``t`` of a known path, as a 2x3 affine of the photo: ``still``; ``slow-pan`` (0.4 px a
    frame with a slight sway); ``fast-turn`` (40 px and 20 degrees in 8 frames, eased in and out,
    from frame 20); ``zoom`` (12 % over the clip, about the centre)."""
    centre = (size[0] / 2, size[1] / 2)
    if name == "still":
        return cv2.getRotationMatrix2D(centre, 0.0, 1.0)
    if name == "slow-pan":
        motion = cv2.getRotationMatrix2D(centre, 0.0, 1.0)
        motion[:, 2] += (0.4 * t - 12, 1.5 * np.sin(2 * np.pi * t / 50))
        return motion
    if name == "fast-turn":
        turned = _smoothstep((t - 20) / 8)
        motion = cv2.getRotationMatrix2D(centre, 20 * turned, 1.0)
        motion[:, 2] += (40 * turned - 20, 0.0)
        return motion
    if name == "zoom":
        return cv2.getRotationMatrix2D(centre, 0.0, 0.94 + 0.12 * t / PATH_FRAMES)
    raise ValueError(name)


PATHS = ("still", "slow-pan", "fast-turn", "zoom")


def path_row(detector: FaceDetector, name: str, frames: int, smooth: float, seeds: int) -> dict:
    photo = cv2.cvtColor(cv2.imread(str(PHOTO), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    size = photo.shape[1::-1]
    base = detector.detect(photo[None])[0][0].landmarks
    motions = [path_motion(name, t, size) for t in range(frames)]
    truth = np.stack([base @ m[:, :2].T + m[:, 2] for m in motions])
    eyes = eye_distance(truth)
    errors: dict[str, list[float]] = {"raw": [], "before": [], "smoothed": []}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        images = []
        for motion in motions:
            moved = cv2.warpAffine(photo, motion, size, flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)
            noisy = np.clip(moved + rng.normal(0, 3, moved.shape), 0, 255).astype(np.uint8)
            images.append(cv2.imdecode(cv2.imencode(".jpg", noisy, [cv2.IMWRITE_JPEG_QUALITY, 80])[1],
                                       cv2.IMREAD_UNCHANGED))
        found = _detected(detector, images)
        tracked = track_faces(((t, t / 25, faces, image) for t, (faces, image) in enumerate(zip(found, images))),
                              smooth=smooth)
        tracks = _tracks(tracked)
        if len(tracks) != 1 or len(next(iter(tracks.values()))[0]) != frames:
            raise RuntimeError(f"{name}: the photo's face was not one track over every frame: {len(tracks)} tracks")
        times, raw, smoothed = next(iter(tracks.values()))
        for key, points in (("raw", raw), ("before", previous_smoother(raw, times)), ("smoothed", smoothed)):
            errors[key].append(100 * float(np.linalg.norm(points - truth, axis=-1).mean()) / eyes)
    return {"path": name, "frames": frames, "seeds": seeds, "eye_distance_px": round(eyes, 1),
            **{f"{key}_error_pct": round(float(np.mean(values)), 3) for key, values in errors.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--smooth", type=float, default=DEFAULT_SMOOTH, help="the tracker's --smooth")
    ap.add_argument("--frames", type=int, default=300, help="frames of each clip (from its start)")
    ap.add_argument("--min-frames", type=int, default=25, help="the shortest track reported")
    ap.add_argument("--seeds", type=int, default=4, help="draws of the known paths' noise")
    ap.add_argument("--smoke", action="store_true", help="one clip's first frames and one path")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    detector = FaceDetector("retinaface-mobile", weights=args.detector_weights)
    clips = sorted(p for p in SHARED.glob("*.mp4") if p.name.startswith(CLIP_PREFIXES))
    if args.smoke:
        clips, paths, frames, limit, seeds = [SHARED / SMOKE_CLIP], PATHS[2:3], 30, 30, 1
    else:
        paths, frames, limit, seeds = PATHS, PATH_FRAMES, args.frames, args.seeds
    clip_table = [row for clip in clips for row in clip_rows(detector, clip, limit, args.smooth, args.min_frames)]
    path_table = [path_row(detector, name, frames, args.smooth, seeds) for name in paths]
    print(f"\n--smooth {args.smooth}; before: the local-linear fit of sigma 1\n\n| clip | track | frames | "
          "eye distance px | raw jitter px | jitter ratio, before | jitter ratio | bias %, before | bias % |\n"
          "|---|---|---|---|---|---|---|---|---|")
    for r in clip_table:
        print(f"| {r['clip']} | {r['track']} | {r['frames']} | {r['eye_distance_px']} | {r['jitter_raw_px']} | "
              f"{r['jitter_ratio_before']} | {r['jitter_ratio']} | {r['bias_pct_before']} | {r['bias_pct']} |")
    for when, suffix in (("before", "_before"), ("now", "")):
        if clip_table:
            print(f"\n{when}, median over {len(clip_table)} tracks: jitter ratio "
                  f"{np.median([r['jitter_ratio' + suffix] for r in clip_table]):.3f}, bias "
                  f"{np.median([r['bias_pct' + suffix] for r in clip_table]):.3f} %, largest bias "
                  f"{max(r['bias_pct' + suffix] for r in clip_table):.3f} %")
    print("\n| path | frames | seeds | eye distance px | raw error % | error %, before | error % |\n"
          "|---|---|---|---|---|---|---|")
    for r in path_table:
        print(f"| {r['path']} | {r['frames']} | {r['seeds']} | {r['eye_distance_px']} | {r['raw_error_pct']} | "
              f"{r['before_error_pct']} | {r['smoothed_error_pct']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"smooth": args.smooth, "clips": clip_table, "paths": path_table},
                                              indent=1))


if __name__ == "__main__":
    main()
