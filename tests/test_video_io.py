"""Video I/O details users check: colour tags and matrices, pixel formats, containers, temp files."""

from __future__ import annotations

import re
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from gpen_video.errors import OutputError
from gpen_video.media.colour import frame_planes, planes_to_frame
from gpen_video.media.demux import demux, read_frames
from gpen_video.media.frames import SourceFrame
from gpen_video.media.opening import open_input
from gpen_video.media.probe import probe
from gpen_video.media.writer import VideoWriter
from gpen_video.options import RestoreOptions

from .conftest import write_clip

PATCHES = np.array([[235, 16, 16], [16, 235, 16], [16, 16, 235], [235, 235, 16], [16, 235, 235], [128, 128, 128],
                    [200, 120, 60], [40, 90, 180]], dtype=np.uint8)


def make_clip(path: Path, colorspace: int, color_range: int, frames: int = 6) -> np.ndarray:
    """Colour patches encoded losslessly (x264, qp 0, yuv444p) with the given matrix and range tags."""
    image = np.repeat(np.repeat(PATCHES[None], 64, axis=0), 64, axis=1).reshape(64, 8 * 64, 3)
    matrix = {1: 1, 6: 5}[colorspace]  # AVColorSpace -> swscale matrix
    tags = {"color_range": color_range, "colorspace": colorspace, "color_primaries": colorspace,
            "color_trc": colorspace}
    write_clip(path, [image] * frames, pix_fmt="yuv444p", options={"qp": "0"}, tags=tags,
               convert=lambda f: f.reformat(format="yuv444p", src_colorspace=matrix, dst_colorspace=matrix,
                                            src_color_range=2, dst_color_range=color_range))
    return image


def rewrite(src: Path, dst: Path, settings: RestoreOptions, touch_everything: bool) -> None:
    """Run frames through the writer; with ``touch_everything`` every pixel takes the RGB path."""
    container = open_input(src)
    writer = VideoWriter(dst, container, probe(src), settings)
    for item in demux(container, writer.copied_streams):
        if isinstance(item, SourceFrame):
            restored = None
            if touch_everything:  # every pixel to RGB and back, as restored faces go
                samples = [torch.from_numpy(p.copy())[None] for p in frame_planes(item.frame)]
                rgb = item.layout.to_rgb(samples)
                restored = planes_to_frame([p[0].numpy() for p in item.layout.to_planes(rgb, samples[0].dtype)],
                                           item.frame)
            writer.write(item, restored)
        else:
            writer.write_packet(item)
    writer.close()
    container.close()


@pytest.mark.parametrize(("colorspace", "color_range"), [(1, 1), (6, 1), (1, 2)],
                         ids=["bt709-limited", "bt601-limited", "bt709-full"])
def test_colours_and_tags_survive_the_rgb_round_trip(tmp_path, colorspace, color_range):
    src, dst = tmp_path / "in.mp4", tmp_path / "out.mp4"
    expected = make_clip(src, colorspace, color_range)
    decoded = next(read_frames(src)).rgb()
    assert np.abs(decoded.astype(int) - expected).max() <= 2  # the decoder uses the tagged matrix and range

    rewrite(src, dst, RestoreOptions(crf=0, preset="ultrafast"), touch_everything=True)
    with av.open(str(src)) as c:
        pix_fmt_in = c.streams.video[0].codec_context.pix_fmt  # yuvj444p for full range
    with av.open(str(dst)) as c:
        cc = c.streams.video[0].codec_context
        assert (cc.colorspace, cc.color_range, cc.color_primaries, cc.color_trc) == (colorspace, color_range,
                                                                                 colorspace, colorspace)
        assert cc.pix_fmt == pix_fmt_in  # the input's pixel format is kept
    out = next(read_frames(dst)).rgb()
    assert np.abs(out.astype(int) - decoded).max() <= 2  # our RGB -> YUV -> RGB round trip


@pytest.mark.parametrize("threads", [0, 3])
def test_x264_encodes_whole_frames_in_parallel_with_the_threads_asked_for(tmp_path, threads):
    src, dst = tmp_path / "in.mp4", tmp_path / "out.mp4"
    make_clip(src, 1, 1, frames=30)
    rewrite(src, dst, RestoreOptions(preset="ultrafast", encoder_threads=threads), touch_everything=False)
    # x264 writes its options into the stream (an SEI message)
    options = re.search(rb"x264 - core .*? threads=(\d+) lookahead_threads=\d+ sliced_threads=(\d)", dst.read_bytes())
    assert options is not None
    assert options.group(2) == b"0"  # frame threads, not slices of one frame
    if threads:
        assert int(options.group(1)) == threads


def test_untouched_frames_are_bit_exact_with_a_lossless_codec(tmp_path):
    src, dst = tmp_path / "in.mp4", tmp_path / "out.mkv"
    make_clip(src, 1, 1)
    rewrite(src, dst, RestoreOptions(codec="ffv1"), touch_everything=False)
    with av.open(str(src)) as a, av.open(str(dst)) as b:
        for fa, fb in zip(a.decode(video=0), b.decode(video=0), strict=True):
            for pa, pb in zip(fa.planes, fb.planes):
                assert np.array_equal(np.frombuffer(pa, np.uint8).reshape(pa.height, -1)[:, : pa.width],
                                      np.frombuffer(pb, np.uint8).reshape(pb.height, -1)[:, : pb.width])


@pytest.mark.parametrize(("name", "codec", "message"), [
    ("out.avi", None, "unsupported output extension"),
    ("out.mov", "ffv1", "cannot hold ffv1"),
    ("out.mp4", "no_such_codec", "not available"),
    ("out.webm", "libx264", "cannot hold h264"),
])
def test_impossible_outputs_fail_early_and_leave_nothing(tmp_path, name, codec, message):
    src = tmp_path / "in.mp4"
    make_clip(src, 1, 1, frames=2)
    with open_input(src) as container, pytest.raises(OutputError, match=message):
        VideoWriter(tmp_path / name, container, probe(src), RestoreOptions(codec=codec))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


def test_ten_bit_video_stays_ten_bit(tmp_path):
    """4:4:4 so that chroma subsampling at the patch edges does not blur what is compared."""
    src, dst = tmp_path / "in.mp4", tmp_path / "out.mp4"
    image = np.repeat(np.repeat(PATCHES[None], 64, axis=0), 64, axis=1).reshape(64, 8 * 64, 3)
    write_clip(src, [image] * 3, pix_fmt="yuv444p10le", options={"qp": "0"},
               tags={"color_range": 1, "colorspace": 1, "color_primaries": 1, "color_trc": 1},
               convert=lambda f: f.reformat(format="yuv444p10le", src_colorspace=1, dst_colorspace=1,
                                            src_color_range=2, dst_color_range=1))
    decoded = next(read_frames(src)).rgb()
    rewrite(src, dst, RestoreOptions(crf=0, preset="ultrafast"), touch_everything=True)
    with av.open(str(dst)) as c:
        assert c.streams.video[0].codec_context.pix_fmt == "yuv444p10le"
    assert np.abs(next(read_frames(dst)).rgb().astype(int) - decoded).max() <= 2


def test_audio_the_container_cannot_hold_is_re_encoded_with_a_warning(tmp_path):
    src, dst = tmp_path / "in.mov", tmp_path / "out.mp4"
    rate, seconds = 48000, 2
    with av.open(str(src), "w") as c:
        video = c.add_stream("libx264", rate=25)
        video.width, video.height, video.pix_fmt = 64, 64, "yuv420p"
        audio = c.add_stream("pcm_s16le", rate=rate)
        audio.layout = "stereo"
        tone = (np.sin(2 * np.pi * 440 * np.arange(rate * seconds) / rate) * 8000).astype(np.int16)
        for i in range(25 * seconds):
            frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), i * 4, np.uint8), format="rgb24")
            frame.pts = i
            for packet in video.encode(frame):
                c.mux(packet)
        for start in range(0, len(tone), 1024):
            chunk = np.repeat(tone[start : start + 1024][None], 2, axis=0).T.reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(chunk), format="s16", layout="stereo")
            frame.sample_rate, frame.pts = rate, start
            for packet in audio.encode(frame):
                c.mux(packet)
        for stream in (video, audio):
            for packet in stream.encode(None):
                c.mux(packet)
    container = open_input(src)
    writer = VideoWriter(dst, container, probe(src), RestoreOptions(preset="ultrafast"))
    for item in demux(container, writer.copied_streams):
        if isinstance(item, SourceFrame):
            writer.write(item)
        else:
            writer.write_packet(item)
    writer.close()
    container.close()
    assert writer.warnings == ["audio stream #1 (pcm_s16le) cannot be copied into .mp4; re-encoded as aac at 256 kb/s"]
    with av.open(str(dst)) as c:
        assert c.streams.audio[0].codec_context.name == "aac"
        samples = np.concatenate([f.to_ndarray()[0] for f in c.decode(audio=0)])
    assert abs(len(samples) - rate * seconds) <= 2048
    assert np.abs(samples).max() > 0.1  # the tone survived


def test_hdr10_boxes_go_into_the_video_sample_entry_once_and_ffmpeg_reads_them(tmp_path):
    """Added to a finished MP4 (twice: a second call adds nothing), the boxes leave the samples
    where they were and every decoded frame carries the metadata; a Matroska file is refused."""
    from fractions import Fraction

    from gpen_video.media.hdr import HdrMetadata
    from gpen_video.media.isobmff import BoxError, add_sample_entry_boxes

    from . import corpus

    clip = corpus.with_cover_art(tmp_path / "clip.mp4")  # a cover picture beside the video: two picture streams
    with av.open(str(clip)) as container:
        before = [bytes(p) for p in container.demux(video=0) if p.size]
    hdr = HdrMetadata(red=(Fraction(17, 25), Fraction(8, 25)), green=(Fraction(53, 200), Fraction(69, 100)),
                      blue=(Fraction(3, 20), Fraction(3, 50)), white=(Fraction(3127, 10000), Fraction(329, 1000)),
                      luminance=(Fraction(1, 200), Fraction(4000)), light_level=(1000, 400))
    size = clip.stat().st_size
    add_sample_entry_boxes(clip, hdr.sample_entry_boxes())
    add_sample_entry_boxes(clip, hdr.sample_entry_boxes())
    assert clip.stat().st_size == size + 8 + 24 + 8 + 4
    with av.open(str(clip)) as container:
        assert [bytes(p) for p in container.demux(video=0) if p.size] == before
    with av.open(str(clip)) as container:
        assert all(HdrMetadata.of(frame) == hdr for frame in container.decode(video=0))
    mkv = tmp_path / "clip.mkv"
    write_clip(mkv, np.zeros((2, 32, 32, 3), np.uint8), 25)
    with pytest.raises(BoxError):
        add_sample_entry_boxes(mkv, hdr.sample_entry_boxes())


def _crc_holds(data: bytes, element_id: bytes) -> bool:
    """Whether the first ``element_id`` element's CRC-32 child matches the rest of its payload."""
    import zlib

    at = data.index(element_id)
    while data[at - 3 : at] == b"\x53\xab\x84":  # a SeekHead's SeekID naming the element, not the element
        at = data.index(element_id, at + 1)
    at += len(element_id)
    width = next(w for w in range(1, 9) if data[at] & (0x80 >> (w - 1)))
    size = int.from_bytes(data[at : at + width], "big") & ((1 << 7 * width) - 1)
    payload = data[at + width : at + width + size]
    assert payload[:2] == b"\xbf\x84"  # FFmpeg writes a CRC-32 first
    return int.from_bytes(payload[2:6], "little") == zlib.crc32(payload[6:])


def test_hdr10_goes_into_a_matroska_colour_without_moving_a_cluster(tmp_path):
    """The elements take the room of the Void before Tracks: same length, same packets, every
    decoded frame carries the metadata, the CRCs hold; a file without the room is left as it was."""
    from fractions import Fraction

    from gpen_video.media.hdr import HdrMetadata
    from gpen_video.media.matroska import MatroskaError, add_hdr_metadata

    from . import corpus

    hdr = HdrMetadata(red=(Fraction(17, 25), Fraction(8, 25)), green=(Fraction(53, 200), Fraction(69, 100)),
                      blue=(Fraction(3, 20), Fraction(3, 50)), white=(Fraction(3127, 10000), Fraction(329, 1000)),
                      luminance=(Fraction(1, 200), Fraction(4000)), light_level=(1000, 400))
    clip = tmp_path / "clip.mkv"
    write_clip(clip, np.zeros((3, 32, 32, 3), np.uint8), 25)
    with av.open(str(clip)) as container:
        packets = [bytes(p) for p in container.demux(video=0) if p.size]
    before = clip.read_bytes()
    add_hdr_metadata(clip, hdr)
    after = clip.read_bytes()
    cluster = before.index(b"\x1f\x43\xb6\x75")
    assert len(after) == len(before) and after[cluster:] == before[cluster:]  # only the front was rewritten
    assert after[:cluster] != before[:cluster]
    add_hdr_metadata(clip, hdr)
    assert clip.read_bytes() == after
    with av.open(str(clip)) as container:
        assert [bytes(p) for p in container.demux(video=0) if p.size] == packets
    with av.open(str(clip)) as container:
        for frame in container.decode(video=0):
            got = HdrMetadata.of(frame)
            assert got.light_level == (1000, 400)
            assert np.allclose(np.array([*got.red, *got.white, *got.luminance], float),
                               np.array([*hdr.red, *hdr.white, *hdr.luminance], float), rtol=1e-6)
    assert _crc_holds(after, b"\x16\x54\xae\x6b") and _crc_holds(after, b"\x11\x4d\x9b\x74")  # Tracks, SeekHead

    crowded = corpus.rich_mkv(tmp_path / "rich.mkv")  # chapters, attachments, tags: a small Void
    untouched = crowded.read_bytes()
    with pytest.raises(MatroskaError, match="Void before Tracks"):
        add_hdr_metadata(crowded, hdr)
    assert crowded.read_bytes() == untouched
