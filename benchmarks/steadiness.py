"""How steady the landmarks are that each face's crop follows, for the tracker's smoother.

Two measurements, both with the real mobile RetinaFace on the CPU:

- **Real clips**: every talking-head, phone and multi-face clip in the shared media, per track of
  at least ``--min-frames`` frames:
  - *jitter ratio*: the smoothed landmarks' jitter (mean second difference, see
    :func:`~gpen_video.faces.smooth.landmark_jitter`) over the raw ones';
  - *bias*: the length of the mean offset of the smoothed landmarks from the raw ones, in % of
    the eye distance: a systematic pull, which noise averages away and lag does not;
  - *shift*: the mean distance of the smoothed landmarks from the raw ones, in % of the eye
    distance (noise removed counts here too).
- **Known paths**: a real photo moved along smooth paths (still, a slow pan, a fast turn, a
  zoom), each frame with its own sensor noise and JPEG compression so that the detector's noise
  is real; the truth is the path applied to the landmarks found on the unmoved photo. The mean
  error against it, raw and smoothed, in % of the eye distance.

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
from gpen_video.faces.smooth import eye_distance, landmark_jitter
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
        eyes = eye_distance(raw)
        rows.append({"clip": clip.stem, "track": track, "frames": len(times), "eye_distance_px": round(eyes, 1),
                     "jitter_raw_px": round(landmark_jitter(raw, times), 3),
                     "jitter_ratio": round(landmark_jitter(smoothed, times) / landmark_jitter(raw, times), 3),
                     "bias_pct": round(100 * float(np.linalg.norm((smoothed - raw).mean(axis=(0, 1)))) / eyes, 3),
                     "shift_pct": round(100 * float(np.linalg.norm(smoothed - raw, axis=-1).mean()) / eyes, 3)})
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


def path_row(detector: FaceDetector, name: str, frames: int, smooth: float) -> dict:
    photo = cv2.cvtColor(cv2.imread(str(PHOTO), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    size = photo.shape[1::-1]
    base = detector.detect(photo[None])[0][0].landmarks
    rng = np.random.default_rng(0)
    motions = [path_motion(name, t, size) for t in range(frames)]
    images = []
    for motion in motions:
        moved = cv2.warpAffine(photo, motion, size, flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)
        noisy = np.clip(moved + rng.normal(0, 3, moved.shape), 0, 255).astype(np.uint8)
        images.append(cv2.imdecode(cv2.imencode(".jpg", noisy, [cv2.IMWRITE_JPEG_QUALITY, 80])[1],
                                   cv2.IMREAD_UNCHANGED))
    truth = np.stack([base @ m[:, :2].T + m[:, 2] for m in motions])
    found = _detected(detector, images)
    tracked = track_faces(((t, t / 25, faces, image) for t, (faces, image) in enumerate(zip(found, images))),
                          smooth=smooth)
    tracks = _tracks(tracked)
    if len(tracks) != 1 or len(next(iter(tracks.values()))[0]) != frames:
        raise RuntimeError(f"{name}: the photo's face was not one track over every frame: {len(tracks)} tracks")
    _, raw, smoothed = next(iter(tracks.values()))
    eyes = eye_distance(truth)

    def error(points: np.ndarray) -> float:
        return round(100 * float(np.linalg.norm(points - truth, axis=-1).mean()) / eyes, 3)

    return {"path": name, "frames": frames, "eye_distance_px": round(eyes, 1), "raw_error_pct": error(raw),
            "smoothed_error_pct": error(smoothed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--detector-weights", required=True)
    ap.add_argument("--smooth", type=float, default=DEFAULT_SMOOTH, help="the tracker's --smooth")
    ap.add_argument("--frames", type=int, default=300, help="frames of each clip (from its start)")
    ap.add_argument("--min-frames", type=int, default=25, help="the shortest track reported")
    ap.add_argument("--smoke", action="store_true", help="one clip's first frames and one path")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    detector = FaceDetector("retinaface-mobile", weights=args.detector_weights)
    clips = sorted(p for p in SHARED.glob("*.mp4") if p.name.startswith(CLIP_PREFIXES))
    if args.smoke:
        clips, paths, frames, limit = [SHARED / SMOKE_CLIP], PATHS[2:3], 30, 30
    else:
        paths, frames, limit = PATHS, PATH_FRAMES, args.frames
    clip_table = [row for clip in clips for row in clip_rows(detector, clip, limit, args.smooth, args.min_frames)]
    path_table = [path_row(detector, name, frames, args.smooth) for name in paths]
    print(f"\n--smooth {args.smooth}\n\n| clip | track | frames | eye distance px | raw jitter px | jitter ratio | "
          "bias % | shift % |\n|---|---|---|---|---|---|---|---|")
    for r in clip_table:
        print(f"| {r['clip']} | {r['track']} | {r['frames']} | {r['eye_distance_px']} | {r['jitter_raw_px']} | "
              f"{r['jitter_ratio']} | {r['bias_pct']} | {r['shift_pct']} |")
    if clip_table:
        print(f"\nmedian over {len(clip_table)} tracks: jitter ratio "
              f"{np.median([r['jitter_ratio'] for r in clip_table]):.3f}, bias "
              f"{np.median([r['bias_pct'] for r in clip_table]):.3f} %, largest bias "
              f"{max(r['bias_pct'] for r in clip_table):.3f} %")
    print("\n| path | frames | eye distance px | raw error % | smoothed error % |\n|---|---|---|---|---|")
    for r in path_table:
        print(f"| {r['path']} | {r['frames']} | {r['eye_distance_px']} | {r['raw_error_pct']} | "
              f"{r['smoothed_error_pct']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"smooth": args.smooth, "clips": clip_table, "paths": path_table},
                                              indent=1))


if __name__ == "__main__":
    main()
