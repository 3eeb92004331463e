"""Nothing in the file is lost without a word: streams, their flags, chapters, attachments, cover
art, timecode, QuickTime keys, codec tags, pixel formats and alpha, on files built from the real
media (tests/corpus.py), through the real command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from gpen_video.media.colour import display_matrix, frame_planes
from gpen_video.media.demux import read_frames
from gpen_video.media.hdr import HdrMetadata

from . import corpus
from .conftest import SMALL_GPEN_SIZE, decoded_planes, paste_region, plane_region, shared_file


def gpen_video(small_gpen: Path, *args, timeout: int = 300, device: str = "cpu") -> subprocess.CompletedProcess:
    """The CLI (on the CPU unless told) with the small golden GPEN and the real mobile detector."""
    command = [sys.executable, "-m", "gpen_video.cli", *map(str, args), "--device", device, "--weights", small_gpen,
               "--detector", "retinaface-mobile", "--detector-weights",
               shared_file("weights/retinaface_mobilenet0.25.pth"), "--batch-size", "4"]
    return subprocess.run(list(map(str, command)), capture_output=True, text=True, timeout=timeout)


#: Lines that are notes, not warnings: GPEN compiling, GPEN on the CPU. (NVIDIA's video library
#: logs its driver on every NVDEC run; those lines must not print at all.)
_NOTES = ("gpen-video: compiling", "gpen-video: restoring on the CPU")


def _warnings(run: subprocess.CompletedProcess) -> list[str]:
    """The warning lines (not errors, not notes)."""
    return [line for line in run.stderr.splitlines()
            if line.startswith("gpen-video: ") and "error" not in line and not line.startswith(_NOTES)]


def named_then_refused(small_gpen: Path, src: Path, out: Path, message: str, *args) -> None:
    """Restoring ``src`` into ``out`` succeeds with ``message`` as its one warning; the same run with
    --strict is refused with it, and writes nothing."""
    run = gpen_video(small_gpen, src, out, *args)
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == [f"gpen-video: {message}"]
    refused = out.with_name(f"strict{out.suffix}")
    strict = gpen_video(small_gpen, src, refused, *args, "--strict")
    assert strict.returncode == 1 and strict.stderr.strip() == f"gpen-video: error: {message} (refused: --strict)"
    assert not refused.exists()


def _streams(path: Path) -> list[tuple]:
    """Each stream's type, disposition flags, language and title."""
    with av.open(str(path)) as container:
        return [(s.type, int(s.disposition), s.metadata.get("language"), s.metadata.get("title"))
                for s in container.streams]


def _packets(path: Path, index: int) -> list[tuple]:
    with av.open(str(path)) as container:
        stream = container.streams[index]
        return [(p.pts * p.time_base if p.pts is not None else None, bytes(p))
                for p in container.demux(stream) if p.size]


def _chapters(path: Path) -> list[tuple]:
    with av.open(str(path)) as container:
        return [(float(c["start"] * c["time_base"]), float(c["end"] * c["time_base"]), c["metadata"].get("title"))
                for c in container.chapters()]


def test_matroska_keeps_every_track_flag_chapter_and_attachment(small_gpen, tmp_path):
    src = corpus.rich_mkv(tmp_path / "in.mkv")
    out = tmp_path / "out.mkv"
    run = gpen_video(small_gpen, src, out, "--preset", "ultrafast")
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == []  # nothing to say: everything fits
    assert _streams(out) == _streams(src)
    assert _streams(src)[1:4] == [("audio", 1, "eng", "Main"), ("audio", 64, "fra", "Commentary"),
                                  ("subtitle", 65, "deu", None)]  # default; forced; default + forced
    for index in (1, 2, 3):  # both audio tracks and the subtitle, packet for packet, on time
        assert _packets(out, index) == _packets(src, index)
    assert _chapters(out) == _chapters(src) == [(0.0, 0.8, "Intro"), (0.8, 1.6, "Talk")]
    with av.open(str(out)) as container:
        attachment = container.streams[4]
        assert (attachment.name, attachment.mimetype, bytes(attachment.data)) == (
            "DejaVuSans.ttf", "application/x-truetype-font", corpus.FONT)
        assert container.metadata["title"] == "Interview, take 3"


def test_what_mp4_cannot_hold_is_named_and_the_rest_kept(small_gpen, tmp_path):
    src = corpus.rich_mkv(tmp_path / "in.mkv")
    out = tmp_path / "out.mp4"
    run = gpen_video(small_gpen, src, out, "--preset", "ultrafast")
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == [
        "gpen-video: subtitle stream #3 (subrip) cannot be copied into .mp4; it is left out (.mkv can hold it)",
        "gpen-video: attachment 'DejaVuSans.ttf' (application/x-truetype-font) is left out: .mp4 cannot hold "
        "attachments (.mkv can)"]
    streams = _streams(out)
    assert [(t, d, lang) for t, d, lang, _ in streams[:3]] == [("video", 1, "und"), ("audio", 1, "eng"),
                                                              ("audio", 64, "fra")]
    for index in (1, 2):  # the same packets, at the same times to Matroska's millisecond
        (times_out, data_out), (times_in, data_in) = zip(*_packets(out, index)), zip(*_packets(src, index))
        assert data_out == data_in
        assert max(abs(a - b) for a, b in zip(times_out, times_in, strict=True)) <= 0.001
    assert [title for *_, title in _chapters(out)] == ["Intro", "Talk"]
    strict = gpen_video(small_gpen, src, tmp_path / "strict.mp4", "--strict")
    assert strict.returncode == 1
    assert strict.stderr.strip() == ("gpen-video: error: subtitle stream #3 (subrip) cannot be copied into .mp4; "
                                     "it is left out (.mkv can hold it) (refused: --strict)")
    assert not (tmp_path / "strict.mp4").exists()


@pytest.mark.parametrize("ext", [".mp4", ".mov"])
def test_mp4_subtitles_are_copied_with_their_language_and_flag(small_gpen, tmp_path, ext):
    src = corpus.subtitled_mp4(tmp_path / "in.mp4")
    out = tmp_path / f"out{ext}"
    run = gpen_video(small_gpen, src, out, "--preset", "ultrafast")
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == []
    assert _streams(src)[2] == ("subtitle", 1, "deu", None)
    # MOV spells German the bibliographic way (FFmpeg writes MOV languages from QuickTime's old list)
    assert _streams(out)[2] == ("subtitle", 1, "deu" if ext == ".mp4" else "ger", None)
    assert _packets(out, 2) == _packets(src, 2)
    assert any(data.endswith(b"Guten Tag") for _, data in _packets(out, 2))

def test_a_camera_mov_keeps_its_timecode_reel_and_quicktime_keys(small_gpen, tmp_path):
    src = corpus.quicktime_mov(tmp_path / "in.mov")
    out = tmp_path / "out.mov"
    run = gpen_video(small_gpen, src, out, "--preset", "ultrafast")
    assert run.returncode == 0, run.stderr
    with av.open(str(src)) as a, av.open(str(out)) as b:
        keys = {k: v for k, v in a.metadata.items() if k.startswith("com.apple.quicktime.")}
        assert len(keys) == 4 and {k: b.metadata.get(k) for k in keys} == keys
        timecode_in = next(s for s in a.streams if s.type == "data")
        timecode_out = next(s for s in b.streams if s.type == "data")
        assert (timecode_out.metadata["timecode"], timecode_out.metadata["reel_name"]) == ("01:02:03:04", "A001C003")
        assert timecode_in.metadata["reel_name"] == "A001C003"


@pytest.mark.parametrize("ext", [".mp4", ".mov"])
def test_a_gopro_clip_keeps_its_telemetry_track(small_gpen, tmp_path, ext):
    """GPMF telemetry (accelerometer, gyroscope, GPS) is what action-camera editors overlay and
    stabilise with: it must come out byte for byte, at its times."""
    src = corpus.gopro_mp4(tmp_path / "in.mp4")
    out = tmp_path / f"out{ext}"
    run = gpen_video(small_gpen, src, out, "--preset", "ultrafast")
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == []
    with av.open(str(out)) as container:
        telemetry = container.streams[2]
        assert (telemetry.type, telemetry.name, telemetry.metadata.get("handler_name")) == (
            "data", "bin_data", "GoPro MET")
    assert len(_packets(src, 2)) == 3 and _packets(out, 2) == _packets(src, 2)
    assert out.read_bytes().count(b"gpmd") >= 1  # the sample entry a GoPro tool looks for


def test_an_apple_metadata_track_is_named_by_its_sample_entry_and_refused_under_strict(small_gpen, tmp_path):
    """An iPhone's timed-metadata track (``mebx``) is no telemetry gpen-video knows how to keep: it
    is named for what it is, not as the "bin_data" FFmpeg calls every data track."""
    gopro = corpus.gopro_mp4(tmp_path / "gopro.mp4").read_bytes()
    entry = b"\x00\x00\x00\x14gpmd"  # the track's sample entry: the same track, as an iPhone marks its metadata
    assert gopro.count(entry) == 1
    src = tmp_path / "in.mov"
    src.write_bytes(gopro.replace(entry, b"\x00\x00\x00\x14mebx"))
    out = tmp_path / "out.mov"
    named_then_refused(small_gpen, src, out, "data stream #2 (mebx: Apple timed metadata) is left out: of the data "
                       "tracks, gpen-video keeps timecode and GoPro telemetry (gpmd) only", "--preset", "ultrafast")
    with av.open(str(out)) as container:
        assert [s.type for s in container.streams] == ["video", "audio"]


@pytest.mark.parametrize(("ext", "how"), [(".mp4", "stream"), (".mkv", "attachment")])
def test_cover_art_travels(small_gpen, tmp_path, ext, how):
    src = corpus.with_cover_art(tmp_path / "in.mp4")
    out = tmp_path / f"out{ext}"
    run = gpen_video(small_gpen, src, out, "--preset", "ultrafast")
    assert run.returncode == 0, run.stderr
    picture = _packets(src, 2)[0][1]
    with av.open(str(out)) as container:
        covers = [s for s in container.streams.video if s.disposition & av.stream.Disposition.attached_pic]
        assert len(covers) == 1
        if how == "attachment":  # Matroska stores cover art as a file named cover.*
            assert covers[0].metadata["filename"] == "cover.jpg"
        cover = covers[0].index  # read while the file is open: a closed container's streams are gone
    assert _packets(out, cover)[0][1] == picture
    with av.open(str(src)) as a, av.open(str(out)) as b:  # the restored video is still the first, whole
        assert sum(1 for _ in b.decode(video=0)) == sum(1 for _ in a.decode(video=0)) > 25


def test_an_audio_file_with_cover_art_has_no_video_to_restore(small_gpen, tmp_path):
    src = corpus.with_cover_art(tmp_path / "song.mp3", audio_only=True)
    run = gpen_video(small_gpen, src, tmp_path / "out.mp4")
    assert run.returncode == 1
    assert run.stderr.strip() == f"gpen-video: error: {src} has no video stream (only cover art)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["song.mp3"]


def test_hevc_follows_the_input_and_keeps_its_hvc1_tag(small_gpen, tmp_path):
    src = corpus.encoded(tmp_path / "in.mp4", "libx265", "yuv420p10le", tag="hvc1",
                         options={"preset": "ultrafast", "x265-params": "log-level=error"})
    out = tmp_path / "out.mp4"
    run = gpen_video(small_gpen, src, out, "--preset", "ultrafast")
    assert run.returncode == 0, run.stderr
    with av.open(str(out)) as container:
        video = container.streams.video[0].codec_context
        assert (video.name, video.codec_tag, video.pix_fmt) == ("hevc", "hvc1", "yuv420p10le")


def test_prores_4444_keeps_its_profile_and_its_alpha(small_gpen, tmp_path):
    src = corpus.encoded(tmp_path / "in.mov", "prores_ks", "yuva444p10le", alpha=True, options={"profile": "4444"},
                         tags={"color_primaries": 1, "color_trc": 1, "colorspace": 1})
    out = tmp_path / "out.mov"
    run = gpen_video(small_gpen, src, out)
    assert run.returncode == 0, run.stderr
    # FFmpeg decodes ProRes 4444 to 12 bits and its encoder takes 10: said, not hidden.
    assert _warnings(run) == ["gpen-video: prores_ks cannot store yuva444p12le; encoded as yuva444p10le, "
                              "losing 12-bit samples (stored as 10-bit)"]
    with av.open(str(src)) as a, av.open(str(out)) as b:
        assert b.streams.video[0].profile == a.streams.video[0].profile == "4444"
        for fa, fb in zip(a.decode(video=0), b.decode(video=0), strict=True):
            assert fb.format.name == "yuva444p12le"
            alpha_in, alpha_out = frame_planes(fa)[3], frame_planes(fb)[3]
            assert np.abs(alpha_in.astype(int) - alpha_out).max() <= 4  # a 10-bit step, at 12 bits
            assert alpha_in.min() < 100 and alpha_in.max() > 4000  # the ramp, not an opaque plane
            # every frame's header keeps the colour tags, restored or not
            assert (fb.color_primaries, fb.color_trc, fb.colorspace) == (1, 1, 1)


def test_mjpeg_422_stays_422_and_full_range_in_ffv1(small_gpen, tmp_path):
    src = corpus.encoded(tmp_path / "in.mkv", "mjpeg", "yuvj422p", options={"q:v": "2"})
    out = tmp_path / "out.mkv"
    run = gpen_video(small_gpen, src, out, "--codec", "ffv1", "--threshold", "0.9999")  # no face: all untouched
    assert run.returncode == 0, run.stderr
    with av.open(str(src)) as a, av.open(str(out)) as b:
        assert b.streams.video[0].codec_context.pix_fmt == "yuv422p"
        for fa, fb in zip(a.decode(video=0), b.decode(video=0), strict=True):
            assert fb.color_range == 2  # full range, as JPEG samples are
            assert all(np.array_equal(x, y) for x, y in zip(frame_planes(fa), frame_planes(fb), strict=True))


def test_pcm_in_avi_becomes_aac_in_mp4(small_gpen, tmp_path):
    src = corpus.pcm_avi(tmp_path / "in.avi")
    out = tmp_path / "out.mp4"
    run = gpen_video(small_gpen, src, out, "--preset", "ultrafast")
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == ["gpen-video: the input's mjpeg video is not written back as mjpeg; it is encoded as "
                              "h264 (libx264) (--codec names another encoder)",
                              "gpen-video: audio stream #1 (pcm_s16le) cannot be copied into .mp4; "
                              "re-encoded as aac at 256 kb/s"]
    with av.open(str(out)) as container:
        assert container.streams.audio[0].codec_context.name == "aac"
        assert container.streams.audio[0].layout.name == "stereo"
    assert abs(_audio_seconds(out) - _audio_seconds(src)) < 0.05  # AAC's priming and padding aside


def _audio_seconds(path: Path) -> float:
    with av.open(str(path)) as container:
        return sum(frame.samples for frame in container.decode(audio=0)) / container.streams.audio[0].rate


def _matrix(path: Path) -> tuple[int, ...] | None:
    with av.open(str(path)) as container:
        return display_matrix(next(container.decode(video=0)))


@pytest.mark.parametrize("flip", ["hflip", "vflip"])
def test_a_mirrored_display_matrix_is_honoured_and_written_back(small_gpen, tmp_path, flip):
    """Faces are found on the picture as players show it (turned, then mirrored), and the output
    carries the input's matrix unchanged, mirroring included."""
    src = corpus.mirrored(tmp_path / "in.mp4", **{flip: True})
    shown = next(read_frames(shared_file(corpus.PHONE))).rgb()  # the unmirrored clip, upright
    assert np.array_equal(next(read_frames(src)).rgb(), shown[:, ::-1] if flip == "hflip" else shown[::-1])
    out = tmp_path / "out.mp4"
    run = gpen_video(small_gpen, src, out, "--preset", "ultrafast", "--tracks-out", tmp_path / "faces.json")
    assert run.returncode == 0, run.stderr
    assert _matrix(out) == _matrix(src) != _matrix(shared_file(corpus.PHONE))
    if flip == "hflip":  # a mirrored face is still an upright face: found on nearly every frame
        frames = json.loads((tmp_path / "faces.json").read_text())["frames"]
        assert sum(bool(f["faces"]) for f in frames) >= 0.9 * len(frames) > 50


def _hdr(path: Path) -> tuple:
    """The first frame's HDR10 metadata, transfer, primaries and pixel format."""
    with av.open(str(path)) as container:
        frame = next(container.decode(video=0))
        return HdrMetadata.of(frame), frame.color_trc, frame.color_primaries, frame.format.name


@pytest.mark.parametrize(("ext", "codec", "encoded_as"), [(".mp4", None, "hevc"), (".webm", None, "av1"),
                                                          (".mp4", "libx264", "h264")])
def test_hdr10_metadata_travels_to_every_encoder_that_can_carry_it(small_gpen, tmp_path, ext, codec, encoded_as):
    src = corpus.hdr10_hevc(tmp_path / "in.mp4")
    expected, *tags = _hdr(src)
    assert expected.luminance == (Fraction(50, 10000), Fraction(1000)) and expected.light_level == (1000, 400)
    out = tmp_path / f"out{ext}"
    run = gpen_video(small_gpen, src, out, *(["--codec", codec] if codec else []))
    assert run.returncode == 0, run.stderr
    if ext == ".webm":  # VP9 here takes 8 bits only: AV1 keeps the 10-bit PQ picture
        assert _warnings(run) == ["gpen-video: .webm cannot hold the input's hevc video; it is encoded as av1 "
                                  "(libsvtav1) (--codec names another encoder)"]
    else:
        assert _warnings(run) == []
    got, *got_tags = _hdr(out)
    with av.open(str(out)) as container:
        assert container.streams.video[0].codec_context.codec.canonical_name == encoded_as
    assert got_tags == tags == [16, 9, "yuv420p10le"]
    _assert_same_hdr(got, expected)


def _assert_same_hdr(got: HdrMetadata, expected: HdrMetadata) -> None:
    """The same HDR10 metadata, to the 1e-4 that decimals (SVT-AV1) and 32-bit floats (Matroska) keep."""
    for name in ("red", "green", "blue", "white", "luminance"):
        assert np.allclose(np.array(getattr(got, name), float), np.array(getattr(expected, name), float),
                           rtol=1e-4, atol=1e-4), name
    assert got.light_level == expected.light_level


@pytest.mark.parametrize("ext", [".mov", ".mkv"])
def test_prores_keeps_hdr10_metadata_in_the_file_header(small_gpen, tmp_path, ext):
    """ProRes has no place for HDR10's mastering display and light levels in its bitstream: the
    file's header holds them (MOV's sample entry boxes, Matroska's Colour elements), and FFmpeg
    reads them back into every decoded frame."""
    src = corpus.hdr10_hevc(tmp_path / "in.mp4")
    expected, *tags = _hdr(src)
    out = tmp_path / f"out{ext}"
    run = gpen_video(small_gpen, src, out, "--codec", "prores_ks")
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == []
    got, *got_tags = _hdr(out)
    assert got_tags == [*tags[:2], "yuv422p10le"]
    _assert_same_hdr(got, expected)
    with av.open(str(out)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 12  # the file reads to its end


def test_hdr10_that_a_crowded_matroska_header_cannot_take_is_named_and_the_file_kept(small_gpen, tmp_path):
    """Chapters and an attachment fill the room before Matroska's Tracks: the header cannot take
    the HDR10 elements, which x265 still writes into the bitstream; the warning says so."""
    hevc = corpus.hdr10_hevc(tmp_path / "hdr.mp4")
    src = tmp_path / "in.mkv"
    with av.open(str(hevc)) as source, av.open(str(src), "w") as out:
        video = out.add_stream_from_template(source.streams.video[0])
        out.add_attachment("DejaVuSans.ttf", "application/x-truetype-font", corpus.FONT)
        out.set_chapters([{"id": 1, "start": 0, "end": 480, "time_base": Fraction(1, 1000),
                           "metadata": {"title": "Grade A"}}])
        for packet in source.demux(video=0):
            if packet.dts is not None:
                packet.stream = video
                out.mux(packet)
    run = gpen_video(small_gpen, src, tmp_path / "out.mkv", "--preset", "ultrafast")
    assert run.returncode == 0, run.stderr
    warnings = _warnings(run)
    assert len(warnings) == 1 and re.fullmatch(
        r"gpen-video: the HDR10 mastering display and content light level metadata could not be written into the "
        r"\.mkv header \(the Void before Tracks has \d+ bytes; \d+ are needed\); it travels in the bitstream only",
        warnings[0]), warnings
    expected, *_ = _hdr(src)
    _assert_same_hdr(_hdr(tmp_path / "out.mkv")[0], expected)


@pytest.mark.parametrize(("build", "name", "ext", "warning"), [
    (corpus.quicktime_mov, "in.mov", ".mkv", "timecode track #2 is kept only as the video stream's timecode tag: "
                                             ".mkv has no timecode tracks"),
    (corpus.with_cover_art, "in.mp4", ".webm", "cover art stream #2 (mjpeg) is left out: .webm cannot hold it"),
    (corpus.gopro_mp4, "in.mp4", ".mkv", "data track #2 (GoPro MET) is left out: .mkv cannot hold data tracks "
                                         "(.mp4 and .mov can)"),
    (corpus.broadcast_ts, "in.ts", ".mp4", "data stream #1 (bin_data) is left out: of the data tracks, "
                                           "gpen-video keeps timecode and GoPro telemetry (gpmd) only"),
], ids=["timecode into mkv", "cover art into webm", "telemetry into mkv", "SCTE-35 cues into mp4"])
def test_what_a_container_cannot_hold_is_named(small_gpen, tmp_path, build, name, ext, warning):
    src = build(tmp_path / name)
    run = gpen_video(small_gpen, src, tmp_path / f"out{ext}")
    assert run.returncode == 0, run.stderr
    assert f"gpen-video: {warning}" in _warnings(run)


def _field_order_and_flags(path: Path) -> tuple[int, list[bool]]:
    with av.open(str(path)) as container:
        return (container.streams.video[0].codec_context.field_order,
                [frame.interlaced_frame for frame in container.decode(video=0)])


ON_GPU = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                          reason="needs a CUDA GPU")])


@pytest.mark.parametrize("device", ["cpu", ON_GPU])
@pytest.mark.parametrize("top_first", [True, False], ids=["tff", "bff"])
def test_interlaced_fields_are_restored_apart_and_woven_back(small_gpen, tmp_path, top_first, device):
    """Each field is detected and restored on its own, made whole by line doubling, and only its
    own lines are written back: every line of a field changes only inside the paste regions of
    that field's faces, and a field after a cut to a shot without faces stays bit-exact, though
    the other field of its frame holds a face. Lossless FFV1, so every sample can be compared. On a
    GPU too (eager, as a short clip runs), where a batch's fields are converted in two groups and
    detected as one batch."""
    src = corpus.interlaced(tmp_path / "in.mp4", top_first)
    out = tmp_path / "out.mkv"
    run = gpen_video(small_gpen, src, out, "--codec", "ffv1", "--tracks-out", tmp_path / "fields.json",
                     device=device)
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == []
    order = 2 if top_first else 3
    assert _field_order_and_flags(src) == _field_order_and_flags(out) == (order, [True] * 6)
    # The sound, untouched (Matroska holds no negative times: the whole file moves by the AAC priming).
    assert [data for _, data in _packets(out, 1)] == [data for _, data in _packets(src, 1)]

    records = json.loads((tmp_path / "fields.json").read_text())["frames"]
    taken = ["top", "bottom"] if top_first else ["bottom", "top"]
    assert [(r["index"], r["field"], r["time"]) for r in records] == [
        (i, taken[i % 2], round((i // 2) / 25 + (i % 2) / 50, 6)) for i in range(12)]
    assert [bool(r["faces"]) for r in records] == [True] * 7 + [False] * 5  # the cut is at picture 7

    before, after = decoded_planes(src), decoded_planes(out)
    for k, (planes_in, planes_out) in enumerate(zip(before, after)):
        for record in records[2 * k : 2 * k + 2]:
            first_line = 0 if record["field"] == "top" else 1
            region = paste_region(record["faces"], SMALL_GPEN_SIZE, *planes_in[0].shape)[first_line::2]
            for plane_in, plane_out in zip(planes_in, planes_out):
                lines_in, lines_out = plane_in[first_line::2], plane_out[first_line::2]
                inside = plane_region(region, lines_in)
                np.testing.assert_array_equal(lines_out[~inside], lines_in[~inside], f"frame {k}, {record['field']}")
            if record["faces"]:  # restored where its faces are
                assert (planes_out[0][first_line::2] != planes_in[0][first_line::2]).any()


@pytest.mark.parametrize(("codec", "ext"), [(None, ".mp4"), ("libx265", ".mp4"), ("prores_ks", ".mov")])
def test_interlaced_output_is_coded_interlaced_in_the_input_field_order(small_gpen, tmp_path, codec, ext):
    src = corpus.interlaced(tmp_path / "in.mp4", top_first=False, frames=4, cut_at=8)
    out = tmp_path / f"out{ext}"
    run = gpen_video(small_gpen, src, out, *(["--codec", codec] if codec else []))
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == []
    assert _field_order_and_flags(out) == (3, [True] * 4)
    if codec == "prores_ks":  # each ProRes frame header names its own field order: 2, bottom first
        with av.open(str(out)) as container:
            assert [(bytes(p)[20] >> 2) & 3 for p in container.demux(video=0) if p.size] == [2] * 4


def test_an_encoder_that_cannot_code_interlaced_says_so(small_gpen, tmp_path):
    src = corpus.interlaced(tmp_path / "in.mp4", top_first=True, frames=4, cut_at=8)
    run = gpen_video(small_gpen, src, tmp_path / "out.mkv", "--codec", "libvpx-vp9")
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == ["gpen-video: libvpx-vp9 cannot code interlaced video; the top field first fields "
                              "are stored woven in frames flagged progressive"]
    refused = gpen_video(small_gpen, src, tmp_path / "strict.mkv", "--codec", "libvpx-vp9", "--strict")
    assert refused.returncode == 1 and not (tmp_path / "strict.mkv").exists()
