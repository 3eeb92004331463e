"""``--qc``: the flicker a restoration adds to each track, as the output's warping error over the
input's, on real video: none for the input itself, plainly more for a face that changes at random
from frame to frame, and about none for a restoration at strength 0."""

from __future__ import annotations

import json
import subprocess

import av
import numpy as np
import pytest

from gpen_video.faces.track import TrackedFace, TrackedFrame
from gpen_video.media.demux import read_frames
from gpen_video.pipeline.flicker import FLICKER_LIMIT, FlickerCheck

from . import corpus
from .conftest import shared_file
from .test_preservation import gpen_video

CLIP = "media/videos/talking_head_speech_retalking2.mp4"
#: Inside the face in the first 40 frames of CLIP (detected there: 228-555 x 222-644).
BOX = np.array([240.0, 230.0, 540.0, 620.0])


def _checked(changed) -> FlickerCheck:
    """40 real frames through a FlickerCheck, one track restored on each, its output the frame
    with ``changed(luma, frame number)`` as its luma (the whole picture's, so that no edge of the
    change moves against the face)."""
    check = FlickerCheck()
    for number, source in enumerate(read_frames(shared_file(CLIP), 40)):
        face = TrackedFace(0, 0.9, BOX, np.zeros((5, 2)), np.zeros((5, 2)), False)
        check.add(TrackedFrame(source.index, source.time, [face]), None, True, [True])
        planes = source.frame.to_ndarray(format="yuv420p").copy()
        height = source.frame.height
        planes[:height] = changed(planes[:height], number)
        check.measure(source, av.VideoFrame.from_ndarray(planes, format="yuv420p"))
    return check


def test_the_input_itself_reads_exactly_one():
    check = _checked(lambda luma, number: luma)
    assert check.tracks.keys() == {0} and check.tracks[0].pairs == 39
    assert check.tracks[0].ratio == pytest.approx(1.0, abs=1e-9)


def test_a_face_that_changes_at_random_from_frame_to_frame_reads_as_flicker():
    """Detail drawn afresh on every frame, as a restorer can: four levels of noise, redrawn per frame."""
    rng = np.random.default_rng(0)

    def redrawn(luma: np.ndarray, number: int) -> np.ndarray:
        return np.clip(luma + rng.normal(0, 4, luma.shape), 0, 255).astype(np.uint8)

    check = _checked(redrawn)
    assert check.tracks[0].ratio > 3 * FLICKER_LIMIT


def test_a_change_that_is_the_same_on_every_frame_reads_about_one():
    """A tone curve (brighter, a little more contrast in the shadows), the same on every frame:
    the output changes between frames as the input does, scaled by the curve."""
    curve = (255 * (np.arange(256) / 255) ** 0.8).round().astype(np.uint8)
    check = _checked(lambda luma, number: curve[luma])
    assert 0.9 < check.tracks[0].ratio < 1.3


def test_qc_at_strength_zero_reads_about_one_in_the_summary_tracks_file_and_report(small_gpen, tmp_path):
    """At strength 0 the tool leaves every face as it was decoded, and --qc must read it as adding
    no flicker. The figure is in the summary, the tracks file and the report alike."""
    clip = tmp_path / "small.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", shared_file(CLIP), "-t", "2", "-vf", "scale=160:160",
                    "-c:v", "libx264", "-crf", "16", "-an", clip], check=True)
    run = gpen_video(small_gpen, clip, tmp_path / "out.mkv", "--codec", "ffv1", "--strength", "0", "--qc",
                     "--tracks-out", tmp_path / "tracks.json", "--report", tmp_path / "report.json")
    assert run.returncode == 0, run.stderr
    figures = json.loads((tmp_path / "tracks.json").read_text())["tracks"]
    assert figures.keys() == {"0"} and figures["0"]["frame_pairs"] == 49
    assert 0.9 < figures["0"]["flicker"] < 1.2
    [record] = json.loads((tmp_path / "report.json").read_text())["files"]
    assert record["flicker"] == figures
    assert f"(1.0: none added): track 0 {figures['0']['flicker']:.2f}" in run.stderr
    assert "check track" not in run.stderr


def test_an_interlaced_video_is_named_unmeasured_and_restored_all_the_same(small_gpen, tmp_path):
    clip = corpus.interlaced(tmp_path / "interlaced.mp4", top_first=True)
    run = gpen_video(small_gpen, clip, tmp_path / "out.mkv", "--codec", "ffv1", "--qc")
    assert run.returncode == 0, run.stderr
    assert "warning: --qc measures progressive video; interlaced.mp4 is interlaced, so its flicker was not " \
           "measured" in run.stderr
    assert "flicker, the output's" not in run.stderr


def test_qc_refuses_what_it_cannot_measure(small_gpen, tmp_path):
    run = gpen_video(small_gpen, shared_file(CLIP), "--detect-only", "--qc")
    assert run.returncode != 0
    assert run.stderr.strip().splitlines()[-1] == \
        "gpen-video: error: --qc measures a restored video; it cannot be combined with --detect-only"
