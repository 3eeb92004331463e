"""Files as other tools write them (tests/made_by_tools.py: FFmpeg's command line, mkvmerge,
MP4Box, ExifTool, heif-enc) through the real command line: chapters, closed captions, DV, DNxHR,
XDCAM-style MPEG-2, VP9 with alpha, an FFV1 archive master, 16-bit and greyscale PNG, a phone's
JPEG and HEIF photos keep what a user would check, read back by the other tools where they can
tell; what cannot be kept is named, and refused under --strict."""

from __future__ import annotations

import json
import subprocess
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from PIL import Image, ImageCms

from gpen_video.media.colour import frame_planes
from gpen_video.media.containers import CONTAINERS
from gpen_video.media.decoders import CpuDecoder

from . import corpus
from . import made_by_tools as tools
from .conftest import SMALL_GPEN_SIZE, decoded_planes, paste_region
from .test_preservation import ON_GPU, _packets, _warnings, gpen_video, named_then_refused

#: Each encoder the tool may pick, with a picture it encodes: size, pixel format, options.
_ENCODERS = {"h264": ("libx264", (256, 256), "yuv420p", {}),
             "hevc": ("libx265", (256, 256), "yuv420p", {"x265-params": "log-level=error"}),
             "prores": ("prores_ks", (256, 256), "yuv422p10le", {}), "vp9": ("libvpx-vp9", (256, 256), "yuv420p", {}),
             "ffv1": ("ffv1", (256, 256), "yuv420p", {"level": "3"}),
             "av1": ("libsvtav1", (256, 256), "yuv420p", {}), "dvvideo": ("dvvideo", (720, 576), "yuv420p", {}),
             "dnxhd": ("dnxhd", (1920, 1080), "yuv422p", {"profile": "dnxhr_hq"}),
             "mpeg2video": ("mpeg2video", (256, 256), "yuv420p", {})}


def _muxes(ext: str, codec: str, folder: Path) -> bool:
    """Whether FFmpeg's muxer for ``ext`` writes a one-frame file of ``codec`` video."""
    encoder, (width, height), pix_fmt, options = _ENCODERS[codec]
    try:
        with av.open(str(folder / f"{codec}{ext}"), "w") as out:
            stream = out.add_stream(encoder, rate=25)
            stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
            stream.codec_context.options = options
            frame = av.VideoFrame(width, height, pix_fmt)
            frame.pts = 0
            for packet in [*stream.encode(frame), *stream.encode(None)]:
                out.mux(packet)
        return True
    except (ValueError, av.FFmpegError):
        return False


@pytest.mark.parametrize("ext", sorted(CONTAINERS))
def test_the_containers_table_says_what_ffmpeg_writes(tmp_path, ext):
    """Every 'cannot hold' a message says, and every codec the tool keeps, is FFmpeg's own answer."""
    assert {codec for codec in _ENCODERS if _muxes(ext, codec, tmp_path)} == set(CONTAINERS[ext].video)


def _restored(small_gpen, src: Path, out: Path, *args, device: str = "cpu") -> subprocess.CompletedProcess:
    """Restore ``src`` into ``out`` through the command line, which must succeed with nothing to name."""
    run = gpen_video(small_gpen, src, out, *args, device=device)
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == []
    return run


def _captions(path: Path) -> list[bytes | None]:
    """Each frame's A/53 closed-caption bytes, in presentation order (None where it has none)."""
    with av.open(str(path)) as container:
        found = []
        for frame in container.decode(video=0):
            data = frame.side_data.get(av.sidedata.sidedata.Type.A53_CC)
            found.append(bytes(data) if data is not None else None)
        return found


@pytest.mark.parametrize(("build", "ext"), [(tools.ffmpeg_chapters, ".mp4"), (tools.ffmpeg_chapters, ".mov"),
                                            (tools.ffmpeg_chapters, ".mkv"), (tools.mkvmerge_chapters, ".mkv"),
                                            (tools.mp4box_chapters, ".mp4")])
def test_chapters_as_other_tools_write_them_stay_chapters(small_gpen, tmp_path, build, ext):
    src = build(tmp_path / f"in{ext}")
    assert tools.chapters(src) == tools.CHAPTERS
    out = tmp_path / f"out{ext}"
    _restored(small_gpen, src, out, "--preset", "ultrafast")
    assert tools.chapters(out) == tools.CHAPTERS


def test_a53_captions_stay_on_every_frame_in_order(small_gpen, tmp_path):
    src = tools.captioned_h264(tmp_path / "in.mp4")
    captions = _captions(src)
    assert len(captions) == 30 and None not in captions  # every picture carried its pair
    assert sorted(captions) == sorted(tools.caption_bytes(n) for n in range(30))
    out = tmp_path / "out.mp4"
    run = _restored(small_gpen, src, out, "--preset", "ultrafast")
    assert "30 faces restored on 30 frames" in run.stderr  # restored frames carry them, not only passed-through ones
    assert _captions(out) == captions
    x265 = tmp_path / "out_x265.mkv"
    assert gpen_video(small_gpen, src, x265, "--codec", "libx265", "--preset", "ultrafast").returncode == 0
    assert _captions(x265) == captions


def test_captions_an_encoder_cannot_carry_are_named_and_refused_under_strict(small_gpen, tmp_path):
    named_then_refused(small_gpen, tools.captioned_h264(tmp_path / "in.mp4"), tmp_path / "out.mov",
                       "the closed captions in the input's video are left out: prores_ks cannot carry them "
                       "(h264_nvenc, hevc_nvenc, libx264, libx265, mpeg2video can)", "--codec", "prores_ks")


def test_active_format_description_is_named_as_left_out_and_refused_under_strict(small_gpen, tmp_path):
    # No FFmpeg encoder writes AFD: a plain re-encode loses it too, so the tool must say so.
    src = tools.afd_h264(tmp_path / "in.mp4")
    with av.open(str(src)) as container:
        afd = [frame.side_data.get(av.sidedata.sidedata.Type.AFD) for frame in container.decode(video=0)]
    assert len(afd) == 30 and all(a is not None and bytes(a)[0] == tools.AFD_CODE for a in afd)
    out = tmp_path / "out.mp4"
    named_then_refused(small_gpen, src, out, "the active format description (AFD) on the input's frames is left "
                       "out: libx264 cannot write it (no FFmpeg encoder can)", "--preset", "ultrafast")
    assert len(tools.video_frames(out, "pts")) == 30


@pytest.mark.parametrize(("codec", "ext", "out_ext"), [("mpeg4", ".avi", ".mp4"), ("mjpeg", ".mov", ".mov")])
def test_a_codec_the_tool_does_not_write_back_is_named_and_refused_under_strict(small_gpen, tmp_path, codec, ext,
                                                                                out_ext):
    src = tools.older_codec(tmp_path / f"in{ext}", codec)
    out = tmp_path / f"out{out_ext}"
    named_then_refused(small_gpen, src, out, f"the input's {codec} video is not written back as {codec}; it is "
                       "encoded as h264 (libx264) (--codec names another encoder)", "--preset", "ultrafast")
    assert len(tools.video_frames(out, "pts")) == len(tools.video_frames(src, "pts")) == 10


def test_broadcast_mpeg2_keeps_codec_chroma_fields_and_captions(small_gpen, tmp_path):
    src = tools.broadcast_mpeg2_ts(tmp_path / "in.ts", tools.captioned_h264(tmp_path / "captioned.mp4"))
    out = tmp_path / "out.mov"
    _restored(small_gpen, src, out)  # MPEG-2 and MPEG audio both fit in MOV
    stream = tools.video_stream(out)
    assert (stream["codec_name"], stream["profile"], stream["pix_fmt"], stream["field_order"]) == (
        "mpeg2video", "4:2:2", "yuv422p", "tt")
    assert {(f["interlaced_frame"], f["top_field_first"]) for f in tools.video_frames(
        out, "interlaced_frame", "top_field_first")} == {(1, 1)}
    assert _captions(out) == _captions(src)
    assert None not in _captions(out)


def test_a_caption_track_is_copied_into_mov_and_named_elsewhere(small_gpen, tmp_path):
    src = tools.scc_captions_mov(tmp_path / "in.mov")
    out = tmp_path / "out.mov"
    _restored(small_gpen, src, out, "--preset", "ultrafast")
    assert tools.ffprobe(out, "-select_streams", "s", "-show_streams")["streams"][0]["codec_tag_string"] == "c608"
    assert _packets(out, 2) == _packets(src, 2)
    mp4 = gpen_video(small_gpen, src, tmp_path / "out.mp4", "--preset", "ultrafast")
    assert _warnings(mp4) == ["gpen-video: subtitle stream #2 (eia_608) cannot be copied into .mp4; it is left out "
                              "(.mov can hold it)"]


@pytest.mark.parametrize("ext", [".avi", ".mov"])
def test_dv_stays_dv_bottom_field_first_with_its_sar(small_gpen, tmp_path, ext):
    src = tools.dv(tmp_path / f"in{ext}")
    out = tmp_path / "out.mov"
    run = _restored(small_gpen, src, out)
    assert "faces restored on 13 frames" in run.stderr
    stream = tools.video_stream(out)
    assert (stream["codec_name"], stream["field_order"], stream["sample_aspect_ratio"]) == ("dvvideo", "bb", "64:45")
    frames = tools.video_frames(out, "interlaced_frame", "top_field_first", "sample_aspect_ratio")
    assert len(frames) == 13
    assert {(f["interlaced_frame"], f["top_field_first"], f["sample_aspect_ratio"]) for f in frames} == {
        (1, 0, "64:45")}


def _squeezed(region: np.ndarray, stored_width: int) -> np.ndarray:
    """A shown-size region on stored columns: a stored column counts where the resampling between
    the two widths reaches any shown pixel of the region (a bilinear kernel as wide as the ratio)."""
    ratio = region.shape[1] / stored_width
    columns = region.any(axis=0) if region.ndim == 2 else region
    out = np.zeros((region.shape[0], stored_width), bool)
    for x in range(stored_width):
        lo, hi = int(np.floor((x + 0.5) * ratio - ratio)), int(np.ceil((x + 0.5) * ratio + ratio))
        out[:, x] = region[:, max(lo, 0) : hi + 1].any(axis=1) if columns[max(lo, 0) : hi + 1].any() else False
    return out


@pytest.mark.parametrize(("build", "device"), [
    pytest.param(tools.hdv, "cpu", id="ffmpeg-cpu"),
    pytest.param(corpus.anamorphic, "cuda", id="pyav-gpu", marks=ON_GPU.marks)])
def test_anamorphic_faces_are_restored_as_shown(small_gpen, tmp_path, build, device):
    """HDV's 1440x1080 at SAR 4:3: faces are found, aligned and restored on the picture as shown
    (1920 wide), so a restored region has the face's shown proportions, not a third wider; every
    stored sample the paste-back cannot reach is exact, and the SAR is kept. (The GPU has no
    FFmpeg command line: there PyAV writes the same clip.)"""
    src = build(tmp_path / "in.mp4")
    out, tracks = tmp_path / "out.mkv", tmp_path / "tracks.json"
    _restored(small_gpen, src, out, "--codec", "ffv1", "--tracks-out", tracks, device=device)
    with av.open(str(out)) as container:  # read by PyAV: the GPU machine has no FFmpeg command line
        assert container.streams.video[0].sample_aspect_ratio == Fraction(4, 3)
    frames = json.loads(tracks.read_text())["frames"]
    before, after = decoded_planes(src), decoded_planes(out)
    assert len(frames) == len(after) == 8
    for record, planes_in, planes_out in zip(frames, before, after):
        assert len(record["faces"]) == 1
        shown = paste_region(record["faces"], SMALL_GPEN_SIZE, 1080, 1920)  # tracks are in shown pixels
        changed = planes_in[0] != planes_out[0]
        assert changed.any() and not changed[~_squeezed(shown, 1440)].any()
        ys, xs = np.nonzero(changed)
        shown_ys, shown_xs = np.nonzero(shown)
        restored_ratio = (xs.max() - xs.min()) * 4 / 3 / (ys.max() - ys.min())
        face_ratio = (shown_xs.max() - shown_xs.min()) / (shown_ys.max() - shown_ys.min())
        assert abs(restored_ratio / face_ratio - 1) < 0.05, (restored_ratio, face_ratio)


def test_dnxhr_keeps_its_profile_and_mov_takes_dnxhd_when_asked(small_gpen, tmp_path):
    src = tools.dnxhr_mov(tmp_path / "in.mov")
    out = tmp_path / "out.mov"
    _restored(small_gpen, src, out)
    stream = tools.video_stream(out)
    assert (stream["codec_name"], stream["profile"], stream["pix_fmt"]) == ("dnxhd", "DNXHR HQ", "yuv422p")
    asked = gpen_video(small_gpen, tools.ffmpeg_chapters(tmp_path / "h264.mov"), tmp_path / "asked.mov",
                       "--codec", "dnxhd")
    assert asked.returncode == 0, asked.stderr
    assert tools.video_stream(tmp_path / "asked.mov")["codec_name"] == "dnxhd"


def test_xdcam_mxf_stays_interlaced_mpeg2_422(small_gpen, tmp_path):
    src = tools.xdcam_mxf(tmp_path / "in.mxf")
    out = tmp_path / "out.mov"
    _restored(small_gpen, src, out)
    stream = tools.video_stream(out)
    assert (stream["codec_name"], stream["profile"], stream["pix_fmt"], stream["field_order"]) == (
        "mpeg2video", "4:2:2", "yuv422p", "tt")
    assert len(tools.video_frames(out, "pts")) == len(tools.video_frames(src, "pts"))
    # the 24-bit PCM, sample for sample (MOV packs its samples into packets of its own size)
    assert b"".join(data for _, data in _packets(out, 1)) == b"".join(data for _, data in _packets(src, 1))


def _spatial(path: Path) -> list[dict]:
    """The video stream's 360° and stereo 3D side data, as FFmpeg's command line reads it."""
    data = tools.video_stream(path).get("side_data_list", [])
    return [d for d in data if d["side_data_type"] in ("Spherical Mapping", "Stereo 3D")]


@pytest.mark.parametrize("made_by", ["ffmpeg", "mkvmerge"])
def test_360_and_stereo_metadata_are_written_back(small_gpen, tmp_path, made_by):
    src = tools.spherical_mp4(tmp_path / "in.mp4") if made_by == "ffmpeg" else tools.spherical_mkv(tmp_path / "in.mkv")
    spatial = _spatial(src)
    assert sorted(d["side_data_type"] for d in spatial) == ["Spherical Mapping", "Stereo 3D"]
    assert {d.get("projection") for d in spatial} >= {"equirectangular"}
    for ext in (".mp4", ".mov", ".mkv", ".webm"):
        out = tmp_path / f"out{ext}"
        codec = ("--codec", "libvpx-vp9", "--crf", "40") if ext == ".webm" else ("--preset", "ultrafast")
        _restored(small_gpen, src, out, *codec)
        assert _sorted_spatial(out) == _sorted_spatial(src), ext  # equirectangular, yaw 90, side by side


def test_a_stereo_layout_mp4_cannot_state_is_named_and_refused_under_strict(small_gpen, tmp_path):
    src = tools.spherical_mkv(tmp_path / "in.mkv", stereo_mode=2)  # top-bottom, the right eye first
    _restored(small_gpen, src, tmp_path / "out.mkv", "--preset", "ultrafast")
    assert _sorted_spatial(tmp_path / "out.mkv") == _sorted_spatial(src)
    named_then_refused(small_gpen, src, tmp_path / "out.mp4", "the 360° and stereo 3D metadata is left out: "
                       "gpen-video keeps it between .mp4, .mov, .mkv and .webm files (MP4 and MOV hold no stereo "
                       "layout but top-bottom and side by side)", "--preset", "ultrafast")
    assert _spatial(tmp_path / "out.mp4") == []


def _sorted_spatial(path: Path) -> list[dict]:
    return sorted(_spatial(path), key=lambda d: d["side_data_type"])


def _alpha(path: Path) -> list[np.ndarray]:
    """Each frame's alpha plane, decoded as the pipeline decodes it (libvpx, which reads it)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return [frame_planes(frame)[3].copy() for frame in CpuDecoder(stream).frames(container, stream)]


def test_vp9_alpha_keeps_its_alpha(small_gpen, tmp_path):
    src = tools.vp9_alpha_webm(tmp_path / "in.webm")
    out = tmp_path / "out.webm"
    run = _restored(small_gpen, src, out)
    assert "faces restored on 13 frames" in run.stderr
    before, after = _alpha(src), _alpha(out)
    assert len(after) == len(before) == 13
    for a, b in zip(before, after):  # the ramp, through a second lossy VP9 coding
        assert np.abs(a.astype(int) - b.astype(int)).mean() < 2
        assert a.min() < 80 and a.max() > 150


def test_an_ffv1_archive_master_keeps_its_sar_on_every_frame(small_gpen, tmp_path):
    src = tools.ffv1_archive(tmp_path / "in.mkv")
    out = tmp_path / "out.mkv"
    _restored(small_gpen, src, out)
    frames = tools.video_frames(out, "sample_aspect_ratio")
    assert len(frames) == 13 and {f["sample_aspect_ratio"] for f in frames} == {"16:15"}
    assert tools.video_stream(out)["sample_aspect_ratio"] == "16:15"  # and in the Matroska header


def _restore_photo(small_gpen, src: Path, out: Path, *args) -> tuple[object, np.ndarray]:
    """Restore a photo; the run, and the pixels its face can reach (from the tracks file)."""
    tracks = out.with_suffix(".json")
    run = gpen_video(small_gpen, src, out, "--tracks-out", tracks, *args)
    assert run.returncode == 0, run.stderr
    frames = json.loads(tracks.read_text())["frames"]
    assert len(frames) == 1 and len(frames[0]["faces"]) == 1
    image = cv2.imread(str(out), cv2.IMREAD_UNCHANGED)
    return run, paste_region(frames[0]["faces"], SMALL_GPEN_SIZE, *image.shape[:2])


@pytest.mark.parametrize("pix_fmt", ["rgb48be", "gray", "gray16be"])
def test_a_png_keeps_its_depth_and_greyness(small_gpen, tmp_path, pix_fmt):
    src = tools.photo_png(tmp_path / "in.png", pix_fmt)
    out = tmp_path / "out.png"
    run, region = _restore_photo(small_gpen, src, out)
    assert _warnings(run) == []
    before, after = cv2.imread(str(src), cv2.IMREAD_UNCHANGED), cv2.imread(str(out), cv2.IMREAD_UNCHANGED)
    assert (after.dtype, after.ndim) == (before.dtype, before.ndim) == (
        np.uint16 if "48" in pix_fmt or "16" in pix_fmt else np.uint8, 3 if pix_fmt == "rgb48be" else 2)
    changed = after != before if after.ndim == 2 else np.any(after != before, axis=2)
    assert changed.any() and not changed[~region].any()  # restored, and exact where the face does not reach
    assert Image.open(out).mode == Image.open(src).mode  # I;16 stays I;16, L stays L, RGB stays RGB


def test_a_phone_jpeg_keeps_its_exif_and_icc_and_stands_upright(small_gpen, tmp_path):
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    src = tools.phone_jpeg(tmp_path / "in.jpg", icc)
    stored = cv2.imread(str(src), cv2.IMREAD_UNCHANGED)
    out = tmp_path / "out.jpg"
    run, _ = _restore_photo(small_gpen, src, out)
    assert _warnings(run) == []
    assert cv2.imread(str(out), cv2.IMREAD_UNCHANGED).shape == (stored.shape[1], stored.shape[0], 3)  # upright
    tags = tools.exif_tags(out, "Make", "Model", "DateTimeOriginal", "Orientation")
    assert tags == {"Make": "Apple", "Model": "iPhone 15 Pro", "DateTimeOriginal": "2026:05:01 10:00:00",
                    "Orientation": 1}  # stored upright now: a viewer must not turn it again
    assert Image.open(out).info["icc_profile"] == icc


def test_what_an_image_format_cannot_hold_is_named_and_refused_under_strict(small_gpen, tmp_path):
    deep = tools.photo_png(tmp_path / "deep.png", "rgb48be")
    run = gpen_video(small_gpen, deep, tmp_path / "out.jpg")
    assert run.returncode == 0, run.stderr
    assert _warnings(run)[0] == ("gpen-video: 16-bit samples are stored as 8-bit: .jpg holds 8 bits "
                                 "(.png and .tif hold 16)")
    cmyk = tmp_path / "cmyk.jpg"
    Image.open(tools.shared_file(tools.PHOTO)).convert("CMYK").save(cmyk, quality=95)  # as print workflows hand over
    run = gpen_video(small_gpen, cmyk, tmp_path / "cmyk_out.jpg")
    assert _warnings(run) == ["gpen-video: the photo's CMYK colours are written as RGB (gpen-video restores in RGB)"]
    strict = gpen_video(small_gpen, cmyk, tmp_path / "strict.jpg", "--strict")
    assert strict.returncode == 1 and not (tmp_path / "strict.jpg").exists()
    assert strict.stderr.strip() == ("gpen-video: error: the photo's CMYK colours are written as RGB (gpen-video "
                                     "restores in RGB) (refused: --strict)")


def test_avif_is_read_as_a_photo_and_heic_refused_in_one_line(small_gpen, tmp_path):
    avif = tools.heif_photo(tmp_path / "in.avif")
    run, _ = _restore_photo(small_gpen, avif, tmp_path / "out.png")
    assert _warnings(run) == []
    heic = tools.heif_photo(tmp_path / "in.heic")
    refused = gpen_video(small_gpen, heic, tmp_path / "out.jpg")
    assert refused.returncode == 1 and not (tmp_path / "out.jpg").exists()
    assert refused.stderr.strip() == (f"gpen-video: error: cannot read {heic}: HEIC/HEIF photos are not "
                                      f"supported here; convert it to JPEG, PNG or TIFF first")


def _top_boxes(path: Path) -> list[bytes]:
    from gpen_video.media.isobmff import _top_level

    with open(path, "rb") as file:
        return [kind for kind, _, _ in _top_level(file)]


@pytest.mark.parametrize("ext", [".mp4", ".mov"])
def test_the_index_moves_to_the_front_as_ffmpeg_s_faststart_moves_it(tmp_path, ext):
    """FFmpeg's command line remuxes a real clip twice, with and without ``-movflags +faststart``;
    moving the second one's index (in small steps, so that the media data moves in many pieces)
    gives the first file byte for byte."""
    from gpen_video.media.isobmff import move_index_to_front

    source = tools.shared_file(tools.TALKING_HEAD)
    fast, moved = tmp_path / f"fast{ext}", tmp_path / f"moved{ext}"
    tools.ffmpeg("-i", source, "-c", "copy", "-movflags", "+faststart", fast)
    tools.ffmpeg("-i", source, "-c", "copy", moved)
    assert _top_boxes(moved)[-1] == b"moov" and _top_boxes(fast)[1] == b"moov"
    move_index_to_front(moved, chunk=4096)
    assert moved.read_bytes() == fast.read_bytes()


def test_outputs_start_with_their_index_unless_told_otherwise(small_gpen, tmp_path):
    """MP4 output is faststart by default, ``--resume``'s assembled file too; ``--no-faststart``
    leaves the index at the end as FFmpeg writes it. The frames and the sound are the same either way."""
    src = corpus.excerpt(tmp_path / "in.mp4", tools.shared_file(tools.TALKING_HEAD), 0.6)
    outputs = {"default": [], "resumed": ["--resume", "--segment-frames", "6"], "kept at the end": ["--no-faststart"]}
    for name, flags in outputs.items():
        run = gpen_video(small_gpen, src, tmp_path / f"{name}.mp4", "--codec", "ffv1", *flags)
        assert run.returncode == 0, run.stderr
    assert _top_boxes(tmp_path / "default.mp4")[:2] == _top_boxes(tmp_path / "resumed.mp4")[:2] == [b"ftyp", b"moov"]
    assert _top_boxes(tmp_path / "kept at the end.mp4")[-1] == b"moov"
    decoded = {name: [f.to_ndarray().tobytes() for f in av.open(str(tmp_path / f"{name}.mp4")).decode(video=0)]
               for name in outputs}
    with av.open(str(src)) as container:
        frames = sum(1 for _ in container.decode(video=0))
    assert decoded["default"] == decoded["resumed"] == decoded["kept at the end"] and len(decoded["default"]) == frames
    assert _packets(tmp_path / "default.mp4", 1) == _packets(tmp_path / "kept at the end.mp4", 1) != []
    tools.ffmpeg("-i", tmp_path / "default.mp4", "-f", "null", "-")  # FFmpeg reads it without a word


def _video_rate(path: Path) -> float:
    """The video stream's bits per second, from its packets."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        packets = [p for p in container.demux(stream) if p.size]
        return 8 * sum(p.size for p in packets) / float(len(packets) / stream.average_rate)


def test_bit_rates_and_the_encoder_s_own_options_reach_x264(small_gpen, tmp_path):
    """--bitrate sets x264's rate, --maxrate caps even a near-lossless quality target, and
    --encoder-options passes x264's own options through: x264 writes its settings into the stream
    (its SEI), where tune=film's deblocking and the aq-mode given through x264-params show."""
    src = corpus.excerpt(tmp_path / "in.mp4", tools.shared_file(tools.TALKING_HEAD), 1.0)
    runs = {"low": ["--bitrate", "150k"], "high": ["--bitrate", "3M"], "capped": ["--crf", "8", "--maxrate", "400k"],
            "tuned": ["--encoder-options", "tune=film,x264-params=aq-mode=3:ref=2"]}
    for name, flags in runs.items():
        run = gpen_video(small_gpen, src, tmp_path / f"{name}.mp4", *flags)
        assert run.returncode == 0, run.stderr
    low, high, capped = (_video_rate(tmp_path / f"{name}.mp4") for name in ("low", "high", "capped"))
    assert low < 300_000 < 1_500_000 < high and capped < 800_000
    settings = (tmp_path / "tuned.mp4").read_bytes()
    assert b"deblock=1:-1:-1" in settings and b"aq=3:" in settings and b"ref=2 " in settings


def test_x265_takes_the_parameters_given_beside_the_tools_own(small_gpen, tmp_path):
    """x265's parameter list also carries the tool's own entries (its log level, HDR metadata):
    the user's x265-params join them rather than being replaced, and x265 writes what it was
    given into the stream (its SEI)."""
    src = corpus.excerpt(tmp_path / "in.mp4", tools.shared_file(tools.TALKING_HEAD), 1.0)
    out = tmp_path / "out.mp4"
    run = gpen_video(small_gpen, src, out, "--codec", "libx265", "--encoder-options",
                     "x265-params=keyint=7:min-keyint=7:scenecut=0")
    assert run.returncode == 0, run.stderr
    settings = out.read_bytes()
    assert all(entry in settings for entry in (b" keyint=7 ", b" min-keyint=7 ", b" scenecut=0 "))
    with av.open(str(out)) as container:
        keys = [i for i, frame in enumerate(container.decode(video=0)) if frame.key_frame]
    assert keys[:3] == [0, 7, 14]
