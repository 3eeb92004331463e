"""``--preview N``: a contact sheet of N frames, decoded beside restored, found by seeking; the
restored half changes only the faces (those chosen, with ``--tracks``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from gpen_video.media.demux import read_frames
from gpen_video.media.probe import probe
from gpen_video.media.seek import frames_at
from gpen_video.media.sheet import _CAPTION, _GAP
from gpen_video.pipeline.plan import preview_times

from . import corpus
from .conftest import SMALL_GPEN_SIZE, paste_region, shared_file, write_clip
from .made_by_tools import ffmpeg
from .test_preservation import gpen_video
from .test_select import EVENT


def _rows(sheet: Path, height: int, width: int, panels: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The sheet's (decoded, restored) halves, RGB, checking its size holds ``panels`` rows."""
    image = cv2.cvtColor(cv2.imread(str(sheet)), cv2.COLOR_BGR2RGB)
    assert image.shape == (_CAPTION + panels * (_CAPTION + height + _GAP), 2 * width + 3 * _GAP, 3)
    rows = []
    for n in range(panels):
        top = _CAPTION + n * (_CAPTION + height + _GAP) + _CAPTION
        rows.append((image[top : top + height, _GAP : _GAP + width],
                     image[top : top + height, 2 * _GAP + width : 2 * _GAP + 2 * width]))
    return rows


def _reach(faces: list[dict], shape: tuple[int, int]) -> np.ndarray:
    """Where pasting ``faces`` can change a frame's RGB: their paste regions, grown by 2 px since
    4:2:0 chroma, upsampled bilinearly, carries a changed sample into its neighbours."""
    region = paste_region(faces, SMALL_GPEN_SIZE, *shape).astype(np.uint8)
    return cv2.dilate(region, np.ones((5, 5), np.uint8)).astype(bool)


def _faces_at(tracks: Path, time: float) -> list[dict]:
    records = json.loads(tracks.read_text())["frames"]
    return next(r for r in records if abs(r["time"] - time) < 1e-4)["faces"]


def test_a_sheet_of_three_frames_seeks_instead_of_decoding_the_clip(small_gpen, tmp_path):
    """The real talking head (175 frames), with a keyframe a second as cameras write them: three
    rows, each the frame as decoded beside the same frame restored, changed only about its face;
    far fewer frames decoded than the clip holds."""
    clip = tmp_path / "talk.mp4"
    write_clip(clip, [frame.rgb() for frame in read_frames(shared_file(corpus.TALKING_HEAD))], options={"g": "25"})
    sheet, tracks = tmp_path / "sheet.png", tmp_path / "faces.json"
    run = gpen_video(small_gpen, clip, sheet, "--preview", "3")
    assert run.returncode == 0, run.stderr
    decoded = int(re.search(r"3 frames from (\d+) decoded", run.stderr).group(1))
    assert 3 <= decoded < 175 // 2
    assert gpen_video(small_gpen, clip, "--detect-only", "--tracks-out", tracks).returncode == 0
    info = probe(clip)
    frames = frames_at(clip, list(preview_times(info, None, 3)))
    for frame, (left, right) in zip(frames, _rows(sheet, info.height, info.width, 3), strict=True):
        original = frame.rgb()
        changed = (right != original).any(axis=-1)
        assert changed.any(), f"{frame.time}: no face restored"
        # Restored alone, as a photo is: from the landmarks as detected, not smoothed over time.
        faces = [face | {"landmarks": face["landmarks_raw"]} for face in _faces_at(tracks, frame.time)]
        assert not (changed & ~_reach(faces, changed.shape)).any()
        assert (left != original).any()  # the face's box is drawn on the decoded half


def test_with_tracks_only_the_chosen_faces_change_and_ids_are_the_clips(small_gpen, tmp_path):
    clip = corpus.excerpt(tmp_path / "event.mp4", shared_file(EVENT), 1.5)
    sheet, tracks = tmp_path / "sheet.png", tmp_path / "faces.json"
    assert gpen_video(small_gpen, clip, "--detect-only", "--tracks-out", tracks).returncode == 0
    run = gpen_video(small_gpen, clip, sheet, "--preview", "2", "--tracks", "0")
    assert run.returncode == 0, run.stderr
    assert "tracks restored: 0 of 0, 1, " in run.stderr
    info = probe(clip)
    frames = frames_at(clip, list(preview_times(info, None, 2)))
    for frame, (_, right) in zip(frames, _rows(sheet, info.height, info.width, 2), strict=True):
        faces = _faces_at(tracks, frame.time)
        assert len(faces) > 1 and faces[0]["track"] == 0
        changed = (right != frame.rgb()).any(axis=-1)
        assert changed.any()
        # With the whole-clip tracks, their smoothed landmarks too.
        assert not (changed & ~_reach(faces[:1], changed.shape)).any(), "a face not chosen changed"


def test_an_interlaced_frame_is_previewed_field_by_field_as_a_render_restores_it(small_gpen, tmp_path):
    """Six top-field-first frames, a cut to a shot without faces at the second field of frame 3:
    the panels (frames 1, 3 and 5) are the frames a render with --smooth 0 (each picture's own
    landmarks, as a preview restores) makes, field by field, within the rounding of a GPEN
    batch of another size; frame 5, both fields after the cut, is left as decoded; a face seen
    in both fields of frame 1 counts once."""
    clip = corpus.interlaced(tmp_path / "interlaced.mp4", top_first=True)
    sheet, rendered = tmp_path / "sheet.png", tmp_path / "rendered.mkv"
    run = gpen_video(small_gpen, clip, sheet, "--preview", "3")
    assert run.returncode == 0, run.stderr
    assert "3 frames from 6 decoded, 2 faces restored" in run.stderr
    assert gpen_video(small_gpen, clip, rendered, "--codec", "ffv1", "--smooth", "0").returncode == 0
    info = probe(clip)
    assert preview_times(info, None, 3) == pytest.approx((0.04, 0.12, 0.2))
    decoded, restored = read_frames(clip), read_frames(rendered)
    by_render = [(source.rgb(), render.rgb()) for source, render in zip(decoded, restored, strict=True)]
    for k, (_, right) in zip((1, 3, 5), _rows(sheet, info.height, info.width, 3), strict=True):
        original, render = by_render[k]
        assert np.abs(right.astype(int) - render.astype(int)).max() <= 3, f"frame {k}"
        assert (right != original).any() == (k != 5), f"frame {k}"


@pytest.mark.parametrize(("args", "message"), [
    (["--preview", "0"], "--preview must be in [1, 64], got 0"),
    (["--preview", "2", "--tracks-out", "t.json"], "--preview writes only the contact sheet; it cannot be "
                                                   "combined with --tracks-out"),
])
def test_bad_preview_options_are_refused(small_gpen, tmp_path, args, message):
    run = gpen_video(small_gpen, shared_file(corpus.TALKING_HEAD), tmp_path / "sheet.png", *args)
    assert run.returncode == 1 and f"gpen-video: error: {message}" in run.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_photo_has_no_frames_to_preview(small_gpen, tmp_path):
    run = gpen_video(small_gpen, shared_file("media/images/whole_two_people.jpg"), tmp_path / "s.png",
                     "--preview", "2")
    assert run.returncode == 1 and "--preview samples the frames of a video; whole_two_people.jpg is an image" \
        in run.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_matroska_clips_preview_spreads_over_its_length(tmp_path):
    """FFmpeg's Matroska gives the file's length in its header and no stream's: the preview's
    frames spread over the whole clip (they once all fell in its first frame's time)."""
    clip = tmp_path / "cut.mkv"
    ffmpeg("-i", shared_file("media/videos/talking_head_speech_liveportrait_d20.mp4"), "-t", "2", "-c", "copy", clip)
    info = probe(clip)
    assert 2.0 <= info.duration < 2.3  # the file's: its audio may run a little past the last frame
    times = preview_times(info, None, 4)
    assert times == pytest.approx(tuple(info.first_time + (k + 0.5) * info.duration / 4 for k in range(4)))
    assert times[-1] > 1.7
