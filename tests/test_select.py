"""Which faces: ``--detect-only`` lists the tracks, ``--tracks`` and ``--faces largest|center``
restore only some of them, per track; every other pixel stays the decoded one."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gpen_video.faces.detect import Face
from gpen_video.faces.select import TrackSurvey
from gpen_video.faces.track import FaceTracker, TrackedFace, TrackedFrame

from . import corpus
from .conftest import SMALL_GPEN_SIZE, decoded_planes, paste_region, plane_region, shared_file
from .test_preservation import gpen_video

EVENT = "media/videos/multi_face_event_video_01.mp4"  # 640x480, handheld, five to eight people


def _face(track: int, x: float, y: float, side: float) -> TrackedFace:
    box = np.array([x, y, x + side, y + side])
    points = np.zeros((5, 2))
    return TrackedFace(track, 0.99, box, points, points, interpolated=False)


def _survey(rule: str, frames: list[list[TrackedFace]]) -> TrackSurvey:
    survey = TrackSurvey(rule, height=480, width=640)
    for i, faces in enumerate(frames):
        survey.add(TrackedFrame(i, i / 25, faces), None, True, [False] * len(faces))
    return survey


def test_largest_is_chosen_per_track_so_near_equal_sizes_never_flicker():
    """Two people of nearly the same size, the larger changing every few frames: a choice per
    frame would flicker between them; per track, the one that is larger in most frames is chosen
    on every frame, and a passer-by who is briefly the largest is chosen too (largest in all of
    its frames)."""
    frames = []
    for i in range(20):
        a, b = (100, 98) if i % 5 else (98, 100)  # A larger in 16 of 20 frames
        faces = [_face(0, 50, 50, a), _face(1, 400, 50, b)]
        if 10 <= i < 13:
            faces.append(_face(2, 250, 200, 150))  # passes close to the camera
        frames.append(faces)
    assert _survey("largest", frames).chosen() == {0, 2}
    assert _survey("all", frames).chosen() == {0, 1, 2}


def test_center_chooses_the_track_nearest_the_middle_in_most_of_its_frames():
    frames = [[_face(0, 20, 20, 60), _face(1, 290, 210, 60 if i < 15 else 40), _face(2, 560, 400, 60)]
              for i in range(20)]
    survey = _survey("center", frames)
    assert survey.chosen() == {1}
    assert survey.frames == Counter({0: 20, 1: 20, 2: 20})
    assert survey.table().splitlines()[2].split() == ["1", "0.000", "0.760", "20", "55"]


def test_faces_outside_the_range_are_not_counted():
    survey = TrackSurvey("largest", 480, 640)
    survey.add(TrackedFrame(0, 0.0, [_face(5, 0, 0, 50)]), None, False, [False])
    assert survey.frames == Counter() and survey.chosen() == frozenset()


def test_new_tracks_are_numbered_left_to_right_whatever_the_detector_order():
    """The detector lists faces by score; ids follow the faces' places instead, so a rounding
    that swaps two near-equal scores cannot swap the ids an editor picked."""
    def face(x: float, score: float) -> Face:
        return Face(np.array([x, 100, x + 60, 160], dtype=np.float32), score,
                    np.array([[x + 20, 120], [x + 40, 120], [x + 30, 135], [x + 22, 148], [x + 38, 148]],
                             dtype=np.float32))

    tracker = FaceTracker(smooth=0)
    thumbnail = np.zeros((32, 32), np.float32)
    tracker.push(0, 0.0, [face(400, 0.999), face(20, 0.95), face(200, 0.97)], thumbnail)
    frames = tracker.flush()
    assert [(f.track, float(f.box[0])) for f in frames[0].faces] == [(0, 20.0), (1, 200.0), (2, 400.0)]


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """1.5 s of the real multi-face event video: 44 frames, five to eight faces each."""
    return corpus.excerpt(tmp_path_factory.mktemp("select") / "event.mp4", shared_file(EVENT), 1.5)


@pytest.fixture(scope="module")
def detected(small_gpen, clip, tmp_path_factory) -> tuple[subprocess.CompletedProcess, list[dict]]:
    tracks = tmp_path_factory.mktemp("detected") / "faces.json"
    run = gpen_video(small_gpen, clip, "--detect-only", "--tracks-out", tracks)
    assert run.returncode == 0, run.stderr
    return run, json.loads(tracks.read_text())["frames"]


def test_detect_only_numbers_the_tracks_as_a_full_run_does(small_gpen, clip, detected, tmp_path):
    _, listed = detected
    tracks = tmp_path / "full.json"
    run = gpen_video(small_gpen, clip, tmp_path / "full.mkv", "--tracks-out", tracks)
    assert run.returncode == 0, run.stderr
    full = json.loads(tracks.read_text())["frames"]
    assert [[f["track"] for f in r["faces"]] for r in full] == [[f["track"] for f in r["faces"]] for r in listed]
    for a, b in zip(full, listed):
        np.testing.assert_allclose([f["box"] for f in a["faces"]], [f["box"] for f in b["faces"]], atol=1e-3)


def test_detect_only_lists_the_tracks_and_writes_no_video(detected, clip):
    run, records = detected
    assert len(records) == 44
    assert all(not face["restored"] for record in records for face in record["faces"])
    tracks = Counter(face["track"] for record in records for face in record["faces"])
    table = run.stdout.splitlines()
    assert table[0].split() == ["track", "first", "s", "last", "s", "frames", "face", "px"]
    assert {int(line.split()[0]): int(line.split()[3]) for line in table[1:]} == tracks
    assert len(tracks) >= 5
    assert sorted(p.name for p in clip.parent.iterdir()) == ["event.mp4"]  # nothing written beside the input


def test_detect_only_never_loads_gpen(clip, detected, tmp_path):
    """GPEN's weights are neither read nor downloaded: a file that is no checkpoint at all does
    not stop ``--detect-only``, and the tracks are the same."""
    not_a_checkpoint = tmp_path / "gpen.pth"
    not_a_checkpoint.write_bytes(b"not a checkpoint")
    tracks = tmp_path / "faces.json"
    run = gpen_video(not_a_checkpoint, clip, "--detect-only", "--tracks-out", tracks)
    assert run.returncode == 0, run.stderr
    assert json.loads(tracks.read_text())["frames"] == detected[1]


def _restored_tracks(records: list[dict]) -> set[int]:
    return {face["track"] for record in records for face in record["faces"] if face["restored"]}


def _only_chosen_changed(clip: Path, output: Path, records: list[dict], chosen: set[int]) -> None:
    """Every sample outside the chosen tracks' paste regions is the decoded one (so the other
    tracks' faces are untouched), and each frame with a chosen face changed."""
    for record, before, after in zip(records, decoded_planes(clip), decoded_planes(output), strict=True):
        faces = [face for face in record["faces"] if face["track"] in chosen]
        region = paste_region(faces, SMALL_GPEN_SIZE, *before[0].shape)
        for plane_in, plane_out in zip(before, after):
            outside = ~plane_region(region, plane_in)
            np.testing.assert_array_equal(plane_out[outside], plane_in[outside], f"frame {record['index']}")
        assert (after[0] != before[0]).any() == bool(faces), f"frame {record['index']}"


def test_tracks_restores_only_the_chosen_tracks_numbered_as_detect_only(small_gpen, clip, detected, tmp_path):
    _, listed = detected
    counts = Counter(face["track"] for record in listed for face in record["faces"])
    chosen = {min(counts, key=lambda t: (-counts[t], t)), max(counts)}  # one on every frame, one that comes later
    out, tracks = tmp_path / "chosen.mkv", tmp_path / "chosen.json"
    run = gpen_video(small_gpen, clip, out, "--codec", "ffv1", "--tracks", ",".join(map(str, sorted(chosen))),
                     "--tracks-out", tracks)
    assert run.returncode == 0, run.stderr
    records = json.loads(tracks.read_text())["frames"]
    # The same tracks, numbered the same, as the --detect-only run.
    assert [[f["track"] for f in r["faces"]] for r in records] == [[f["track"] for f in r["faces"]] for r in listed]
    assert _restored_tracks(records) == chosen
    _only_chosen_changed(clip, out, records, chosen)


def test_largest_restores_the_main_face_of_each_moment(small_gpen, clip, detected, tmp_path):
    """The chosen tracks are those the largest face belongs to on at least half of their frames,
    counted here from the --detect-only run's boxes."""
    _, listed = detected
    on, largest = Counter(), Counter()
    for record in listed:
        areas = {f["track"]: (f["box"][2] - f["box"][0]) * (f["box"][3] - f["box"][1]) for f in record["faces"]}
        on.update(areas.keys())
        if areas:
            largest[max(areas, key=areas.get)] += 1
    expected = {t for t in on if 2 * largest[t] >= on[t]}
    assert 0 < len(expected) < len(on)
    out, tracks = tmp_path / "largest.mkv", tmp_path / "largest.json"
    run = gpen_video(small_gpen, clip, out, "--codec", "ffv1", "--faces", "largest", "--tracks-out", tracks)
    assert run.returncode == 0, run.stderr
    records = json.loads(tracks.read_text())["frames"]
    assert _restored_tracks(records) == expected
    _only_chosen_changed(clip, out, records, expected)


@pytest.mark.parametrize(("args", "message"), [
    (["--tracks", "99"], "--tracks 99: event.mp4 has no such track (its tracks: 0, 1, "),
    (["--tracks", "0", "--faces", "center"], "--tracks and --faces center both choose faces; give one"),
    (["--tracks", "-1"], "--tracks takes track ids from 0 up, got -1"),
])
def test_a_bad_choice_is_one_line_and_no_output(small_gpen, clip, tmp_path, args, message):
    out = tmp_path / "never.mp4"
    run = gpen_video(small_gpen, clip, out, *args)
    assert run.returncode == 1
    errors = [line for line in run.stderr.splitlines() if line.startswith("gpen-video: error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"gpen-video: error: {message}"), run.stderr
    assert list(tmp_path.iterdir()) == []


def test_detect_only_takes_no_output(small_gpen, clip, tmp_path):
    run = gpen_video(small_gpen, clip, tmp_path / "out.mp4", "--detect-only")
    assert run.returncode == 2 and "--detect-only takes one INPUT" in run.stderr
    assert list(tmp_path.iterdir()) == []
