"""Encoding: re-encode the video stream, copy every other stream, keep timing, colour and metadata.

Frames arrive as planar YUV: as decoded, or with the planes a device restored (samples that no
face touched are the decoded ones, so they stay bit-identical with a lossless codec).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

import av

from ..errors import OutputError, failures_as, reason
from .colour import Orientation, copy_colour_tags, frame_planes, planes_to_frame, shown_width, writable_planes
from .containers import CONTAINERS, ContainerRules
from .fields import FieldStamp, reformat_fields
from .fields import encoder_params as interlaced_params
from .formats import checked_encoder, choose_encoder, encoder_options, pick_pix_fmt, quieted
from .frames import SourceFrame
from .hdr import PARAMS_OPTION
from .headers import write_headers
from .isobmff import Track
from .matroska import read_video_elements
from .opening import video_stream
from .outputs import AbortedOnError, OutputClaim, partial_path, remove_stale_partials
from .probe import VideoInfo
from .spatial import SpatialLayout
from .streams import CompanionStreams, mp4_tracks

if TYPE_CHECKING:
    from ..options import RestoreOptions

log = logging.getLogger(__name__)


#: Encoders that write each frame's A53 closed captions into the bitstream (x264 and x265 as
#: SEI, MPEG-2 as picture user data, NVENC as SEI).
CAPTION_WRITERS = frozenset({"libx264", "libx265", "mpeg2video", "h264_nvenc", "hevc_nvenc"})
#: The frames' other side data an encoder may write back, by name, with the encoders that do:
#: FFmpeg's encoders write no active format description, and only NVENC's HEVC writes SMPTE timecodes.
SIDE_DATA_WRITERS = {av.sidedata.sidedata.Type.AFD: ("active format description (AFD)", frozenset()),
                     av.sidedata.sidedata.Type.S12M_TIMECODE: ("SMPTE timecode", frozenset({"hevc_nvenc"}))}
#: Encoders that code time in frames: their time base must be one frame (an MPEG transport
#: stream's 1/90000 s is refused); frames are re-timed to it as they are encoded.
_FRAME_CLOCKED = frozenset({"mpeg2video"})
#: Codec tags kept from the input when the output has the same codec: Apple's players play HEVC
#: only as ``hvc1`` (parameter sets in the header), which FFmpeg would write as ``hev1``.
_KEPT_TAGS = frozenset({"hvc1", "hev1", "avc1", "avc3"})


#: The encoder's threading, as the ffmpeg command line has it: x264 encodes several frames at once.
#: PyAV's default, "SLICE", splits each frame across the threads instead: 1.8x slower at 1080p on
#: 16 cores, and larger files (BENCHMARKS.md, run K).
THREAD_TYPE = "AUTO"


#: What a failed write raises: the file system's errors and FFmpeg's.
WRITE_FAILURES = (OSError, av.FFmpegError)


def _muxer_options(ext: str, source: av.container.InputContainer) -> dict[str, str]:
    """MP4/MOV edit lists (B-frame delay, AAC priming) are written in the movie timescale, 1/1000 s
    by default: rounding there moves every timestamp by a fraction of a millisecond. A timescale
    that every stream's time base divides keeps them exact. QuickTime keys need a flag of their own."""
    if ext not in (".mp4", ".mov"):
        return {}
    options = {}
    scale = 1
    for stream in source.streams:
        if stream.type in ("video", "audio", "subtitle") and stream.time_base:
            scale = math.lcm(scale, stream.time_base.denominator)
    if 1000 < scale < 2**31:
        options["movie_timescale"] = str(scale)
    if any(key.startswith("com.apple.quicktime.") for key in source.metadata):
        options["movflags"] = "use_metadata_tags"  # QuickTime keys (make, model, location) as the input has them
    return options


class VideoWriter(AbortedOnError):
    """Writes OUTPUT through a temporary file beside it, renamed into place only by :meth:`close`;
    encoded as ``settings`` say (their codec, crf, preset, pix_fmt, encoder_threads, faststart and strict)."""

    def __init__(self, output: Path, source: av.container.InputContainer, info: VideoInfo,
                 settings: RestoreOptions, overwrite: bool = False) -> None:
        self.output = output
        self.overwrite = overwrite
        self.strict = settings.strict
        self.faststart = not settings.no_faststart  # an MP4/MOV's index goes to the front once finished
        self.warnings: list[str] = []
        ext = output.suffix.lower()
        if ext not in CONTAINERS:
            raise OutputError(f"unsupported output extension {output.suffix!r}; use one of {', '.join(CONTAINERS)}")
        rules = CONTAINERS[ext]
        src_video = video_stream(source)
        choice = choose_encoder(ext, rules.video, src_video, settings.codec, info.pix_fmt)
        codec = checked_encoder(choice.codec, ext, rules.video, settings)
        for message in choice.warnings:
            self._warn(message)
        if settings.pix_fmt:
            self.pix_fmt = settings.pix_fmt
        else:
            self.pix_fmt, lost = pick_pix_fmt(codec, info.pix_fmt)
            if lost:
                self._warn(f"{codec.name} cannot store {info.pix_fmt}; encoded as {self.pix_fmt}, losing "
                           f"{' and '.join(lost)}")
        # HDR10 metadata travels in the bitstream where the encoder writes it, and in the file's
        # header whatever the codec (written once the file is finished): players read either.
        self.hdr_params = info.hdr.encoder_params(codec.name) if info.hdr is not None else []
        self.field_params: list[str] | None = None  # set when the output is coded interlaced
        self.stamp: FieldStamp | None = None
        if info.fields is not None:
            self.field_params = interlaced_params(codec.name, info.fields)
            if self.field_params is None:
                self._warn(f"{codec.name} cannot code interlaced video; the {info.fields.name} fields are "
                           f"stored woven in frames flagged progressive")
            else:
                self.stamp = FieldStamp(info.fields)
        if info.captions and codec.name not in CAPTION_WRITERS:
            self._warn(f"the closed captions in the input's video are left out: {codec.name} cannot carry them "
                       f"({', '.join(sorted(CAPTION_WRITERS))} can)")
        for kind, (name, writers) in SIDE_DATA_WRITERS.items():
            if kind in info.frame_side_data and codec.name not in writers:
                can = f"{', '.join(sorted(writers))} can" if writers else "no FFmpeg encoder can"
                self._warn(f"the {name} on the input's frames is left out: {codec.name} cannot write it ({can})")
        tracks = mp4_tracks(source)
        #: 360° and stereo 3D, for the finished file's header
        self.spatial = self._spatial_layout(info, source, tracks, src_video.index, ext)
        sar = src_video.sample_aspect_ratio
        #: non-square pixels: every frame carries the SAR (FFV1 codes it in each frame's header)
        self.anamorphic = bool(sar) and sar != 1
        #: restored frames need the decoded frames' properties: their side data or their SAR
        self.carries_frame_properties = self.anamorphic or bool(info.frame_side_data)
        self.info = info
        self._encoder_setup = (src_video, codec, choice, settings)
        self.claim = OutputClaim(output, overwrite)
        remove_stale_partials(output)
        self.tmp = partial_path(output)
        try:
            self.container = av.open(str(self.tmp), "w", options=_muxer_options(ext, source))
        except (OSError, av.FFmpegError) as exc:
            self.claim.release()
            raise OutputError(f"cannot write {output}: {reason(exc)}") from None
        try:
            self._setup(source, tracks, rules, ext)
        except BaseException:
            self.abort()
            raise
        self._pending: list[av.Packet] = []  # copied packets waiting for the video to catch up

    def _spatial_layout(self, info: VideoInfo, source: av.container.InputContainer, tracks: list[Track],
                        video_index: int, ext: str) -> SpatialLayout | None:
        """The input video's 360° and stereo-3D layout, read from its own boxes (MP4/MOV) or
        elements (Matroska/WebM), where the output can state it; where it cannot, one warning
        names the metadata left out."""
        if not info.spatial:
            return None
        layout = None
        if tracks:
            layout = SpatialLayout.from_mp4(tracks[video_index].entry_boxes if video_index < len(tracks) else {})
        elif "matroska" in source.format.name:
            layout = SpatialLayout.from_matroska(read_video_elements(Path(source.name)))
        if layout is not None and ext in (".mkv", ".webm"):
            return layout
        if layout is not None and ext in (".mp4", ".mov") and layout.mp4_boxes() is not None:
            return layout
        self._warn(f"the {' and '.join(info.spatial)} metadata is left out: gpen-video keeps it between .mp4, "
                   f".mov, .mkv and .webm files (MP4 and MOV hold no stereo layout but top-bottom and side by side)")
        return None

    def _setup(self, source: av.container.InputContainer, tracks: list[Track], rules: ContainerRules,
               ext: str) -> None:
        info = self.info
        src_video, codec, _, settings = self._encoder_setup
        video = self.container.add_stream(codec.name, rate=info.average_rate or None)
        video.time_base = info.time_base
        self._configure(video.codec_context)
        tag = src_video.codec_context.codec_tag
        if ext in (".mp4", ".mov") and tag in _KEPT_TAGS and src_video.codec_context.name == codec.canonical_name:
            video.codec_context.codec_tag = tag
        if info.display_matrix is not None:
            video.set_display_matrix(info.display_matrix)  # turn and mirroring, exactly as the input's
        self.video = video
        self.companions = CompanionStreams(self.container, source, tracks, src_video, video, ext, rules,
                                           self._warn)
        try:
            self.container.start_encoding()
        except av.FFmpegError as exc:
            given = f" (its options: --encoder-options {settings.encoder_options})" if settings.encoder_options else ""
            raise OutputError(f"cannot start encoding {self.output.name} with {codec.name}: "
                              f"{exc.strerror or exc}{given}") from None
        self.companions.write_header_extras()

    def _configure(self, cc: av.codec.context.CodecContext) -> None:
        """Everything the video encoder is told: size, pixel format, timing, colour tags, quality."""
        info = self.info
        src_video, codec, choice, settings = self._encoder_setup
        src_cc = src_video.codec_context
        turned = Orientation.of_matrix(info.display_matrix).transpose
        coded_w, coded_h = (info.height, info.width) if turned else (info.width, info.height)
        cc.width, cc.height = coded_w, coded_h
        cc.pix_fmt = self.pix_fmt
        cc.time_base = info.time_base
        if info.average_rate:
            cc.framerate = info.average_rate
            if codec.name in _FRAME_CLOCKED:
                cc.time_base = 1 / info.average_rate
        cc.color_range, cc.colorspace = src_cc.color_range, src_cc.colorspace
        cc.color_primaries, cc.color_trc = src_cc.color_primaries, src_cc.color_trc
        if src_video.sample_aspect_ratio:  # the container's, else the bitstream's
            cc.sample_aspect_ratio = src_video.sample_aspect_ratio
        if self.field_params is not None:
            cc.flags |= av.codec.context.Flags.interlaced_dct | av.codec.context.Flags.interlaced_me
            cc.field_order = info.fields.code
        if settings.encoder_threads:
            cc.thread_count = settings.encoder_threads
        cc.thread_type = THREAD_TYPE
        options = encoder_options(codec.name, choice, settings)
        if info.captions and codec.name == "libx265":
            options["a53cc"] = "1"  # off by default in FFmpeg's x265 wrapper, on in the others
        params = quieted(codec.name) + self.hdr_params + (self.field_params or [])
        if params:  # ahead of the user's own --encoder-options list, which wins where they overlap
            key = PARAMS_OPTION[codec.name]
            options[key] = ":".join(params + ([options[key]] if options.get(key) else []))
        cc.options = options

    def new_encoder(self) -> av.codec.context.CodecContext:
        """A fresh encoder configured exactly as this file's video stream (same parameter sets), for
        encoding segments apart whose packets this writer muxes later (:meth:`write_encoded`)."""
        cc = av.CodecContext.create(self.video.codec_context.name, "w")
        self._configure(cc)
        if self.video.codec_context.flags & av.codec.context.Flags.global_header:
            cc.flags |= av.codec.context.Flags.global_header
        return cc

    def write_encoded(self, packets: list[av.Packet]) -> None:
        """Mux video packets encoded elsewhere by a :meth:`new_encoder`, in decoding order."""
        for packet in packets:
            packet.stream = self.video
        with failures_as(OutputError, f"cannot write {self.output}", WRITE_FAILURES):
            self._mux_video(packets)

    def _warn(self, message: str) -> None:
        """Something of the input that the output cannot keep: said once, or refused with --strict."""
        if self.strict:
            raise OutputError(f"{message} (refused: --strict)")
        log.warning(message)
        self.warnings.append(message)

    @property
    def copied_streams(self) -> set[int]:
        """Input streams whose packets this writer takes (copied or re-encoded)."""
        return self.companions.packet_streams

    def write_packet(self, packet: av.Packet) -> None:
        """Take a packet of another stream; it is muxed once the video has reached its time."""
        self._pending += self.companions.take(packet)

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
        format and size), with the decoded frame's timing (and, interlaced, its field order)."""
        decoded = source.frame
        frame = decoded if restored is None else self._with_frame_properties(decoded, restored)
        target = self.video.codec_context.pix_fmt
        if frame.format.name == f"yuvj{target.removeprefix('yuv')}":
            # The same samples, tagged full range: swscale would squeeze them into limited range.
            frame = planes_to_frame(frame_planes(frame), frame, format=target)
        elif frame.format.name != target:
            converted = reformat_fields(frame, target) if self.info.fields else frame.reformat(format=target)
            frame = copy_colour_tags(decoded, converted)
        frame.pts = decoded.pts
        frame.time_base = decoded.time_base
        frame.pict_type = av.video.frame.PictureType.NONE
        return frame if self.stamp is None else self.stamp(frame)

    def _with_frame_properties(self, decoded: av.VideoFrame, restored: av.VideoFrame) -> av.VideoFrame:
        """``restored``, or where the video's frames carry what encoders write back from each frame
        (captions, AFD, timecode, a non-square SAR), the decoded frame itself with the restored
        samples copied in: PyAV can neither set side data nor the SAR on a new frame. (Making it
        writable copies the samples first if the decoder still refers to them.) Decided per video
        from its first frame: reading a frame's side data ties the frame in a reference cycle, and
        frames freed only by the garbage collector made memory grow with the video's length."""
        if not self.carries_frame_properties:
            return restored
        decoded.make_writable()
        for dst, plane in zip(writable_planes(decoded), frame_planes(restored)):
            dst[...] = plane
        return decoded

    def write(self, source: SourceFrame, restored: av.VideoFrame | None = None) -> None:
        """Encode one frame: ``source`` as decoded, or the ``restored`` frame in its place."""
        frame = self.encoder_frame(source, restored)
        with failures_as(OutputError, f"encoding failed at frame {source.index}", WRITE_FAILURES):
            self._mux_video(self.video.encode(frame))

    def close(self) -> None:
        """Flush, finish the file and move it into place."""
        try:
            with failures_as(OutputError, f"cannot finish {self.output}", WRITE_FAILURES):
                self._mux_video(self.video.encode(None))
                self._pending += self.companions.flush()
                self._mux_pending(None)
                self.container.close()
                cc = self.video.codec_context
                shown = (shown_width(cc.width, cc.sample_aspect_ratio), cc.height) if self.anamorphic else None
                for message in write_headers(self.tmp, self.output.suffix.lower(), self.info, bool(self.hdr_params),
                                             self.spatial, shown, self.faststart):
                    log.warning(message)
                    self.warnings.append(message)
        except BaseException:
            self.abort()
            raise
        try:
            with failures_as(OutputError, f"cannot move the finished file into {self.output}", WRITE_FAILURES):
                self.claim.publish(self.tmp)
        finally:
            self.tmp.unlink(missing_ok=True)

    def abort(self) -> None:
        """Drop the partial output."""
        self._pending = []
        try:
            self.container.close()
        except Exception:  # the file is being thrown away; its trailer does not matter
            pass
        self.tmp.unlink(missing_ok=True)
        self.claim.release()
