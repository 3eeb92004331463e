"""The whole tool on every real sample video (CPU, the small golden GPEN, the real detector, lossless
x264): frame count, timestamps, audio packets, duration, rotation, and pixels outside faces untouched."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from scipy.ndimage import binary_dilation

from gpen_video.api import restore_video

from .conftest import paste_region, shared_file
from .made_by_tools import ffmpeg

VIDEOS = [
    "talking_head_speech_retalking2.mp4",
    "talking_head_speech_mpeg4_sadtalker_katiehill.mp4",
    "talking_head_speech_liveportrait_d20.mp4",
    "talking_head_vfr_retalking1.mp4",
    "phone_selfie_rotation90_new_face_video-90.mp4",
    "phone_portrait_selfie_liveportrait_d13.mp4",
    "multi_face_event_video_01.mp4",
    "multi_face_hikers_video_02.mp4",
    "multi_face_crowd_facenet_pytorch.mp4",
    "old_footage_chaplin_moviepy.mp4",
]
#: Samples whose length costs a minute or more on CI's two cores, run as their first frames (2-7 s),
#: cut by FFmpeg's command line without re-encoding (every stream). Each count of packets holds
#: every frame up to its last: a B-frame is stored after the frame it precedes, so most other
#: counts leave a gap before the last frame that the cut file's header does not count.
FIRST_FRAMES = {"phone_portrait_selfie_liveportrait_d13.mp4": 121, "phone_selfie_rotation90_new_face_video-90.mp4": 215,
                "multi_face_hikers_video_02.mp4": 210, "multi_face_crowd_facenet_pytorch.mp4": 49}



def run_restore(src: Path, dst: Path, weights: Path, **options):
    options = {"device": "cpu", "weights": weights, "detector": "retinaface-mobile",
               "detector_weights": shared_file("weights/retinaface_mobilenet0.25.pth"), "batch_size": 8,
               "progress": False, "preset": "ultrafast", **options}
    return restore_video(src, dst, **options)


def _frame_times(path: Path) -> list[Fraction]:
    with av.open(str(path)) as c:
        return [f.pts * f.time_base for f in c.decode(video=0)]


def _packets(path: Path, kind: str) -> list[tuple[bytes, Fraction | None]]:
    with av.open(str(path)) as c:
        streams = [s for s in c.streams if s.type == kind]
        if not streams:  # demux([]) would read every stream
            return []
        return [(bytes(p), p.pts * p.time_base if p.pts is not None else None)
                for p in c.demux(streams) if p.size]


def _rotation(path: Path) -> int:
    with av.open(str(path)) as c:
        return next(c.decode(video=0)).rotation


def _decoded_rgb(path: Path, limit: int) -> list[np.ndarray]:
    from gpen_video.media.demux import read_frames

    return [f.rgb() for f in read_frames(path, limit=limit)]


def _assert_only_face_regions_changed(src: Path, dst: Path, tracks: list[dict], crop_size: int, frames: int) -> None:
    """Pixels outside every face's paste footprint (from the tracks file) are identical to the input,
    and frames with faces did change."""
    for frame_in, frame_out, record in zip(_decoded_rgb(src, frames), _decoded_rgb(dst, frames), tracks):
        changed = np.any(frame_in != frame_out, axis=2)
        region = paste_region(record["faces"], crop_size, *changed.shape)
        # chroma blocks reach 1 px further, and RGB mixes them
        allowed = binary_dilation(region, np.ones((3, 3), bool), iterations=2)
        assert not np.any(changed & ~allowed), f"frame {record['index']} changed outside its faces"
        assert changed.any() == bool(record["faces"]), f"frame {record['index']}"


@pytest.mark.parametrize("video", VIDEOS)
def test_every_sample_video_keeps_frames_timing_audio_and_rotation(video, small_gpen, tmp_path):
    src = shared_file(f"media/videos/{video}")
    if video in FIRST_FRAMES:
        ffmpeg("-i", src, "-map", "0", "-c", "copy", "-frames:v", str(FIRST_FRAMES[video]), tmp_path / video)
        src = tmp_path / video
    dst = tmp_path / "out.mp4"
    summary = run_restore(src, dst, small_gpen, crf=0, tracks_out=tmp_path / "tracks.json")  # lossless x264

    times_in, times_out = _frame_times(src), _frame_times(dst)
    assert summary.frames == len(times_in) == len(times_out)
    assert times_out == times_in  # every frame keeps its own timestamp, VFR included
    assert _packets(dst, "audio") == _packets(src, "audio")  # bit-exact audio, same timestamps
    assert _rotation(dst) == _rotation(src)
    with av.open(str(src)) as a, av.open(str(dst)) as b:
        frame = float(1 / a.streams.video[0].guessed_rate)
        assert abs(a.duration - b.duration) / 1e6 <= frame + 1e-3
    tracks = json.loads((tmp_path / "tracks.json").read_text())["frames"]
    assert [f["index"] for f in tracks] == list(range(len(times_in)))
    assert summary.faces == sum(len(f["faces"]) for f in tracks)
    if video.startswith(("talking_head", "phone_portrait")):
        assert summary.frames_with_faces >= 0.9 * summary.frames
    if video.startswith("multi_face"):
        assert max(len(f["faces"]) for f in tracks) >= 2
    _assert_only_face_regions_changed(src, dst, tracks, crop_size=64, frames=40)


def test_video_without_faces_is_passed_through(small_gpen, tmp_path):
    """With a threshold no face reaches, every frame is encoded exactly as decoded (lossless FFV1)."""
    src = shared_file("media/videos/old_footage_chaplin_moviepy.mp4")
    dst = tmp_path / "out.mkv"
    summary = run_restore(src, dst, small_gpen, codec="ffv1", preset=None, threshold=0.9999)
    assert summary.faces == 0
    assert summary.frames == len(_frame_times(src))
    original, out = _decoded_rgb(src, None), _decoded_rgb(dst, None)
    assert all(np.array_equal(a, b) for a, b in zip(original, out))
