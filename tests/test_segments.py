"""Splitting a long video into segments for a cluster: the plan covers every frame once and starts
each segment's decoding at a key frame at least the tracker's context before it, and decoding from
such a key frame gives the frames a decode from the start gives, numbered the same."""

from __future__ import annotations

import av
import numpy as np
import pytest

from gpen_video.media.colour import frame_planes
from gpen_video.media.demux import SeekPoint, demux
from gpen_video.media.segments import plan_segments

from .conftest import shared_file

#: Real clips with key frames part-way: every 30 frames, irregular (a phone's, turned), and a VFR one.
CLIPS = ["media/videos/multi_face_hikers_video_02.mp4", "media/videos/phone_selfie_rotation90_new_face_video-90.mp4",
         "media/videos/talking_head_vfr_retalking1.mp4"]


def _key_frames(path) -> list[int]:
    """The presentation indices of the key frames, from the packets."""
    with av.open(str(path)) as container:
        packets = [p for p in container.demux(video=0) if p.size]
    order = sorted(p.pts for p in packets)
    return sorted(order.index(p.pts) for p in packets if p.is_keyframe)


@pytest.mark.parametrize("clip", CLIPS)
def test_the_plan_covers_every_frame_once_from_the_latest_key_frame_that_leaves_the_context(clip):
    path = shared_file(clip)
    with av.open(str(path)) as container:
        frames = sum(1 for _ in container.decode(video=0))
    keys = _key_frames(path)
    units = plan_segments(path, 50, context=21)
    assert [u.segment for u in units] == list(range(len(units))) and len(units) == -(-frames // 50)
    assert [(u.start, u.stop) for u in units] == [(s, min(s + 50, frames)) for s in range(0, frames, 50)]
    for unit in units:
        usable = [k for k in keys if k <= unit.start - 21]
        if unit.start == 0 or not usable:
            assert unit.seek is None
        else:
            assert unit.seek.index == usable[-1]
    assert plan_segments(path, frames, context=21) is None  # one segment: nothing to split


@pytest.mark.parametrize("clip", CLIPS)
def test_decoding_from_a_key_frame_gives_the_frames_of_a_decode_from_the_start(clip):
    path = shared_file(clip)
    with av.open(str(path)) as container:
        whole = [(f.index, f.frame.pts, f.damage, f.layout, [p.copy() for p in frame_planes(f.frame)])
                 for f in demux(container, set())]
    with av.open(str(path)) as container:
        pts = {i: f.frame.pts for i, f in enumerate(demux(container, set()))}
    keys = [k for k in _key_frames(path) if k > 0]
    assert keys
    for key in keys:
        with av.open(str(path)) as container:
            part = [(f.index, f.frame.pts, f.damage, f.layout, [p.copy() for p in frame_planes(f.frame)])
                    for f in demux(container, set(), start=SeekPoint(pts[key], key))]
        assert len(part) == len(whole) - key
        for got, expected in zip(part, whole[key:], strict=True):
            assert got[:4] == expected[:4]
            for x, y in zip(got[4], expected[4], strict=True):
                np.testing.assert_array_equal(x, y)
