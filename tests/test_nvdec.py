"""NVDEC against libavcodec, on a GPU with PyNvVideoCodec: every picture the same, sample for
sample, at the same time, with the same format, colour tags and orientation, on every H.264 clip
in ../shared and on HEVC (8- and 10-bit), MPEG-TS and damaged input made from them; end to end,
a lossless render decoded by NVDEC equals one decoded on the CPU."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
import torch

from gpen_video.media.colour import frame_planes
from gpen_video.media.decoders import choose_decoder
from gpen_video.media.demux import demux
from gpen_video.media.nvdec import nvdec_module
from gpen_video.media.probe import probe

from . import corpus
from .conftest import SMALL_GPEN_SIZE, assert_same_restoration, shared_file
from .test_preservation import gpen_video

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(torch.cuda.is_available() and nvdec_module() is None,
                       reason="needs PyNvVideoCodec (pip install 'gpen-video[nvdec]')"),
]

H264_CLIPS = ["multi_face_crowd_facenet_pytorch.mp4", "multi_face_event_video_01.mp4",
              "multi_face_hikers_video_02.mp4", "old_footage_chaplin_moviepy.mp4",
              "phone_portrait_selfie_liveportrait_d13.mp4", "phone_selfie_rotation90_new_face_video-90.mp4",
              "talking_head_speech_liveportrait_d20.mp4", "talking_head_speech_retalking2.mp4",
              "talking_head_vfr_retalking1.mp4"]
TAGS = ("width", "height", "colorspace", "color_range", "color_primaries", "color_trc", "pts", "time_base")


def _assert_nvdec_equals_libavcodec(path: Path) -> int:
    """Demux ``path`` twice, decoding on the CPU and with NVDEC: the same pictures. Returns their count."""
    info = probe(path)
    choice = choose_decoder("nvdec", info.traits, 0, info.display_matrix)
    assert choice.name == "nvdec"
    count = 0
    with av.open(str(path)) as a, av.open(str(path)) as b:
        for cpu, gpu in zip(demux(a, set()), demux(b, set(), decoding=choice), strict=True):
            where = f"{path.name} frame {cpu.index}"
            assert (cpu.index, cpu.damage, cpu.layout) == (gpu.index, gpu.damage, gpu.layout), where
            assert cpu.frame.format.name == gpu.frame.format.name, where
            assert [getattr(cpu.frame, t) for t in TAGS] == [getattr(gpu.frame, t) for t in TAGS], where
            planes = frame_planes(cpu.frame)
            for x, y in zip(planes, frame_planes(gpu.frame), strict=True):
                np.testing.assert_array_equal(x, y, where)
            staged = gpu.buffers.take_staged()  # the workers' buffer, packed on the GPU
            assert staged.is_cuda, where
            np.testing.assert_array_equal(staged.cpu().numpy(), np.concatenate([p.reshape(-1) for p in planes]), where)
            count += 1
    return count


@pytest.mark.parametrize("name", H264_CLIPS)
def test_nvdec_decodes_every_h264_clip_exactly_as_libavcodec(name):
    assert _assert_nvdec_equals_libavcodec(shared_file(f"media/videos/{name}")) > 0


def test_nvdec_decodes_hevc_and_transport_streams_exactly_as_libavcodec(tmp_path):
    made = [corpus.encoded(tmp_path / "hevc.mp4", "libx265", "yuv420p", frames=30),  # B-frames, reordered
            corpus.hdr10_hevc(tmp_path / "main10.mp4", frames=12),  # 10-bit: P016 surfaces
            corpus.broadcast_ts(tmp_path / "broadcast.ts")]  # Annex B as stored: no filter
    assert [_assert_nvdec_equals_libavcodec(path) for path in made] == [30, 12, 31]


def test_auto_picks_nvdec_for_h264_and_the_cpu_for_what_it_cannot_decode():
    for name, expected in [("talking_head_speech_liveportrait_d20.mp4", "nvdec"),
                           ("talking_head_speech_mpeg4_sadtalker_katiehill.mp4", "cpu")]:
        info = probe(shared_file(f"media/videos/{name}"))
        assert choose_decoder("auto", info.traits, 0, info.display_matrix).name == expected, name


def test_damaged_input_keeps_the_same_frames_and_times_with_nvdec(tmp_path):
    """Garbage in the middle of the video data: NVDEC conceals it its own way, but every time
    the CPU decoder shows a frame at, NVDEC's output shows one too, and nothing crashes."""
    clip = shared_file("media/videos/talking_head_speech_liveportrait_d20.mp4")
    data = bytearray(clip.read_bytes())
    noise = np.random.default_rng(0).integers(0, 256, 2000, dtype=np.uint8).tobytes()
    for at in (0.35, 0.6):
        start = int(len(data) * at)
        data[start : start + len(noise)] = noise
    damaged = tmp_path / "damaged.mp4"
    damaged.write_bytes(bytes(data))
    info = probe(damaged)
    choice = choose_decoder("nvdec", info.traits, 0, info.display_matrix)
    with av.open(str(damaged)) as a, av.open(str(damaged)) as b:
        cpu = [f.frame.pts for f in demux(a, set())]
        gpu = [f.frame.pts for f in demux(b, set(), decoding=choice)]
    assert gpu == cpu


def test_frames_of_packets_the_container_flags_as_damaged_are_marked_damaged_with_nvdec_too(tmp_path):
    """A transport stream with lost packets: libavcodec marks the frames it concealed, NVDEC says
    nothing of its own, so the frames of every flagged packet are marked: the summary counts them."""
    lossy = corpus.lossy_ts(tmp_path / "lossy.ts")
    info = probe(lossy)
    choice = choose_decoder("nvdec", info.traits, 0, info.display_matrix)
    with av.open(str(lossy)) as a, av.open(str(lossy)) as b:
        cpu = list(demux(a, set()))
        gpu = list(demux(b, set(), decoding=choice))
    with av.open(str(lossy)) as c:
        flagged = {p.pts for p in c.demux(video=0) if p.size and p.is_corrupt}
    assert [f.frame.pts for f in gpu] == [f.frame.pts for f in cpu]
    assert flagged and any(f.damage for f in cpu)
    assert {f.frame.pts for f in gpu if f.damage == "corrupt"} == flagged


def test_a_lossless_render_decoded_by_nvdec_equals_one_decoded_on_the_cpu(small_gpen, tmp_path):
    clip = corpus.excerpt(tmp_path / "clip.mp4", shared_file("media/videos/talking_head_speech_liveportrait_d20.mp4"),
                          1.0)
    runs = {}
    for decoder in ("cpu", "nvdec"):
        out, tracks = tmp_path / f"{decoder}.mkv", tmp_path / f"{decoder}.json"
        run = gpen_video(small_gpen, clip, out, "--codec", "ffv1", "--decoder", decoder, "--tracks-out", tracks,
                         "--verbose",
                         device="cuda")
        assert run.returncode == 0, run.stderr
        runs[decoder] = run.stderr
    assert "decoded by NVDEC on GPU 0" in runs["nvdec"] and "decoded on the CPU" in runs["cpu"]
    assert_same_restoration(tmp_path / "cpu.mkv", tmp_path / "cpu.json", tmp_path / "nvdec.mkv",
                            tmp_path / "nvdec.json", crop_size=SMALL_GPEN_SIZE)
