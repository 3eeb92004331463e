"""Files the way users meet them, built at test time from the real media in ../shared with PyAV:
several audio tracks with flags, subtitles, chapters, attachments, cover art, timecode and
QuickTime keys, ProRes 4444 with alpha, 4:2:2 MJPEG, HEVC tagged ``hvc1``, PCM in AVI, files cut
short, a stream that changes size. No binary is kept in the repository."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from .conftest import shared_file, write_clip

TALKING_HEAD = "media/videos/talking_head_speech_liveportrait_d20.mp4"  # 480x480 H.264, AAC, 25 fps
OLD_FOOTAGE = "media/videos/old_footage_chaplin_moviepy.mp4"  # its audio is MP3
FONT = bytes(range(256)) * 16  # an attachment's payload is opaque to every tool that copies it


def _source() -> Path:
    return shared_file(TALKING_HEAD)


def rgb_frames(count: int, size: tuple[int, int] | None = None) -> list[np.ndarray]:
    """The talking head's first ``count`` frames as RGB, resized to ``size`` (w, h) if given."""
    with av.open(str(_source())) as container:
        frames = []
        for frame in container.decode(video=0):
            if size is not None:
                frame = frame.reformat(width=size[0], height=size[1])
            frames.append(frame.to_ndarray(format="rgb24"))
            if len(frames) == count:
                return frames
    return frames


def _mux_copy(source: av.container.InputContainer, output: av.container.OutputContainer,
              pairs: list[tuple[av.stream.Stream, list[av.stream.Stream]]], seconds: float) -> None:
    """Copy the packets of each source stream into its output streams, up to ``seconds``."""
    by_index = {s.index: outs for s, outs in pairs}
    for packet in source.demux([s for s, _ in pairs]):
        if packet.dts is None or packet.stream.index not in by_index:
            continue
        if packet.pts is not None and float(packet.pts * packet.time_base) > seconds:
            continue
        outs = by_index[packet.stream.index]
        for i, out in enumerate(outs):
            copy = packet if i == len(outs) - 1 else _clone(packet)
            copy.stream = out
            output.mux(copy)


def _clone(packet: av.Packet) -> av.Packet:
    copy = av.Packet(bytes(packet))
    copy.pts, copy.dts, copy.duration, copy.time_base = packet.pts, packet.dts, packet.duration, packet.time_base
    copy.is_keyframe = packet.is_keyframe
    return copy


def rich_mkv(path: Path, seconds: float = 1.6) -> Path:
    """The talking head with two audio tracks (English default, French commentary forced), a
    German subtitle (default + forced), two chapters, a font attachment and a title."""
    with av.open(str(_source())) as source, av.open(str(path), "w") as out:
        video, audio = source.streams.video[0], source.streams.audio[0]
        out_video = out.add_stream_from_template(video)
        english, french = out.add_stream_from_template(audio), out.add_stream_from_template(audio)
        english.metadata.update(language="eng", title="Main")
        french.metadata.update(language="fra", title="Commentary")
        english.disposition = av.stream.Disposition.default
        french.disposition = av.stream.Disposition.forced
        subtitles = out.add_mux_stream("subrip")
        subtitles.metadata["language"] = "deu"
        subtitles.disposition = av.stream.Disposition.default | av.stream.Disposition.forced
        out.add_attachment("DejaVuSans.ttf", "application/x-truetype-font", FONT)
        millis = Fraction(1, 1000)
        out.set_chapters([
            {"id": 1, "start": 0, "end": 800, "time_base": millis, "metadata": {"title": "Intro"}},
            {"id": 2, "start": 800, "end": int(seconds * 1000), "time_base": millis, "metadata": {"title": "Talk"}},
        ])
        out.metadata["title"] = "Interview, take 3"
        _mux_copy(source, out, [(video, [out_video]), (audio, [english, french])], seconds)
        cue = av.Packet(b"Guten Tag")
        cue.pts = cue.dts = 200
        cue.duration, cue.time_base, cue.stream = 600, millis, subtitles
        out.mux(cue)
    return path


def subtitled_mp4(path: Path, seconds: float = 1.2) -> Path:
    """The talking head with a German MP4 (mov_text) subtitle, flagged default, as phones and
    editors export captions."""
    with av.open(str(_source())) as source, av.open(str(path), "w") as out:
        video, audio = source.streams.video[0], source.streams.audio[0]
        pairs = [(video, [out.add_stream_from_template(video)]), (audio, [out.add_stream_from_template(audio)])]
        subtitles = out.add_mux_stream("mov_text")
        subtitles.metadata["language"] = "deu"
        subtitles.disposition = av.stream.Disposition.default
        _mux_copy(source, out, pairs, seconds)
        text = "Guten Tag".encode()
        cue = av.Packet(len(text).to_bytes(2, "big") + text)  # mov_text: a 16-bit length, then the text
        cue.pts = cue.dts = 200
        cue.duration, cue.time_base, cue.stream = 600, Fraction(1, 1000), subtitles
        out.mux(cue)
    return path

def quicktime_mov(path: Path, seconds: float = 1.2) -> Path:
    """The talking head as a camera's MOV: a timecode track with a reel name, and QuickTime keys
    for make, model, GPS location and creation date."""
    with av.open(str(_source())) as source, \
            av.open(str(path), "w", options={"movflags": "use_metadata_tags"}) as out:
        video, audio = source.streams.video[0], source.streams.audio[0]
        out_video, out_audio = out.add_stream_from_template(video), out.add_stream_from_template(audio)
        out_video.metadata.update(timecode="01:02:03:04", reel_name="A001C003")
        out.metadata.update({"com.apple.quicktime.make": "Apple", "com.apple.quicktime.model": "iPhone 15 Pro",
                             "com.apple.quicktime.location.ISO6709": "+48.8584+002.2945+035.000/",
                             "com.apple.quicktime.creationdate": "2026-06-01T10:11:12+0200"})
        _mux_copy(source, out, [(video, [out_video]), (audio, [out_audio])], seconds)
    return path


def _gpmf(key: bytes, kind: bytes, size: int, items: bytes) -> bytes:
    """One GPMF entry: a four-character key, a type, the size of one sample and their count, the
    samples padded to 32 bits (GoPro's telemetry format; type ``\\0`` nests entries)."""
    count = len(items) // size
    return key + kind + bytes([size]) + count.to_bytes(2, "big") + items + bytes(-len(items) % 4)


def _telemetry(second: int) -> bytes:
    """A second of a GoPro's GPMF payload: a device holding an accelerometer stream (scaled int16
    samples in m/s², x y z at 200 Hz, here four of them) with its name and units."""
    samples = b"".join(int(v).to_bytes(2, "big", signed=True)
                       for i in range(4) for v in (418 * (second + 1), -13 * i, 9 * i))
    stream = _gpmf(b"STNM", b"c", 1, b"Accelerometer") + _gpmf(b"SIUN", b"c", 4, b"m/s2") \
        + _gpmf(b"SCAL", b"s", 2, (418).to_bytes(2, "big")) + _gpmf(b"ACCL", b"s", 6, samples)
    device = _gpmf(b"DVID", b"L", 4, (1).to_bytes(4, "big")) + _gpmf(b"DVNM", b"c", 1, b"HERO12 Black") \
        + _gpmf(b"STRM", b"\0", 1, stream)
    return _gpmf(b"DEVC", b"\0", 1, device)


def gopro_mp4(path: Path, seconds: float = 1.2) -> Path:
    """The talking head as a GoPro writes it: video, sound, and a GPMF telemetry track
    (``gpmd``, handler "GoPro MET"), one payload a second (here every half second)."""
    with av.open(str(_source())) as source, av.open(str(path), "w") as out:
        video, audio = source.streams.video[0], source.streams.audio[0]
        out_video, out_audio = out.add_stream_from_template(video), out.add_stream_from_template(audio)
        telemetry = out.add_data_stream(codec_name="bin_data")
        telemetry.metadata["handler_name"] = "GoPro MET"
        _mux_copy(source, out, [(video, [out_video]), (audio, [out_audio])], seconds)
        for n in range(int(seconds * 2) + 1):
            packet = av.Packet(_telemetry(n))
            packet.pts = packet.dts = n * 500
            packet.duration, packet.time_base, packet.stream = 500, Fraction(1, 1000), telemetry
            out.mux(packet)
    return path


def broadcast_ts(path: Path, seconds: float = 1.2) -> Path:
    """The talking head as a broadcast transport stream: H.264 video with an SCTE-35 cue track
    (the ad-break markers of a channel's feed), which FFmpeg reads back as binary data."""
    with av.open(str(_source())) as source, av.open(str(path), "w", format="mpegts") as out:
        video = source.streams.video[0]
        out_video = out.add_stream_from_template(video)
        cues = out.add_data_stream(codec_name="scte_35")
        _mux_copy(source, out, [(video, [out_video])], seconds)
        splice = bytes.fromhex("fc302000000000000000fff00f05000000017fefffffffffff00000000000000")
        packet = av.Packet(splice)
        packet.pts = packet.dts = 45000
        packet.time_base, packet.stream = Fraction(1, 90000), cues
        out.mux(packet)
    return path


def lossy_ts(path: Path) -> Path:
    """:func:`broadcast_ts` received with losses: every 40th transport packet of its middle half
    dropped, as a weak signal drops them. FFmpeg's demuxer flags the video packets that lost data."""
    data = broadcast_ts(path.with_name(f"whole-{path.name}")).read_bytes()
    size = 188  # bytes per transport packet
    count = len(data) // size
    path.write_bytes(b"".join(data[i * size : (i + 1) * size] for i in range(count)
                              if not (count // 4 < i < 3 * count // 4 and i % 40 == 0)))
    return path


def _jpeg(size: int = 64) -> tuple[bytes, int, int]:
    """One real frame of the talking head as a JPEG picture."""
    encoder = av.CodecContext.create("mjpeg", "w")
    encoder.width = encoder.height = size
    encoder.pix_fmt = "yuvj420p"
    encoder.time_base = Fraction(1, 25)
    frame = av.VideoFrame.from_ndarray(rgb_frames(1, (size, size))[0], format="rgb24").reformat(format="yuvj420p")
    return b"".join(bytes(p) for p in encoder.encode(frame) + encoder.encode(None)), size, size


def with_cover_art(path: Path, seconds: float = 1.2, audio_only: bool = False) -> Path:
    """The talking head with a JPEG cover; with ``audio_only``, the old footage's MP3 soundtrack
    alone with it (an .mp3 ``path``: a song)."""
    picture, width, height = _jpeg()
    media = shared_file(OLD_FOOTAGE) if audio_only else _source()
    with av.open(str(media)) as source, av.open(str(path), "w") as out:
        video, audio = source.streams.video[0], source.streams.audio[0]
        pairs = [] if audio_only else [(video, [out.add_stream_from_template(video)])]
        pairs.append((audio, [out.add_stream_from_template(audio)]))
        cover = out.add_stream("mjpeg")
        cover.width, cover.height, cover.pix_fmt = width, height, "yuvj420p"
        cover.disposition = av.stream.Disposition.attached_pic
        packet = av.Packet(picture)
        packet.stream = cover
        out.mux(packet)
        _mux_copy(source, out, pairs, seconds)
    return path


def encoded(path: Path, codec: str, pix_fmt: str, frames: int = 12, options: dict | None = None,
            tag: str | None = None, alpha: bool = False, tags: dict | None = None) -> Path:
    """The talking head's first frames encoded with ``codec`` in ``pix_fmt``; ``alpha`` adds a
    gradient alpha plane, ``tags`` set colour tags, ``tag`` the codec tag."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=25)
        stream.width = stream.height = 240
        stream.pix_fmt = pix_fmt
        stream.codec_context.options = options or {}
        if tag:
            stream.codec_context.codec_tag = tag
        for name, value in (tags or {}).items():
            setattr(stream.codec_context, name, value)
        for i, rgb in enumerate(rgb_frames(frames, (240, 240))):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=pix_fmt)
            if alpha:
                deep = "10" in pix_fmt
                dtype = np.dtype(np.uint16 if deep else np.uint8)
                plane = frame.planes[3]
                buffer = np.frombuffer(memoryview(plane), dtype).reshape(240, plane.line_size // dtype.itemsize)
                buffer[:, :240] = np.linspace(0, 1023 if deep else 255, 240).astype(dtype)  # transparent to opaque
            for name, value in (tags or {}).items():
                setattr(frame, name, value)
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def pcm_avi(path: Path, seconds: float = 1.2) -> Path:
    """The talking head as MJPEG with 16-bit PCM audio in an AVI, whose 2-channel layout has no
    channel order: what old cameras and capture cards write."""
    with av.open(str(_source())) as source, av.open(str(path), "w") as out:
        video = out.add_stream("mjpeg", rate=25)
        video.width = video.height = 240
        video.pix_fmt = "yuvj420p"
        audio_in = source.streams.audio[0]
        audio = out.add_stream("pcm_s16le", rate=audio_in.rate)
        audio.layout = "stereo"
        resampler = av.AudioResampler(format="s16", layout="stereo", rate=audio_in.rate)
        for frame in source.decode(audio_in):
            if frame.time > seconds:
                break
            for resampled in resampler.resample(frame):
                for packet in audio.encode(resampled):
                    out.mux(packet)
        for i, rgb in enumerate(rgb_frames(int(seconds * 25), (240, 240))):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuvj420p")
            frame.pts = i
            for packet in video.encode(frame):
                out.mux(packet)
        for stream in (video, audio):
            for packet in stream.encode(None):
                out.mux(packet)
    return path


def size_change_ts(path: Path) -> Path:
    """An MPEG-TS whose H.264 stream switches from 320x240 to 480x360 half-way, as a broadcast
    recording does at an advert break: two encoders' packets in one stream."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        stream.codec_context.options = {"preset": "ultrafast"}
        pts = 0
        for size in ((320, 240), (480, 360)):
            encoder = av.CodecContext.create("libx264", "w")
            encoder.width, encoder.height, encoder.pix_fmt = *size, "yuv420p"
            encoder.time_base = Fraction(1, 25)
            encoder.options = {"preset": "ultrafast"}
            packets = []
            for rgb in rgb_frames(10, size):
                frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
                frame.pts = pts
                pts += 1
                packets += encoder.encode(frame)
            packets += encoder.encode(None)
            for packet in packets:
                packet.stream = stream
                packet.time_base = Fraction(1, 25)
                out.mux(packet)
    return path


def faststart_copy(path: Path, source: Path) -> Path:
    """``source`` remuxed with its index (moov) at the front, as streaming-ready MP4s are."""
    with av.open(str(source)) as src, av.open(str(path), "w", options={"movflags": "faststart"}) as out:
        pairs = [(s, [out.add_stream_from_template(s)]) for s in src.streams if s.type in ("video", "audio")]
        _mux_copy(src, out, pairs, float("inf"))
    return path


def excerpt(path: Path, source: Path, seconds: float) -> Path:
    """The first ``seconds`` of ``source``'s video and audio, packets copied as they are: a short
    clip from a real file, its codecs, timestamps and display matrix kept."""
    with av.open(str(source)) as src, av.open(str(path), "w") as out:
        pairs = [(s, [out.add_stream_from_template(s)]) for s in src.streams if s.type in ("video", "audio")]
        _mux_copy(src, out, pairs, seconds)
    return path


def cut(path: Path, source: Path, fraction: float) -> Path:
    """The first ``fraction`` of ``source``'s bytes: a copy or download that stopped half-way."""
    data = source.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])
    return path


PHONE = "media/videos/phone_selfie_rotation90_new_face_video-90.mp4"  # stored sideways, shown turned -90


def mirrored(path: Path, hflip: bool = False, vflip: bool = False, seconds: float = 2.0) -> Path:
    """The rotated phone selfie with its display matrix also mirrored, the stored pixels as they
    were: what a front camera's "mirror" setting, or an editor's flip, writes."""
    with av.open(str(shared_file(PHONE))) as source, av.open(str(path), "w") as out:
        video, audio = source.streams.video[0], source.streams.audio[0]
        out_video, out_audio = out.add_stream_from_template(video), out.add_stream_from_template(audio)
        out_video.set_display_rotation(-90, hflip=hflip, vflip=vflip)
        _mux_copy(source, out, [(video, [out_video]), (audio, [out_audio])], seconds)
    return path


#: A typical HDR10 grade: BT.2020 primaries, D65, a 1000 cd/m² mastering display; MaxCLL/MaxFALL.
HDR10_PARAMS = "master-display=G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,50):max-cll=1000,400"


def hdr10_hevc(path: Path, frames: int = 12) -> Path:
    """The talking head as an HDR10 master: HEVC Main10, PQ transfer, BT.2020, with mastering
    display and content light level SEI, tagged ``hvc1``."""
    return encoded(path, "libx265", "yuv420p10le", frames, tag="hvc1",
                   options={"preset": "ultrafast", "x265-params": f"log-level=error:hdr10=1:{HDR10_PARAMS}"},
                   tags={"color_primaries": 9, "color_trc": 16, "colorspace": 9})



def interlaced(path: Path, top_first: bool, frames: int = 6, cut_at: int = 7) -> Path:
    """Interlaced H.264 as a camera writes it, with the talking head's sound: each frame woven from
    two consecutive pictures of the clip, one per field (chroma rows too, as interlaced 4:2:0 is),
    in ``top_first`` order. From picture ``cut_at`` on, a cut to a shot without faces (a grey
    gradient): with the default 7, frame 3's second field is the first after the cut."""
    with av.open(str(_source())) as source:
        decoded = zip(source.decode(video=0), range(2 * frames))
        pictures = [f.reformat(format="yuv420p").to_ndarray() for f, _ in decoded]
    height = pictures[0].shape[0] * 2 // 3
    grey = np.repeat(np.linspace(60, 190, height, dtype=np.uint8)[:, None], pictures[0].shape[1], 1)
    blank = np.concatenate([grey, np.full((height // 2, pictures[0].shape[1]), 128, np.uint8)])
    pictures = [p if i < cut_at else blank for i, p in enumerate(pictures)]
    second = 1 if top_first else 0  # the later field's first line
    with av.open(str(_source())) as source, av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=25)
        video.width, video.height, video.pix_fmt = pictures[0].shape[1], height, "yuv420p"
        video.codec_context.flags |= av.codec.context.Flags.interlaced_dct | av.codec.context.Flags.interlaced_me
        video.codec_context.field_order = 2 if top_first else 3
        video.codec_context.options = {"preset": "ultrafast", "x264-params": "tff=1" if top_first else "bff=1"}
        audio = source.streams.audio[0]
        out_audio = out.add_stream_from_template(audio)
        for k in range(frames):
            woven = pictures[2 * k].copy()
            luma, chroma = woven[:height], woven[height:].reshape(2, height // 2, -1)
            later = pictures[2 * k + 1]
            luma[second::2] = later[:height][second::2]
            chroma[:, second::2] = later[height:].reshape(2, height // 2, -1)[:, second::2]
            frame = av.VideoFrame.from_ndarray(woven, format="yuv420p")
            frame.pts = k
            for packet in video.encode(frame):
                out.mux(packet)
        for packet in video.encode(None):
            out.mux(packet)
        _mux_copy(source, out, [(audio, [out_audio])], frames / 25)
    return path


def anamorphic(path: Path, frames: int = 8) -> Path:
    """The talking head as an HDV camera stores a 1920x1080 scene: squeezed into 1440x1080, sample
    aspect ratio 4:3 in the H.264 stream (tests/made_by_tools.py has the same from FFmpeg's command line)."""
    import cv2

    squeezed = []
    for image in rgb_frames(frames, (1080, 1080)):
        scene = np.zeros((1080, 1920, 3), np.uint8)
        scene[:, 420:1500] = image
        squeezed.append(cv2.resize(scene, (1440, 1080), interpolation=cv2.INTER_AREA))
    write_clip(path, squeezed, tags={"sample_aspect_ratio": Fraction(4, 3)})
    return path
