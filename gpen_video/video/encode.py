"""Encoding: re-encode the video stream, copy every other stream, keep timing, colour and metadata.

Frames arrive as planar YUV: as decoded, or with the planes a device restored (samples that no
face touched are the decoded ones, so they stay bit-identical with a lossless codec).
"""

from __future__ import annotations

import glob
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import av

from .decode import SourceFrame, VideoInfo

log = logging.getLogger(__name__)


class OutputError(RuntimeError):
    """The output cannot be written as asked. The message is one line."""


#: Container (by extension) -> video codecs it can hold, audio codecs it can hold (None: any),
#: subtitle codecs it can hold, and the audio codec to re-encode to when a copy is impossible.
@dataclass(frozen=True)
class ContainerRules:
    video: frozenset[str]
    audio: frozenset[str] | None
    subtitles: frozenset[str]
    fallback_audio: str


_MP4_AUDIO = frozenset({"aac", "mp3", "alac", "ac3", "eac3", "opus", "flac"})
CONTAINERS = {
    ".mp4": ContainerRules(frozenset({"h264", "hevc", "av1", "vp9"}), _MP4_AUDIO, frozenset({"mov_text"}), "aac"),
    ".mov": ContainerRules(frozenset({"h264", "hevc", "prores", "av1"}),
                           _MP4_AUDIO | {"pcm_s16le", "pcm_s24le", "pcm_s16be", "pcm_s24be"},
                           frozenset({"mov_text"}), "aac"),
    ".mkv": ContainerRules(frozenset({"h264", "hevc", "prores", "ffv1", "av1", "vp9"}), None,
                           frozenset({"subrip", "ass", "ssa", "webvtt"}), "aac"),
    ".webm": ContainerRules(frozenset({"vp9", "av1"}), frozenset({"opus", "vorbis"}), frozenset({"webvtt"}), "libopus"),
}
DEFAULT_CODEC = {".mp4": "libx264", ".mov": "libx264", ".mkv": "libx264", ".webm": "libvpx-vp9"}
#: Visually lossless defaults per encoder family.
DEFAULT_CRF = {"libx264": 18, "libx265": 20, "libvpx-vp9": 20, "libsvtav1": 24}
DEFAULT_PRESET = {"libx264": "fast", "libx265": "fast", "h264_nvenc": "p5", "hevc_nvenc": "p5", "libsvtav1": "8"}


@dataclass
class EncoderSettings:
    codec: str | None = None  # None: the container's default
    crf: int | None = None  # None: the codec's visually lossless default
    preset: str | None = None
    pix_fmt: str | None = None  # None: the input's, when the codec takes it
    threads: int = 0  # 0: FFmpeg decides
    #: "AUTO", as the ffmpeg command line: x264 encodes several frames at once. PyAV's default,
    #: "SLICE", splits each frame across the threads instead: 1.8x slower at 1080p on 16 cores,
    #: and larger files (BENCHMARKS.md, run K).
    thread_type: str = "AUTO"


def _pick_pix_fmt(codec: av.codec.Codec, wanted: str) -> str:
    """The input's pixel format if the codec takes it, else one of the same bit depth."""
    formats = [f.name for f in codec.video_formats or []]
    if not formats or wanted in formats:
        return wanted
    deep = any(tag in wanted for tag in ("10", "12", "16"))
    same_depth = [f for f in formats if any(tag in f for tag in ("10", "12", "16")) == deep and f.startswith("yuv")]
    return (same_depth or formats)[0]


_AUDIO_BIT_RATE = 256_000


class _AudioTranscoder:
    """Re-encodes an audio stream the output container cannot hold (e.g. PCM into MP4)."""

    def __init__(self, container: av.container.OutputContainer, source: av.stream.Stream, codec: str) -> None:
        self.source = source
        rate = 48000 if codec == "libopus" else source.rate  # Opus runs at 48 kHz
        self.stream = container.add_stream(codec, rate=rate)
        self.stream.layout = source.layout
        self.stream.bit_rate = _AUDIO_BIT_RATE
        self.stream.metadata.update(source.metadata)
        sample_format = self.stream.codec_context.codec.audio_formats[0].name
        self.resampler = av.AudioResampler(format=sample_format, layout=source.layout, rate=rate)

    def encode(self, packet: av.Packet | None) -> list[av.Packet]:
        """Packets of the new stream for one input packet (``None`` flushes at the end)."""
        frames = packet.decode() if packet is not None else [None]
        out = []
        for frame in frames:
            for resampled in self.resampler.resample(frame):
                out += self.stream.encode(resampled)
            if frame is None:
                out += self.stream.encode(None)
        return out


def _muxer_options(ext: str, source: av.container.InputContainer) -> dict[str, str]:
    """MP4/MOV edit lists (B-frame delay, AAC priming) are written in the movie timescale, 1/1000 s
    by default: rounding there moves every timestamp by a fraction of a millisecond. A timescale
    that every stream's time base divides keeps them exact."""
    if ext not in (".mp4", ".mov"):
        return {}
    scale = 1
    for stream in source.streams:
        if stream.type in ("video", "audio", "subtitle") and stream.time_base:
            scale = math.lcm(scale, stream.time_base.denominator)
    return {"movie_timescale": str(scale)} if 1000 < scale < 2**31 else {}


def _partial_prefix(output: Path) -> str:
    return f".{output.stem}.partial-"


def partial_path(output: Path) -> Path:
    """The temporary file this process writes OUTPUT through: hidden beside it and named by the
    process id, so a later run can tell the leftovers of a dead one (:func:`_remove_stale_partials`)."""
    return output.with_name(f"{_partial_prefix(output)}{os.getpid()}{output.suffix}")


def _remove_stale_partials(output: Path) -> None:
    """Delete temporary files that runs killed outright (``kill -9``, power loss) left beside OUTPUT;
    a partial file of a process still running is left alone."""
    prefix = _partial_prefix(output)
    for path in output.parent.glob(glob.escape(prefix) + "*" + glob.escape(output.suffix)):
        pid = path.name.removeprefix(prefix).removesuffix(output.suffix)
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except PermissionError:  # another user's live process
            pass


class VideoWriter:
    """Writes OUTPUT through a temporary file beside it, renamed into place only by :meth:`close`."""

    def __init__(self, output: Path, source: av.container.InputContainer, info: VideoInfo,
                 settings: EncoderSettings) -> None:
        self.output = output
        ext = output.suffix.lower()
        if ext not in CONTAINERS:
            raise OutputError(f"unsupported output extension {output.suffix!r}; use one of {', '.join(CONTAINERS)}")
        rules = CONTAINERS[ext]
        codec_name = settings.codec or DEFAULT_CODEC[ext]
        try:
            codec = av.codec.Codec(codec_name, "w")
        except Exception:
            raise OutputError(f"encoder {codec_name!r} is not available in this FFmpeg build") from None
        if codec.type != "video":
            raise OutputError(f"{codec_name!r} is not a video encoder")
        if codec.name not in rules.video and codec.canonical_name not in rules.video:
            raise OutputError(f"a {ext} file cannot hold {codec.canonical_name} video; "
                              f"use one of {', '.join(sorted(rules.video))} or another extension")
        # An option the encoder does not know would be dropped without a word by FFmpeg.
        for flag, value, takers in (("--preset", settings.preset, DEFAULT_PRESET),
                                    ("--crf", settings.crf, DEFAULT_CRF)):
            if value is not None and codec.name not in takers:
                raise OutputError(f"{codec.name} takes no {flag}; {', '.join(takers)} do")
        self.info = info
        _remove_stale_partials(output)
        self.tmp = partial_path(output)
        self.warnings: list[str] = []
        try:
            self.container = av.open(str(self.tmp), "w", options=_muxer_options(ext, source))
        except (OSError, av.FFmpegError) as exc:
            raise OutputError(f"cannot write {output}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            self._setup(source, rules, codec, settings)
        except BaseException:
            self.abort()
            raise
        self._pending: list[av.Packet] = []  # copied packets waiting for the video to catch up

    def _setup(self, source: av.container.InputContainer, rules: ContainerRules, codec: av.codec.Codec,
               settings: EncoderSettings) -> None:
        info = self.info
        self.container.metadata.update({k: v for k, v in source.metadata.items() if k != "encoder"})
        src_video = source.streams.video[0]
        video = self.container.add_stream(codec.name, rate=info.average_rate or None)
        video.time_base = info.time_base
        self._configure(video.codec_context, src_video.codec_context, codec, settings)
        self._encoder_setup = (src_video.codec_context, codec, settings)
        video.metadata.update(src_video.metadata)
        if info.rotation:
            video.set_display_rotation(info.rotation)
        self.video = video

        self.copies: dict[int, av.stream.Stream] = {}
        self.transcodes: dict[int, _AudioTranscoder] = {}
        for stream in source.streams:
            if stream.index == src_video.index or stream.type not in ("audio", "subtitle"):
                continue
            name = stream.codec_context.codec.canonical_name  # "mp3", not the decoder's "mp3float"
            allowed = rules.audio if stream.type == "audio" else rules.subtitles
            if allowed is None or name in allowed:
                out = self.container.add_stream_from_template(stream)
                out.metadata.update(stream.metadata)
                self.copies[stream.index] = out
            elif stream.type == "audio":
                self.transcodes[stream.index] = _AudioTranscoder(self.container, stream, rules.fallback_audio)
                self._warn(f"audio stream #{stream.index} ({name}) cannot be copied into {self.output.suffix}; "
                           f"re-encoded as {rules.fallback_audio} at {_AUDIO_BIT_RATE // 1000} kb/s")
            else:
                self._warn(f"subtitle stream #{stream.index} ({name}) cannot be copied into "
                           f"{self.output.suffix}; it is left out")
        try:
            self.container.start_encoding()
        except av.FFmpegError as exc:
            raise OutputError(f"cannot start encoding {self.output.name} with {codec.name}: "
                              f"{exc.strerror or exc}") from None

    def _configure(self, cc: av.codec.context.CodecContext, src_cc: av.codec.context.CodecContext,
                   codec: av.codec.Codec, settings: EncoderSettings) -> None:
        """Everything the video encoder is told: size, pixel format, timing, colour tags, quality."""
        info = self.info
        coded_w, coded_h = (info.height, info.width) if round(info.rotation / 90) % 2 else (info.width, info.height)
        cc.width, cc.height = coded_w, coded_h
        cc.pix_fmt = settings.pix_fmt or _pick_pix_fmt(codec, info.pix_fmt)
        cc.time_base = info.time_base
        if info.average_rate:
            cc.framerate = info.average_rate
        cc.color_range, cc.colorspace = src_cc.color_range, src_cc.colorspace
        cc.color_primaries, cc.color_trc = src_cc.color_primaries, src_cc.color_trc
        if src_cc.sample_aspect_ratio:
            cc.sample_aspect_ratio = src_cc.sample_aspect_ratio
        if settings.threads:
            cc.thread_count = settings.threads
        cc.thread_type = settings.thread_type
        options = {}
        crf = settings.crf if settings.crf is not None else DEFAULT_CRF.get(codec.name)
        if crf is not None:
            options["crf"] = str(crf)
            if codec.name == "libvpx-vp9":
                options["b"] = "0"
        preset = settings.preset or DEFAULT_PRESET.get(codec.name)
        if preset is not None:
            options["preset"] = preset
        if codec.name == "libx265":
            options["x265-params"] = "log-level=error"  # x265 prints its own statistics otherwise
        cc.options = options

    def new_encoder(self) -> av.codec.context.CodecContext:
        """A fresh encoder configured exactly as this file's video stream (same parameter sets), for
        encoding segments apart whose packets this writer muxes later (:meth:`write_encoded`)."""
        src_cc, codec, settings = self._encoder_setup
        cc = av.CodecContext.create(codec.name, "w")
        self._configure(cc, src_cc, codec, settings)
        if self.video.codec_context.flags & av.codec.context.Flags.global_header:
            cc.flags |= av.codec.context.Flags.global_header
        return cc

    def write_encoded(self, packets: list[av.Packet]) -> None:
        """Mux video packets encoded elsewhere by a :meth:`new_encoder`, in decoding order."""
        for packet in packets:
            packet.stream = self.video
        self._mux_video(packets)

    def _warn(self, message: str) -> None:
        log.warning(message)
        self.warnings.append(message)

    @property
    def copied_streams(self) -> set[int]:
        """Input streams whose packets this writer takes (copied or re-encoded)."""
        return set(self.copies) | set(self.transcodes)

    def write_packet(self, packet: av.Packet) -> None:
        """Take a packet of another stream; it is muxed once the video has reached its time."""
        transcoder = self.transcodes.get(packet.stream.index)
        if transcoder is None:
            packet.stream = self.copies[packet.stream.index]
            self._pending.append(packet)
        else:
            self._pending += transcoder.encode(packet)

    def _mux_pending(self, until: float | None) -> None:
        keep = []
        for packet in self._pending:
            if until is None or packet.dts is None or float(packet.dts * packet.time_base) <= until:
                self.container.mux(packet)
            else:
                keep.append(packet)
        self._pending = keep

    def _mux_video(self, packets: list[av.Packet]) -> None:
        for packet in packets:
            if packet.dts is not None:
                self._mux_pending(float(packet.dts * packet.time_base))
            self.container.mux(packet)

    def encoder_frame(self, source: SourceFrame, restored: av.VideoFrame | None = None) -> av.VideoFrame:
        """The frame to encode: ``source`` as decoded, or the ``restored`` frame in its place (same
        format and size), with the decoded frame's timing."""
        decoded = source.frame
        frame = decoded if restored is None else restored
        if frame.format.name != self.video.codec_context.pix_fmt:
            frame = frame.reformat(format=self.video.codec_context.pix_fmt)
        frame.pts = decoded.pts
        frame.time_base = decoded.time_base
        frame.pict_type = av.video.frame.PictureType.NONE
        return frame

    def write(self, source: SourceFrame, restored: av.VideoFrame | None = None) -> None:
        """Encode one frame: ``source`` as decoded, or the ``restored`` frame in its place."""
        frame = self.encoder_frame(source, restored)
        try:
            self._mux_video(self.video.encode(frame))
        except av.FFmpegError as exc:
            raise OutputError(f"encoding failed at frame {source.index}: {exc.strerror or exc}") from None

    def close(self) -> None:
        """Flush, finish the file and move it into place."""
        try:
            self._mux_video(self.video.encode(None))
            for transcoder in self.transcodes.values():
                self._pending += transcoder.encode(None)
            self._mux_pending(None)
            self.container.close()
        except av.FFmpegError as exc:
            self.abort()
            raise OutputError(f"cannot finish {self.output}: {exc.strerror or exc}") from None
        except BaseException:
            self.abort()
            raise
        os.replace(self.tmp, self.output)

    def abort(self) -> None:
        """Drop the partial output."""
        self._pending = []
        try:
            self.container.close()
        except Exception:  # the file is being thrown away; its trailer does not matter
            pass
        self.tmp.unlink(missing_ok=True)
