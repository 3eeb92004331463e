"""``--start`` / ``--end``: faces restored in one stretch of a real clip, every other frame as
decoded, the file's frames, timing and sound unchanged; bad ranges refused before any work."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from gpen_video.errors import UsageError
from gpen_video.faces.track import FaceTracker
from gpen_video.options import RestoreOptions
from gpen_video.values import parse_time

from . import corpus
from .conftest import SMALL_GPEN_SIZE, decoded_planes, paste_region, plane_region, shared_file
from .test_batch import _timeline
from .test_preservation import gpen_video


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """3 s of the real talking head (480x480 H.264 at 25 fps, AAC): 76 frames, a face in each."""
    return corpus.excerpt(tmp_path_factory.mktemp("range") / "talk.mp4", shared_file(corpus.TALKING_HEAD), 3.0)


def _records(path: Path) -> list[dict]:
    return json.loads(path.read_text())["frames"]


def test_faces_are_restored_in_the_range_only_and_everything_else_is_kept(small_gpen, clip, tmp_path):
    """Lossless output, so every sample can be compared: frames before 1 s and from 2 s on are the
    decoded frames bit for bit; inside, only the faces' paste regions change. The range's edge
    frames are tracked with their neighbours, so their faces are those of a run over the whole
    clip; the frames, their times and the sound are the source's."""
    whole, ranged = tmp_path / "whole.mkv", tmp_path / "ranged.mkv"
    full_run = gpen_video(small_gpen, clip, whole, "--codec", "ffv1", "--tracks-out", tmp_path / "whole.json")
    assert full_run.returncode == 0, full_run.stderr
    run = gpen_video(small_gpen, clip, ranged, "--codec", "ffv1", "--tracks-out", tmp_path / "ranged.json",
                     "--start", "1", "--end", "0:02")
    assert run.returncode == 0, run.stderr

    source_times, source_audio = _timeline(clip)
    out_times, out_audio = _timeline(ranged)
    # Matroska holds no negative times: the whole file moves by the AAC priming, frames and sound alike.
    assert [t - out_times[0] for t in out_times] == [t - source_times[0] for t in source_times]
    frames = len(source_times)
    assert frames == 76  # 0 s to 3 s, both ends
    assert [data for _, data in out_audio] == [data for _, data in source_audio]

    inside = list(range(25, 50))  # 1.00 s to 1.96 s at 25 fps
    records, full = _records(tmp_path / "ranged.json"), _records(tmp_path / "whole.json")
    assert [r["index"] for r in records] == list(range(frames))
    assert [i for i, r in enumerate(records) if any(f["restored"] for f in r["faces"])] == inside
    # The margin (1.68 s each side, twice the tracker's 21 frames of context) covers this short
    # clip: every frame was tracked, its faces listed, restored or not.
    assert all(r["faces"] for r in records)
    assert all(all(f["restored"] for f in full[i]["faces"]) for i in range(frames))
    for i in inside:  # the same faces, landmarks and tracks as over the whole clip, edges included
        assert [f["track"] for f in records[i]["faces"]] == [f["track"] for f in full[i]["faces"]]
        np.testing.assert_allclose([f["landmarks"] for f in records[i]["faces"]],
                                   [f["landmarks"] for f in full[i]["faces"]], atol=1e-3)

    before, after = decoded_planes(clip), decoded_planes(ranged)
    for i, (planes_in, planes_out) in enumerate(zip(before, after, strict=True)):
        if i not in inside:
            assert all(np.array_equal(a, b) for a, b in zip(planes_in, planes_out)), f"frame {i} changed"
            continue
        region = paste_region(records[i]["faces"], SMALL_GPEN_SIZE, *planes_in[0].shape)
        for plane_in, plane_out in zip(planes_in, planes_out):
            outside = ~plane_region(region, plane_in)
            np.testing.assert_array_equal(plane_out[outside], plane_in[outside], f"frame {i}")
        assert (planes_out[0] != planes_in[0]).any(), f"frame {i}'s face was not restored"


def test_an_open_ended_range_restores_to_the_end(small_gpen, clip, tmp_path):
    out = tmp_path / "tail.mkv"
    # No smoothing, whose shorter lookahead leaves frames before the tracked ones in a 3 s clip.
    run = gpen_video(small_gpen, clip, out, "--codec", "ffv1", "--tracks-out", tmp_path / "tail.json",
                     "--start", "2.5", "--smooth", "0")
    assert run.returncode == 0, run.stderr
    records = _records(tmp_path / "tail.json")
    assert [i for i, r in enumerate(records) if any(f["restored"] for f in r["faces"])] == list(range(63, 76))
    # Detected and tracked from twice the tracker's context (15 frames) before the start on;
    # before that, nothing was detected.
    tracked = [i for i, r in enumerate(records) if r["faces"]]
    assert 0 < tracked[0] <= 63 - 2 * FaceTracker(smooth=0).context and tracked == list(range(tracked[0], 76))


@pytest.mark.parametrize(("flags", "message"), [
    (["--start", "2", "--end", "1"], "gpen-video: error: --end 1 must come after --start 2"),
    (["--end", "0"], "gpen-video: error: --end 0 must come after --start 0"),
    (["--start", "3.5"], "gpen-video: error: --start 3.5 s is not inside talk.mp4, which lasts 3.0"),
])
def test_a_range_that_cannot_work_is_one_line_and_no_output(small_gpen, clip, tmp_path, flags, message):
    out = tmp_path / "out.mp4"
    run = gpen_video(small_gpen, clip, out, *flags)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1].startswith(message) and len(run.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_range_on_an_image_is_refused(small_gpen, tmp_path):
    out = tmp_path / "out.png"
    run = gpen_video(small_gpen, shared_file("media/images/whole_two_people.jpg"), out, "--start", "1")
    assert run.returncode == 1
    assert run.stderr.strip() == ("gpen-video: error: --start and --end apply to videos; whole_two_people.jpg "
                                  "is an image")
    assert not out.exists()


def test_times_read_as_seconds_or_clock_time():
    assert [parse_time(t) for t in ("75.5", "1:15.5", "00:01:15.500", "0", "2:00:00")] == [75.5, 75.5, 75.5, 0, 7200]
    for bad in ("", "1:75", "-3", "1:2:3:4", "ten"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_time(bad)


def test_the_range_is_checked_where_the_options_are_made():
    assert RestoreOptions().time_range is None
    assert RestoreOptions(end=4.0).time_range == (0.0, 4.0)
    assert RestoreOptions(start=1.5).time_range == (1.5, None)
    with pytest.raises(UsageError, match="--start must be at least 0"):
        RestoreOptions(start=-1.0)


def test_both_fields_of_a_frame_fall_on_the_same_side_of_the_edge(small_gpen, tmp_path):
    """Interlaced: a field counts at its frame's time, so the end at frame 2 (0.08 s) keeps both
    fields of frames 0 and 1, and nothing of frame 2, whose second field is taken at 0.1 s."""
    src = corpus.interlaced(tmp_path / "in.mp4", top_first=True)
    out = tmp_path / "out.mkv"
    run = gpen_video(small_gpen, src, out, "--codec", "ffv1", "--tracks-out", tmp_path / "fields.json",
                     "--end", "0.08")
    assert run.returncode == 0, run.stderr
    restored = [any(f["restored"] for f in r["faces"]) for r in _records(tmp_path / "fields.json")]
    assert restored == [True] * 4 + [False] * 8
    before, after = decoded_planes(src), decoded_planes(out)
    assert [any((a != b).any() for a, b in zip(p, q)) for p, q in zip(before, after, strict=True)] == \
        [True, True, False, False, False, False]
