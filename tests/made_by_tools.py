"""Files as other tools write them, built at test time from the real media in ../shared: FFmpeg's
command line (Debian's FFmpeg, another version than PyAV's), MKVToolNix's ``mkvmerge``, GPAC's
``MP4Box``, ExifTool and libheif's ``heif-enc``. tests/corpus.py builds its files with the
project's own PyAV, which only proves the project agrees with itself; these are what cameras,
editors, archives and broadcasters hand over.

Each builder needs its tool: a test skips with the reason when the tool is absent, and fails
under ``GPEN_VIDEO_REQUIRE_SHARED=1`` (CI) unless CI found the tool not packaged for its system
(``GPEN_VIDEO_UNPACKAGED_TOOLS``, set by .ci/run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gpen_video.media.isobmff import add_sample_entry_boxes

from .conftest import REQUIRE_SHARED, shared_file

TALKING_HEAD = "media/videos/talking_head_speech_liveportrait_d20.mp4"  # 480x480 H.264, AAC, 25 fps
CHAPTERS = [(0.0, 0.4, "Intro"), (0.4, 0.8, "Talk")]


def tool(name: str) -> str:
    """The path of a command-line tool, or skip (fail in CI, where .ci/run installs it)."""
    path = shutil.which(name)
    if path is None:
        unpackaged = os.environ.get("GPEN_VIDEO_UNPACKAGED_TOOLS", "").split()
        message = (f"{name} is not installed (Debian packages: ffmpeg, mkvtoolnix, gpac, libimage-exiftool-perl, "
                   f"libheif-examples, chromium, chromium-driver)")
        if REQUIRE_SHARED and name not in unpackaged:
            pytest.fail(message)
        pytest.skip(message + ("; this system has no package for it" if name in unpackaged else ""))
    return path


def run(*command: str | Path) -> None:
    """Run a tool, quietly; its own error output when it fails (mkvmerge exits 1 on a warning)."""
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=300)
    succeeded = (0, 1) if Path(command[0]).name == "mkvmerge" else (0,)
    if done.returncode not in succeeded:
        raise RuntimeError(f"{command[0]} failed: {done.stderr.strip() or done.stdout.strip()}")


def ffmpeg(*args: str | Path) -> None:
    run(tool("ffmpeg"), "-nostdin", "-loglevel", "error", "-y", *args)


def ffprobe(path: Path, *entries: str) -> dict:
    """ffprobe's JSON for ``path``: ``-show_entries`` and the like, as given."""
    done = subprocess.run([tool("ffprobe"), "-v", "error", "-of", "json", *entries, str(path)],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def chapters(path: Path) -> list[tuple[float, float, str]]:
    """The chapters as FFmpeg's command line reads them: start, end (s), title."""
    found = ffprobe(path, "-show_chapters")["chapters"]
    return [(round(float(c["start_time"]), 3), round(float(c["end_time"]), 3), c.get("tags", {}).get("title"))
            for c in found]


def video_frames(path: Path, *entries: str) -> list[dict]:
    """Each video frame's ``entries`` as ffprobe reads them, in presentation order."""
    return ffprobe(path, "-select_streams", "v:0", "-show_entries", "frame=" + ",".join(entries))["frames"]


def video_stream(path: Path) -> dict:
    return ffprobe(path, "-select_streams", "v:0", "-show_streams")["streams"][0]


def _source() -> Path:
    return shared_file(TALKING_HEAD)


def _ffmetadata(folder: Path) -> Path:
    lines = [";FFMETADATA1"]
    for start, end, title in CHAPTERS:
        lines += ["[CHAPTER]", "TIMEBASE=1/1000", f"START={int(start * 1000)}", f"END={int(end * 1000)}",
                  f"title={title}"]
    path = folder / "chapters.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def ffmpeg_chapters(path: Path) -> Path:
    """The talking head with two chapters, as FFmpeg's command line (and yt-dlp's
    ``--embed-chapters``, which calls it) writes them: in MP4/MOV a QuickTime chapter text track."""
    ffmpeg("-i", _source(), "-i", _ffmetadata(path.parent), "-map", "0", "-map_chapters", "1", "-t", "0.8",
           "-c", "copy", path)
    return path


def mkvmerge_chapters(path: Path) -> Path:
    """The talking head remuxed by mkvmerge with an XML chapter file, as most Matroska files are made."""
    atoms = "".join(f"<ChapterAtom><ChapterTimeStart>{_clock(start)}</ChapterTimeStart>"
                    f"<ChapterTimeEnd>{_clock(end)}</ChapterTimeEnd>"
                    f"<ChapterDisplay><ChapterString>{title}</ChapterString></ChapterDisplay></ChapterAtom>"
                    for start, end, title in CHAPTERS)
    xml = path.parent / "chapters.xml"
    xml.write_text(f'<?xml version="1.0"?><Chapters><EditionEntry>{atoms}</EditionEntry></Chapters>')
    short = path.parent / "short.mp4"
    ffmpeg("-i", _source(), "-t", "0.8", "-c", "copy", short)
    run(tool("mkvmerge"), "-q", "-o", path, "--chapters", xml, short)
    return path


def mp4box_chapters(path: Path) -> Path:
    """The talking head with chapters added by GPAC's MP4Box (a chapter text track and Nero chapters)."""
    text = path.parent / "chapters_mp4box.txt"
    text.write_text("".join(f"{_clock(start)} {title}\n" for start, _, title in CHAPTERS))
    ffmpeg("-i", _source(), "-t", "0.8", "-c", "copy", path)
    run(tool("MP4Box"), "-quiet", "-chap", text, path)
    return path


def _clock(seconds: float) -> str:
    return f"00:00:{seconds:06.3f}"


def _rbsp_to_ebsp(payload: bytes) -> bytes:
    """H.264's emulation prevention: an 0x03 after two zero bytes that precede a byte up to 3."""
    out, zeros = bytearray(), 0
    for byte in payload:
        if zeros >= 2 and byte <= 3:
            out.append(3)
            zeros = 0
        out.append(byte)
        zeros = zeros + 1 if byte == 0 else 0
    return bytes(out)


def caption_bytes(picture: int) -> bytes:
    """The CEA-608 pair a broadcast encoder would send with picture ``picture`` (field 1, two
    characters with odd parity), as the three-byte cc_data construct of ATSC A/53."""
    pair = [0x80 | (0x41 + picture % 26), 0x80 | (0x30 + picture % 10)]
    return bytes([0xFC, *pair])


def _t35_sei(t35: bytes) -> bytes:
    """An H.264 SEI NAL unit of user data registered by ITU-T T.35 (payload type 4)."""
    return b"\x00\x00\x00\x01\x06" + _rbsp_to_ebsp(bytes([4, len(t35)]) + t35 + b"\x80")


def _a53_sei(picture: int) -> bytes:
    """ATSC A/53 closed captions (provider 0x31, 'GA94', type 3) for picture ``picture``."""
    cc_data = bytes([0x40 | 1, 0xFF]) + caption_bytes(picture) + b"\xff"
    return _t35_sei(b"\xb5\x00\x31GA94\x03" + cc_data)


#: The active format description broadcast encoders send: 16:9 picture in a 16:9 frame.
AFD_CODE = 0b1010


def _afd_sei(picture: int) -> bytes:
    """An active format description (provider 0x31, 'DTG1', ETSI TS 101 154): the same code on every picture."""
    return _t35_sei(b"\xb5\x00\x31DTG1" + bytes([0x41, 0xF0 | AFD_CODE]))


def _h264_with_sei(path: Path, sei: Callable[[int], bytes]) -> Path:
    """The talking head's first 1.2 s as raw H.264 (x264 ultrafast, no B-frames), with ``sei(n)``
    before the slice of picture n, as a broadcast encoder sends it."""
    plain = path.parent / "plain.h264"
    ffmpeg("-i", _source(), "-t", "1.2", "-an", "-c:v", "libx264", "-preset", "ultrafast", "-bf", "0", "-f", "h264",
           plain)
    data = plain.read_bytes()
    out, previous, picture = bytearray(), 0, 0
    for match in re.finditer(b"\x00\x00\x01", data):
        start = match.start()
        if data[start + 3] & 0x1F in (1, 5):  # a slice: x264 codes each picture as one
            begin = start - 1 if start and data[start - 1] == 0 else start
            out += data[previous:begin] + sei(picture)
            previous, picture = begin, picture + 1
    path.write_bytes(bytes(out + data[previous:]))
    return path


def captioned_h264(path: Path) -> Path:
    """The talking head as a broadcast H.264 encoder sends it: CEA-608 captions in A/53 SEI on
    every picture, then encoded by FFmpeg's command line as a camera would (x264 medium, B-frames,
    which writes the decoded captions back from each frame)."""
    captioned = _h264_with_sei(path.parent / "captioned.h264", _a53_sei)
    ffmpeg("-r", "25", "-i", captioned, "-i", _source(), "-map", "0:v", "-map", "1:a", "-t", "1.2", "-c:a", "copy",
           "-c:v", "libx264", "-preset", "medium", "-bf", "3", "-a53cc", "1", path)
    return path


def afd_h264(path: Path) -> Path:
    """H.264 with an active format description on every picture, muxed into ``path`` by FFmpeg's
    command line without re-encoding (no FFmpeg encoder writes AFD)."""
    with_afd = _h264_with_sei(path.parent / "afd.h264", _afd_sei)
    ffmpeg("-r", "25", "-i", with_afd, "-i", _source(), "-map", "0:v", "-map", "1:a", "-t", "1.2", "-c", "copy", path)
    return path


def broadcast_mpeg2_ts(path: Path, captioned: Path) -> Path:
    """``captioned`` as a broadcast transport stream: interlaced MPEG-2 4:2:2, top field first,
    with its captions as A/53 picture user data, MPEG audio."""
    ffmpeg("-i", captioned, "-vf", "scale=720:576,setsar=16/15", "-c:v", "mpeg2video", "-pix_fmt", "yuv422p",
           "-flags", "+ildct+ilme", "-top", "1", "-a53cc", "1", "-b:v", "8M", "-c:a", "mp2", "-f", "mpegts", path)
    return path


def xdcam_mxf(path: Path) -> Path:
    """An XDCAM-style MXF: long-GOP MPEG-2 4:2:2 at 50 Mb/s, interlaced top field first, 24-bit PCM."""
    ffmpeg("-i", _source(), "-t", "0.5", "-vf", "scale=720:576,setsar=16/15,format=yuv422p,setfield=tff",
           "-c:v", "mpeg2video", "-b:v", "50M", "-maxrate", "50M", "-minrate", "50M", "-bufsize", "17825792",
           "-flags", "+ildct+ilme", "-top", "1", "-g", "12", "-bf", "2", "-c:a", "pcm_s24le", "-ar", "48000", path)
    return path


def scc_captions_mov(path: Path) -> Path:
    """The talking head with a QuickTime closed-caption track (``c608``), muxed by FFmpeg's command
    line from a Scenarist SCC file, as caption houses deliver them."""
    scc = path.parent / "captions.scc"
    scc.write_text("Scenarist_SCC V1.0\n\n"
                   "00:00:00:00\t9420 9420 94ae 94ae 9452 9452 97a2 97a2 c8e5 ecec ef80 942c 942c 942f 942f\n\n"
                   "00:00:00:12\t9420 9420 94ae 94ae 9452 9452 d7ef f2ec e480 942c 942c 942f 942f\n")
    ffmpeg("-i", _source(), "-i", scc, "-map", "0:v", "-map", "0:a", "-map", "1", "-t", "1", "-c", "copy", path)
    return path


def dv(path: Path) -> Path:
    """A PAL DV capture, 16:9 anamorphic (SAR 64:45), bottom field first as DV always is, with
    48 kHz PCM sound; in AVI (which stores no field order) or MOV, by the extension."""
    ffmpeg("-i", _source(), "-t", "0.5", "-vf", "scale=720:576,setsar=64/45,setfield=bff", "-c:v", "dvvideo",
           "-c:a", "pcm_s16le", "-ar", "48000", path)
    return path


def older_codec(path: Path, codec: str) -> Path:
    """The talking head as older cameras and rippers wrote it: ``mpeg4`` (MPEG-4 Part 2 with MP3
    sound, as DivX/Xvid AVIs hold it) or ``mjpeg`` (Motion JPEG with PCM sound, as webcams and
    old compacts write MOV)."""
    audio = "libmp3lame" if codec == "mpeg4" else "pcm_s16le"
    ffmpeg("-i", _source(), "-t", "0.4", "-c:v", codec, "-q:v", "3", "-c:a", audio, path)
    return path


def hdv(path: Path) -> Path:
    """HDV/AVCHD-style anamorphic H.264: a 1920x1080 scene (the talking head in the middle)
    squeezed into 1440x1080 with a 4:3 sample aspect ratio, as those cameras store it."""
    squeeze = "scale=1080:1080,pad=1920:1080:420:0,scale=1440:1080,setsar=4/3"
    ffmpeg("-i", _source(), "-t", "0.32", "-an", "-vf", squeeze, "-c:v", "libx264", "-preset", "medium", path)
    return path


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def spherical_mp4(path: Path) -> Path:
    """A side-by-side stereo 360° video (equirectangular, turned 90° in yaw) as FFmpeg's command
    line writes one (``-strict unofficial``): its ``sv3d`` and ``st3d`` boxes, as Google's spherical
    video specification lays them out, go into a first file, which FFmpeg reads and writes anew."""
    plain, marked = path.parent / "plain360.mp4", path.parent / "marked360.mp4"
    ffmpeg("-i", _source(), "-t", "0.32", "-an", "-vf", "scale=960:480", "-c:v", "libx264", "-preset", "ultrafast",
           plain)
    projection = _box(b"prhd", bytes(4) + struct.pack(">iii", 90 << 16, 0, 0)) + _box(b"equi", bytes(4 + 16))
    sv3d = _box(b"svhd", bytes(4) + b"gpen-video tests\0") + _box(b"proj", projection)
    shutil.copy(plain, marked)
    add_sample_entry_boxes(marked, {b"sv3d": sv3d, b"st3d": bytes(4) + b"\x02"})  # 2: left and right
    ffmpeg("-i", marked, "-c", "copy", "-strict", "unofficial", path)
    return path


def spherical_mkv(path: Path, stereo_mode: int = 1) -> Path:
    """A stereo 360° video as mkvmerge writes one: equirectangular (its ProjectionPrivate the
    payload of an MP4 ``equi`` box: version, flags and four zero bounds), turned 90° in yaw, with
    Matroska's ``stereo_mode`` (1: side by side, left eye first; 2: top-bottom, right eye first)."""
    plain = path.parent / "plain360.mp4"
    ffmpeg("-i", _source(), "-t", "0.32", "-an", "-vf", "scale=960:480", "-c:v", "libx264", "-preset", "ultrafast",
           plain)
    run(tool("mkvmerge"), "--quiet", "-o", path, "--projection-type", "0:1", "--projection-private", "0:" + "00" * 20,
        "--projection-pose-yaw", "0:90", "--stereo-mode", f"0:{stereo_mode}", plain)
    return path


def dnxhr_mov(path: Path) -> Path:
    """An Avid-style DNxHR HQ intermediate in MOV, 1080p 4:2:2."""
    ffmpeg("-i", _source(), "-t", "0.3", "-an", "-vf", "scale=1920:1080,setsar=1,format=yuv422p",
           "-c:v", "dnxhd", "-profile:v", "dnxhr_hq", path)
    return path


def vp9_alpha_webm(path: Path) -> Path:
    """A WebM overlay: VP9 with an alpha channel (a left-to-right ramp), as libvpx writes it."""
    ffmpeg("-i", _source(), "-t", "0.5", "-an", "-vf", "format=yuva420p,geq=lum='lum(X,Y)':cb='cb(X,Y)':"
           "cr='cr(X,Y)':a='64+X/4'", "-c:v", "libvpx-vp9", "-b:v", "1M", path)
    return path


def ffv1_archive(path: Path) -> Path:
    """A PAL archive master: FFV1 version 3 (slice CRCs, the SAR in every frame), SAR 16:15, in Matroska."""
    ffmpeg("-i", _source(), "-t", "0.5", "-an", "-vf", "scale=720:576,setsar=16/15", "-c:v", "ffv1", "-level", "3",
           "-slicecrc", "1", "-g", "1", path)
    return path


PHOTO = "media/images/whole_facexlib_test.jpg"  # 418x520, one face, MIT


def photo_png(path: Path, pix_fmt: str) -> Path:
    """The photo as FFmpeg's command line writes a PNG in ``pix_fmt``: rgb48be (16-bit colour),
    gray or gray16be (greyscale, as scanners write old photos)."""
    ffmpeg("-i", shared_file(PHOTO), "-pix_fmt", pix_fmt, path)
    return path


def phone_jpeg(path: Path, icc: bytes) -> Path:
    """The photo as a phone stores it: the pixels sideways with EXIF orientation 6 (turn 90°
    clockwise to show), the camera's make, model and capture time, and an ICC profile, all written
    by ExifTool into a JPEG from FFmpeg's command line."""
    profile = path.parent / "profile.icc"
    profile.write_bytes(icc)
    ffmpeg("-i", shared_file(PHOTO), "-vf", "transpose=2", "-q:v", "2", path)
    run(tool("exiftool"), "-q", "-overwrite_original", "-Make=Apple", "-Model=iPhone 15 Pro",
        "-DateTimeOriginal=2026:05:01 10:00:00", "-Orientation#=6", f"-ICC_Profile<={profile}", path)
    return path


def exif_tags(path: Path, *names: str) -> dict[str, str]:
    """Tags as ExifTool reads them (``-n``: numbers as stored)."""
    done = subprocess.run([tool("exiftool"), "-json", "-n", *(f"-{name}" for name in names), str(path)],
                          capture_output=True, text=True, timeout=60, check=True)
    return {k: v for k, v in json.loads(done.stdout)[0].items() if k != "SourceFile"}


def heif_photo(path: Path) -> Path:
    """The photo as HEIC (a phone's default) or AVIF, by the extension, written by libheif's heif-enc."""
    run(tool("heif-enc"), "-q", "90", *(["-A"] if path.suffix == ".avif" else []), "-o", path, shared_file(PHOTO))
    return path
