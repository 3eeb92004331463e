"""Face tracking and temporal smoothing on real videos with the real RetinaFace detector."""

from __future__ import annotations

from collections.abc import Iterator

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpen_video.faces.detect import Face, FaceDetector
from gpen_video.faces.smooth import Smoother, eye_distance, landmark_jitter
from gpen_video.faces.track import (
    THUMBNAIL_SIDE,
    FaceTracker,
    TrackedFrame,
    scene_thumbnail,
    thumbnail_means,
    track_faces,
)
from gpen_video.media.demux import read_frames

from .conftest import read_rgb, shared_file

Frame = tuple[int, float, list[Face], np.ndarray]  # what track_faces takes: index, time, faces, RGB image
TALKING_HEADS = ["talking_head_speech_retalking2", "talking_head_speech_liveportrait_d20",
                 "talking_head_vfr_retalking1", "talking_head_speech_mpeg4_sadtalker_katiehill"]
FRAMES = 60  # 2.4 s of each clip: the measured ratios hardly move from 50 to 100 frames
BATCH = 10


def detected_frames(detector: FaceDetector, video: str, limit: int = FRAMES,
                    size: tuple[int, int] | None = None) -> Iterator[Frame]:
    """The first ``limit`` frames of a shared video (resized to ``size`` if given) with their faces,
    detected in batches and yielded one by one, as the pipeline feeds the tracker."""
    frames = read_frames(shared_file(f"media/videos/{video}.mp4"), limit)
    while batch := [frame for _, frame in zip(range(BATCH), frames)]:
        images = [frame.rgb() if size is None else cv2.resize(frame.rgb(), size, interpolation=cv2.INTER_AREA)
                  for frame in batch]
        for frame, image, faces in zip(batch, images, detector.detect(np.stack(images))):
            yield frame.index, frame.time, faces, image


def detect(detector: FaceDetector, images: list[np.ndarray]) -> list[list[Face]]:
    return [faces for i in range(0, len(images), BATCH) for faces in detector.detect(np.stack(images[i:i + BATCH]))]


@pytest.fixture(scope="module")
def d20(detector) -> list[Frame]:
    """One face on every frame: the clip the bookkeeping tests edit."""
    return list(detected_frames(detector, "talking_head_speech_liveportrait_d20"))


def track_series(tracked: list[TrackedFrame], track: int, attribute: str) -> np.ndarray:
    """(T, 5, 2) landmarks (``attribute``) of one track over the frames it is in."""
    return np.stack([getattr(face, attribute) for frame in tracked for face in frame.faces if face.track == track])


def track_times(tracked: list[TrackedFrame], track: int) -> np.ndarray:
    return np.array([frame.time for frame in tracked for face in frame.faces if face.track == track])


def frames_per_track(tracked: list[TrackedFrame]) -> dict[int, list[int]]:
    frames: dict[int, list[int]] = {}
    for frame in tracked:
        for face in frame.faces:
            frames.setdefault(face.track, []).append(frame.index)
    return frames


def without_faces(frames: list[Frame], indices: range) -> list[Frame]:
    """``frames`` with the detections of ``indices`` dropped: a simulated detector miss."""
    return [(i, t, [] if i in indices else faces, image) for i, t, faces, image in frames]


def bias(raw: np.ndarray, smoothed: np.ndarray) -> float:
    """How far smoothing pulls a track off its detections on average (their mean offset, which
    noise averages away and lag does not), over the eye distance."""
    return float(np.linalg.norm((smoothed - raw).mean(axis=(0, 1)))) / eye_distance(raw)


@pytest.mark.parametrize("video", TALKING_HEADS)
def test_default_smoothing_cuts_jitter_to_under_a_third_without_pulling_the_face(detector, video, record_property):
    tracked = track_faces(detected_frames(detector, video))
    frames = frames_per_track(tracked)
    main = max(frames, key=lambda track: len(frames[track]))
    assert len(frames[main]) >= 0.95 * len(tracked), f"main track broken up: {frames}"
    raw, smoothed = track_series(tracked, main, "landmarks_raw"), track_series(tracked, main, "landmarks")
    times = track_times(tracked, main)
    ratio = landmark_jitter(smoothed, times) / landmark_jitter(raw, times)
    pulled = bias(raw, smoothed)
    record_property("jitter_ratio", round(ratio, 3))
    record_property("bias_over_eye_distance", round(pulled, 4))
    print(f"{video}: jitter {landmark_jitter(raw, times):.2f} -> {landmark_jitter(smoothed, times):.2f} px "
          f"(ratio {ratio:.3f}), bias {100 * pulled:.2f}% of the eye distance")
    assert ratio <= 0.30, f"{video}: smoothed jitter is {ratio:.3f} of the raw"
    assert pulled <= 0.01, f"{video}: smoothing pulls the landmarks {100 * pulled:.2f}% of the eye distance off"


def test_whip_pans_are_followed_without_lag(detector):
    """A handheld phone selfie whipped from side to side: faces cross the frame at up to 100 px a
    frame and their tracks start and end mid-motion, where a fixed wide window lags (3.1 % of the
    eye distance with the local-linear fit of sigma 1). Every track stays within 2 %."""
    tracked = track_faces(detected_frames(detector, "phone_selfie_rotation90_new_face_video-90", limit=150))
    long_tracks = [track for track, found in frames_per_track(tracked).items() if len(found) >= 25]
    assert len(long_tracks) >= 3, f"control: the whip pans give fewer tracks than expected: {frames_per_track(tracked)}"
    for track in long_tracks:
        raw, smoothed = track_series(tracked, track, "landmarks_raw"), track_series(tracked, track, "landmarks")
        times = track_times(tracked, track)
        pulled = bias(raw, smoothed)
        assert pulled <= 0.02, f"track {track}: pulled {100 * pulled:.2f}% of the eye distance off its detections"
        assert landmark_jitter(smoothed, times) < 0.5 * landmark_jitter(raw, times)


def slow_path(t: int, size: tuple[int, int], period: int = 40) -> np.ndarray:
    """Frame ``t`` of a known smooth motion, as a 2x3 affine: sub-pixel steps along sinusoids
    (5 and 3 px amplitudes) and a 2% zoom about the centre."""
    phase = 2 * np.pi * t / period
    motion = cv2.getRotationMatrix2D((size[0] / 2, size[1] / 2), 0.0, 1 + 0.02 * np.sin(phase))
    motion[:, 2] += (5 * np.sin(phase), 3 * np.sin(2 * phase + 1))
    return motion


def as_video_frame(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``image`` with fresh sensor noise and JPEG compression, as each video frame has its own."""
    noisy = np.clip(image + rng.normal(0, 3, image.shape), 0, 255).astype(np.uint8)
    return cv2.imdecode(cv2.imencode(".jpg", noisy, [cv2.IMWRITE_JPEG_QUALITY, 80])[1], cv2.IMREAD_UNCHANGED)


def test_smoothing_brings_landmarks_closer_to_a_known_motion(detector):
    """A real photo moved along a known slow path. Truth: the path applied to the landmarks found
    on the unmoved photo."""
    photo = read_rgb("whole_facexlib_test2.jpg")
    size = photo.shape[1::-1]
    rng = np.random.default_rng(0)
    base = detector.detect(photo[None])[0][0].landmarks
    motions = [slow_path(t, size) for t in range(40)]
    moved = (cv2.warpAffine(photo, m, size, flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE) for m in motions)
    frames = [as_video_frame(image, rng) for image in moved]
    truth = np.stack([base @ m[:, :2].T + m[:, 2] for m in motions])
    found = detect(detector, frames)
    tracked = track_faces((t, t / 25, faces, image) for t, (faces, image) in enumerate(zip(found, frames)))
    assert [len(frame.faces) for frame in tracked] == [1] * 40 and frames_per_track(tracked).keys() == {0}
    raw_error, smoothed_error = (float(np.linalg.norm(track_series(tracked, 0, attribute) - truth, axis=-1).mean())
                                 for attribute in ("landmarks_raw", "landmarks"))
    print(f"mean error to the true landmarks: raw {raw_error:.3f} px, smoothed {smoothed_error:.3f} px")
    assert smoothed_error < raw_error, f"smoothed {smoothed_error:.3f} px vs raw {raw_error:.3f} px"


def test_steady_motion_is_not_lagged_even_at_track_ends_and_uneven_frame_times():
    times = np.cumsum(np.r_[0.0, np.where(np.arange(29) % 3 == 0, 2 / 30, 1 / 30)])  # 30 fps with dropped frames
    start = np.random.default_rng(1).uniform(0, 500, (5, 2))
    points = start + times[:, None, None] * np.array([40.0, -25.0])  # px/s
    for strength in (0.5, 1.0, 3.0):
        np.testing.assert_allclose(Smoother(strength).smooth(points, times), points, atol=1e-9)


def test_streaming_returns_each_frame_once_in_order_within_the_lookahead(d20):
    frames = without_faces(d20, range(20, 25))  # the longest miss bridged: its fill arrives last
    tracker = FaceTracker()
    assert tracker.lookahead >= 5
    out: list[TrackedFrame] = []
    for pushed, (index, time, faces, image) in enumerate(frames, start=1):
        out += tracker.push(index, time, faces, scene_thumbnail(image))
        assert pushed - len(out) <= tracker.lookahead
    out += tracker.flush()
    assert [frame.index for frame in out] == [frame[0] for frame in frames]
    assert all(len(frame.faces) == 1 for frame in out)


def test_streamed_landmarks_equal_smoothing_the_finished_track(d20):
    """Nothing is emitted before its smoothing window, filled-in misses included, is complete."""
    tracked = track_faces(without_faces(d20, range(20, 25)))
    assert frames_per_track(tracked).keys() == {0}
    raw, times = track_series(tracked, 0, "landmarks_raw"), track_times(tracked, 0)
    np.testing.assert_allclose(track_series(tracked, 0, "landmarks"), Smoother(1.0).smooth(raw, times), atol=1e-9)


def test_smooth_zero_leaves_the_detected_landmarks(d20):
    tracked = track_faces(d20, smooth=0)
    for frame, (_, _, faces, _) in zip(tracked, d20):
        assert np.array_equal(frame.faces[0].landmarks, frame.faces[0].landmarks_raw)
        assert np.array_equal(frame.faces[0].landmarks_raw, faces[0].landmarks)
    assert FaceTracker(smooth=0, max_gap=5).lookahead == 5


def test_short_miss_is_bridged_by_interpolation(d20):
    missed = range(30, 33)
    tracked = track_faces(without_faces(d20, missed))
    assert frames_per_track(tracked) == {0: list(range(len(d20)))}
    bridged = [tracked[i].faces[0] for i in missed]
    assert all(face.interpolated and face.score is None for face in bridged)
    assert not any(face.interpolated for i, frame in enumerate(tracked) if i not in missed for face in frame.faces)
    # The fill is the straight line between the detections either side, and close to what the
    # detector did find on those frames.
    before, after = d20[missed.start - 1], d20[missed.stop]
    for i, face in zip(missed, bridged):
        w = (d20[i][1] - before[1]) / (after[1] - before[1])
        np.testing.assert_allclose(face.landmarks_raw, (1 - w) * before[2][0].landmarks + w * after[2][0].landmarks)
        detected = d20[i][2][0].landmarks
        error = np.linalg.norm(face.landmarks_raw - detected, axis=-1).mean() / eye_distance(detected[None])
        assert error < 0.05, f"frame {i}: interpolated landmarks {100 * error:.1f}% of the eye distance off"


def test_miss_longer_than_max_gap_starts_a_new_track(d20):
    missed = range(30, 36)  # 6 frames > max_gap
    tracked = track_faces(without_faces(d20, missed), max_gap=5)
    assert frames_per_track(tracked) == {0: list(range(30)), 1: list(range(36, len(d20)))}


def test_scene_cut_ends_every_track(detector, d20):
    """Two talking heads back to back at one size; their faces overlap enough that, without the
    cut detector, the first person's track runs on into the second's."""
    second = list(detected_frames(detector, "talking_head_speech_mpeg4_sadtalker_katiehill", limit=30,
                                  size=d20[0][3].shape[1::-1]))
    spliced = d20[:30] + [(30 + i, 1.2 + t, faces, image) for i, t, faces, image in second]
    assert all(len(frame[2]) == 1 for frame in spliced)
    ids_across = frames_per_track(track_faces(spliced, cut_threshold=float("inf")))
    assert any(min(f) < 30 <= max(f) for f in ids_across.values()), f"control: no track crossed {ids_across}"
    tracked = track_faces(spliced)
    frames = frames_per_track(tracked)
    assert frames == {0: list(range(30)), 1: list(range(30, 60))}
    assert not any(face.interpolated for frame in tracked for face in frame.faces)


def test_a_face_elsewhere_does_not_take_over_a_lost_track(detector, d20):
    """The face leaves the left half of a double-width frame as the same face appears in the right
    half: too far to be the same track. Scene-cut detection is off, so only the gate decides."""
    left_half = [np.concatenate([image, np.zeros_like(image)], axis=1) for _, _, _, image in d20[:20]]
    right_half = [np.concatenate([np.zeros_like(image), image], axis=1) for _, _, _, image in d20[20:40]]
    images = left_half + right_half
    frames = [(i, t, found, image) for (i, t, _, _), found, image in zip(d20, detect(detector, images), images)]
    assert all(len(found) == 1 for _, _, found, _ in frames)
    tracked = track_faces(frames, cut_threshold=float("inf"))
    assert frames_per_track(tracked) == {0: list(range(20)), 1: list(range(20, 40))}


def test_several_faces_keep_distinct_stable_ids(detector):
    """An indoor event, handheld, 3-5 faces of 22-59 px: three are found on every frame."""
    frames = list(detected_frames(detector, "multi_face_event_video_01", limit=60))
    tracked = track_faces(frames)
    for frame in tracked:
        ids = [face.track for face in frame.faces]
        assert len(ids) == len(set(ids)), f"frame {frame.index}: one track twice {ids}"
    whole = [track for track, found in frames_per_track(tracked).items() if len(found) == len(frames)]
    assert len(whole) >= 3, f"fewer than 3 faces tracked throughout: {frames_per_track(tracked)}"
    for track in whole:  # a swap with another face would jump by the distance between them: 2+ face sizes
        boxes = np.stack([face.box for frame in tracked for face in frame.faces if face.track == track])
        steps = np.linalg.norm(np.diff(boxes[:, :2] + boxes[:, 2:], axis=0) / 2, axis=-1)
        sizes = np.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1])
        assert (steps < 0.5 * sizes[1:]).all(), f"track {track} jumps by {(steps / sizes[1:]).max():.2f} face sizes"


@pytest.mark.parametrize("size", [(1080, 1920), (37, 53), (20, 45)])
def test_thumbnails_are_adaptive_area_averages(size):
    """The cut detector's thumbnails, computed by matrix products, are the adaptive average
    pooling they stand for, also where bins overlap or the frame is smaller than the thumbnail."""
    frames = torch.randint(0, 256, (2, 3, *size), generator=torch.Generator().manual_seed(0)).float()
    expected = F.adaptive_avg_pool2d(frames, THUMBNAIL_SIDE)
    torch.testing.assert_close(thumbnail_means(frames), expected, rtol=0, atol=1e-3)
