"""``--decoder``: which streams NVDEC may decode, the choice on a machine without it, how its
packets are prepared and its pictures laid out, all checked on the CPU with real files. The GPU
side (NVDEC's pictures equal to libavcodec's) is in ``test_nvdec.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from gpen_video.errors import UsageError
from gpen_video.media.colour import frame_planes
from gpen_video.media.decoders import StreamTraits, choose_decoder, stream_refusal
from gpen_video.media.nvdec import needs_annexb, nv12_to_planes, picture_template
from gpen_video.media.probe import probe

from . import corpus
from .conftest import shared_file

VIDEOS = ["talking_head_speech_liveportrait_d20.mp4", "talking_head_vfr_retalking1.mp4",
          "phone_selfie_rotation90_new_face_video-90.mp4", "multi_face_crowd_facenet_pytorch.mp4",
          "old_footage_chaplin_moviepy.mp4", "talking_head_speech_mpeg4_sadtalker_katiehill.mp4"]


def _traits(path: Path) -> StreamTraits:
    info = probe(path)
    assert info.traits is not None
    return info.traits


def test_nvdec_may_decode_progressive_420_h264_and_hevc_and_nothing_else(tmp_path):
    allowed = {
        "h264 4:2:0": corpus.encoded(tmp_path / "a.mp4", "libx264", "yuv420p"),
        "hevc 4:2:0": corpus.encoded(tmp_path / "b.mp4", "libx265", "yuv420p"),
        "hevc main10": corpus.hdr10_hevc(tmp_path / "c.mp4"),
        "real phone video": shared_file("media/videos/phone_selfie_rotation90_new_face_video-90.mp4"),
    }
    for name, path in allowed.items():
        assert stream_refusal(_traits(path)) == "", name
    refused = {
        "h264 4:2:2": (corpus.encoded(tmp_path / "d.mp4", "libx264", "yuv422p"), "yuv422p"),
        "h264 10-bit": (corpus.encoded(tmp_path / "e.mp4", "libx264", "yuv420p10le"), "yuv420p10le"),
        "mpeg-4 part 2": (shared_file("media/videos/talking_head_speech_mpeg4_sadtalker_katiehill.mp4"),
                          "only H.264 and HEVC"),
        "vp9": (corpus.encoded(tmp_path / "f.webm", "libvpx-vp9", "yuv420p"), "only H.264 and HEVC"),
        "interlaced": (corpus.interlaced(tmp_path / "g.mp4", top_first=True), "interlaced"),
    }
    for name, (path, why) in refused.items():
        assert why in stream_refusal(_traits(path)), name
    assert "odd size" in stream_refusal(StreamTraits("h264", "yuv420p", 641, 480, False))


def test_auto_decodes_on_the_cpu_without_a_gpu_or_pynvvideocodec():
    traits = _traits(shared_file(f"media/videos/{VIDEOS[0]}"))
    assert choose_decoder("auto", traits, gpu=None).name == "cpu"
    assert choose_decoder("cpu", traits, gpu=None).describe() == "decoded on the CPU"
    with pytest.raises(UsageError, match="^--decoder nvdec: no CUDA GPU to decode on$"):
        choose_decoder("nvdec", traits, gpu=None)
    mpeg4 = _traits(shared_file(f"media/videos/{VIDEOS[-1]}"))
    with pytest.raises(UsageError, match="NVDEC does not decode mpeg4"):
        choose_decoder("nvdec", mpeg4, gpu=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine's answer")
def test_decoder_nvdec_on_a_machine_without_a_gpu_is_one_line_and_exit_1(tmp_path):
    clip = shared_file(f"media/videos/{VIDEOS[0]}")
    out = tmp_path / "out.mp4"
    run = subprocess.run([sys.executable, "-m", "gpen_video.cli", str(clip), str(out), "--decoder", "nvdec"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == ["gpen-video: error: --decoder nvdec: no CUDA GPU to decode on"]
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_length_prefixed_streams_go_through_the_annexb_filter_and_transport_streams_do_not(tmp_path):
    mp4 = shared_file(f"media/videos/{VIDEOS[0]}")
    ts = corpus.broadcast_ts(tmp_path / "broadcast.ts")
    with av.open(str(mp4)) as a, av.open(str(ts)) as b:
        assert needs_annexb(a.streams.video[0]) and not needs_annexb(b.streams.video[0])
        from av.bitstream import BitStreamFilterContext

        bsf = BitStreamFilterContext("h264_mp4toannexb", a.streams.video[0])
        first = bsf.filter(next(a.demux(a.streams.video[0])))[0]
        assert bytes(first)[:4] == b"\x00\x00\x00\x01"  # a start code where the length was


@pytest.mark.parametrize("name", VIDEOS)
def test_the_picture_template_carries_the_decoded_frames_format_and_colour_tags(name):
    with av.open(str(shared_file(f"media/videos/{name}"))) as container:
        stream = container.streams.video[0]
        like = picture_template(stream)
        first = next(container.decode(stream))
    attributes = ("width", "height", "colorspace", "color_range", "color_primaries", "color_trc")
    assert like.format.name == first.format.name
    assert [getattr(like, a) for a in attributes] == [getattr(first, a) for a in attributes]


def test_tagged_full_range_and_hdr_templates_match_too(tmp_path):
    full = corpus.encoded(tmp_path / "full.mp4", "libx264", "yuv420p", frames=3,
                          tags={"color_range": 2, "colorspace": 1, "color_primaries": 1, "color_trc": 1})
    for path in (full, corpus.hdr10_hevc(tmp_path / "hdr.mp4", frames=3)):
        with av.open(str(path)) as container:
            like, first = picture_template(container.streams.video[0]), next(container.decode(video=0))
        assert (like.format.name, like.color_range, like.colorspace, like.color_primaries, like.color_trc) == \
            (first.format.name, first.color_range, first.colorspace, first.color_primaries, first.color_trc), path


@pytest.mark.parametrize("layout", ["nv12", "p010le"])
def test_nvdec_surfaces_become_the_cpu_decoders_planes(tmp_path, layout):
    """NVDEC hands back NV12 (P016 for more than 8 bits: the value in the top bits); a real frame
    in that layout, as libswscale makes it, must come out as the planes libavcodec decodes."""
    pix_fmt = "yuv420p" if layout == "nv12" else "yuv420p10le"
    path = corpus.encoded(tmp_path / "clip.mkv", "ffv1", pix_fmt, frames=1)
    with av.open(str(path)) as container:
        frame = next(container.decode(video=0))
    surface = frame.reformat(format=layout)
    dtype = np.uint8 if layout == "nv12" else np.uint16
    luma, chroma = (np.frombuffer(p, dtype).reshape(p.height, -1)[:, : frame.width] for p in surface.planes)
    nv12 = torch.from_numpy(np.concatenate([luma, chroma]).copy())
    packed = nv12_to_planes(nv12, frame.height, frame.width)
    expected = np.concatenate([p.reshape(-1) for p in frame_planes(frame)])
    assert packed.dtype == (torch.uint8 if layout == "nv12" else torch.int16)
    np.testing.assert_array_equal(packed.numpy(), expected)
