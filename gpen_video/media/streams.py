"""Everything in the input besides the restored video, as the output keeps it: audio, subtitles,
captions, attachments, cover art, timecode, telemetry, chapters, flags and metadata.

Each input stream is copied packet for packet with its flags (default, forced, ...), language and
title where the output container can hold it. What it cannot hold is converted when that loses
nothing a viewer notices (audio re-encoded, cover art as a Matroska attachment, a timecode track
rebuilt by the muxer) and named in one warning line either way; what cannot be kept at all is
left out with a warning that says so.

An MP4/MOV data track is told apart by what its boxes say it is (media/isobmff.py), not by the
container: FFmpeg reads a QuickTime chapter track, a GoPro's telemetry and a camera's timed
metadata alike as ``bin_data``, and its muxer would write any of them back as telemetry.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import av

from .containers import CONTAINERS, ContainerRules
from .isobmff import BoxError, Track, read_tracks
from .opening import is_cover_art, open_input

#: Re-encoded audio's bit rate.
AUDIO_BIT_RATE = 256_000
#: Metadata keys the muxers write themselves; copying them would describe the input's muxer.
_OWN_KEYS = frozenset({"encoder", "major_brand", "minor_version", "compatible_brands", "handler_name",
                       "vendor_id", "duration"})
#: Containers that take attachments (fonts, cover art as a file) and those that take cover art as
#: an attached-picture stream.
_ATTACHMENTS = frozenset({".mkv"})
_COVER_STREAMS = frozenset({".mp4", ".mov"})
#: The containers that hold a GoPro's GPMF telemetry track (``gpmd``: accelerometer, gyroscope,
#: GPS), copied packet for packet; Matroska takes no data tracks.
_DATA_TRACKS = frozenset({".mp4", ".mov"})
#: MP4/MOV data tracks' sample entries, in words, for the warning that names one left out.
_DATA_ENTRIES = {b"mebx": "Apple timed metadata", b"rtmd": "Sony real-time metadata", b"camm": "camera motion",
                 b"mett": "text metadata", b"metx": "XML metadata", b"urim": "URI metadata"}
_IMAGE_TYPES = {"mjpeg": ("jpg", "image/jpeg"), "png": ("png", "image/png"), "bmp": ("bmp", "image/bmp")}
#: ISO 639-2 codes as FFmpeg's MOV muxer spells them: it writes a MOV track's language only from
#: QuickTime's old Macintosh language list, which uses the bibliographic form of some codes and
#: the terminological form of others, and drops a code spelled the other way ("deu" for German).
_QUICKTIME_LANGUAGE = {"deu": "ger", "nld": "dut", "ell": "gre", "isl": "ice", "zho": "chi", "sqi": "alb",
                       "mkd": "mac", "hye": "arm", "kat": "geo", "bod": "tib", "mya": "bur", "msa": "may",
                       "cym": "wel", "eus": "baq", "fre": "fra", "rum": "ron", "cze": "ces", "slo": "slk"}


def own_metadata(metadata: dict[str, str]) -> dict[str, str]:
    """``metadata`` less what a muxer writes of itself (it would describe the input's muxer)."""
    return {k: v for k, v in metadata.items() if k.lower() not in _OWN_KEYS}


def _audio_layout(layout: av.AudioLayout) -> av.AudioLayout:
    """``layout``, or the usual one for its channel count where the input leaves the channel order
    unspecified (PCM in AVI, say): encoders such as AAC refuse an unordered layout."""
    if layout.name == f"{layout.nb_channels} channels":
        return av.AudioLayout(f"{layout.nb_channels}c")  # FFmpeg's default layout for that many channels
    return layout


class _AudioTranscoder:
    """Re-encodes an audio stream the output container cannot hold (e.g. PCM into MP4)."""

    def __init__(self, container: av.container.OutputContainer, source: av.stream.Stream, codec: str) -> None:
        self.source = source
        rate = 48000 if codec == "libopus" else source.rate  # Opus runs at 48 kHz
        layout = _audio_layout(source.layout)
        self.stream = container.add_stream(codec, rate=rate)
        self.stream.layout = layout
        self.stream.bit_rate = AUDIO_BIT_RATE
        sample_format = self.stream.codec_context.codec.audio_formats[0].name
        self.resampler = av.AudioResampler(format=sample_format, layout=layout, rate=rate)

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


def _first_packet(path: str, index: int) -> bytes:
    """The data of stream ``index``'s first packet (a cover picture's only one), read apart."""
    with open_input(path) as container:
        stream = container.streams[index]
        for packet in container.demux(stream):
            if packet.size:
                return bytes(packet)
    return b""


class CompanionStreams:
    """The output's streams beside the restored video, set up from the input's before the
    header is written (``tracks``: what each MP4/MOV track is, :func:`mp4_tracks`); the pipeline
    hands them their packets (:meth:`take`)."""

    def __init__(self, output: av.container.OutputContainer, source: av.container.InputContainer,
                 tracks: list[Track], video_in: av.stream.Stream, video_out: av.stream.Stream, ext: str,
                 rules: ContainerRules, warn: Callable[[str], None]) -> None:
        self.output = output
        self.ext = ext
        self.warn = warn
        self.copies: dict[int, av.stream.Stream] = {}
        self.transcodes: dict[int, _AudioTranscoder] = {}
        self.covers: list[tuple[av.stream.Stream, bytes]] = []  # muxed once the header is written
        output.metadata.update(own_metadata(source.metadata))
        _copy_flags(video_in, video_out, ext)
        chapter_tracks = {track_id for track in tracks for track_id in track.chapters}
        for stream in source.streams:
            track = tracks[stream.index] if stream.index < len(tracks) else None
            if stream.index == video_in.index or (track is not None and track.track_id in chapter_tracks):
                continue  # a chapter track is the chapter list, written as chapters below
            if is_cover_art(stream):
                self._add_cover(source, stream)
            elif stream.type in ("audio", "subtitle"):
                self._add_media(stream, rules)
            elif stream.type == "attachment":
                self._add_attachment(stream)
            elif stream.type == "data" and "timecode" in stream.metadata:
                self._add_timecode(stream, video_out)
            elif track is not None and track.sample_entry == b"gpmd":
                self._add_data(stream)
            elif stream.type == "data":
                what = _codec_name(stream)
                if track is not None:
                    entry = track.sample_entry.decode("latin-1")
                    what = f"{entry}: {_DATA_ENTRIES[track.sample_entry]}" if track.sample_entry in _DATA_ENTRIES \
                        else entry
                self.warn(f"data stream #{stream.index} ({what}) is left out: of the data tracks, gpen-video "
                          f"keeps timecode and GoPro telemetry (gpmd) only")
            else:
                self.warn(f"{stream.type} stream #{stream.index} ({_codec_name(stream)}) is left out: gpen-video "
                          f"restores the first video stream and keeps audio, subtitles, attachments, cover art, "
                          f"timecode and telemetry beside it")
        self._add_chapters(source)

    @property
    def packet_streams(self) -> set[int]:
        """Input streams whose packets go to :meth:`take` (copied or re-encoded)."""
        return set(self.copies) | set(self.transcodes)

    def _add_media(self, stream: av.stream.Stream, rules: ContainerRules) -> None:
        name = _codec_name(stream)
        allowed = rules.audio if stream.type == "audio" else rules.subtitles
        if allowed is None or name in allowed:
            out = self.output.add_stream_from_template(stream)
            self.copies[stream.index] = out
        elif stream.type == "audio":
            transcoder = _AudioTranscoder(self.output, stream, rules.fallback_audio)
            self.transcodes[stream.index] = transcoder
            out = transcoder.stream
            self.warn(f"audio stream #{stream.index} ({name}) cannot be copied into {self.ext}; "
                      f"re-encoded as {rules.fallback_audio} at {AUDIO_BIT_RATE // 1000} kb/s")
        else:
            holders = [ext for ext, held in CONTAINERS.items() if name in held.subtitles and ext != self.ext]
            where = f" ({' and '.join(holders)} can hold it)" if holders else ""
            self.warn(f"subtitle stream #{stream.index} ({name}) cannot be copied into {self.ext}; "
                      f"it is left out{where}")
            return
        _copy_flags(stream, out, self.ext)

    def _add_attachment(self, stream: av.stream.Stream) -> None:
        if self.ext in _ATTACHMENTS:
            self.output.add_attachment(stream.name, stream.mimetype, bytes(stream.data))
        else:
            self.warn(f"attachment {stream.name!r} ({stream.mimetype}) is left out: {self.ext} cannot hold "
                      f"attachments (.mkv can)")

    def _add_cover(self, source: av.container.InputContainer, stream: av.stream.Stream) -> None:
        picture = _first_packet(source.name, stream.index)
        name = _codec_name(stream)
        if self.ext in _COVER_STREAMS and name in _IMAGE_TYPES:
            out = self.output.add_stream_from_template(stream)
            _copy_flags(stream, out, self.ext)
            self.covers.append((out, picture))
        elif self.ext in _ATTACHMENTS and name in _IMAGE_TYPES:
            suffix, mimetype = _IMAGE_TYPES[name]
            self.output.add_attachment(f"cover.{suffix}", mimetype, picture)  # how Matroska stores cover art
        else:
            self.warn(f"cover art stream #{stream.index} ({name}) is left out: {self.ext} cannot hold it")

    def _add_timecode(self, stream: av.stream.Stream, video_out: av.stream.Stream) -> None:
        """A QuickTime timecode track: the MP4/MOV muxer writes one of its own from the video
        stream's ``timecode`` tag (and its reel name); Matroska keeps the tags alone."""
        for key in ("timecode", "reel_name"):
            if key in stream.metadata:
                video_out.metadata[key] = stream.metadata[key]
        if self.ext not in _COVER_STREAMS:
            self.warn(f"timecode track #{stream.index} is kept only as the video stream's timecode tag: "
                      f"{self.ext} has no timecode tracks")

    def _add_data(self, stream: av.stream.Stream) -> None:
        """A binary metadata track (a GoPro's telemetry), copied packet for packet where it fits."""
        if self.ext in _DATA_TRACKS:
            out = self.output.add_stream_from_template(stream)
            _copy_flags(stream, out, self.ext)
            self.copies[stream.index] = out
        else:
            self.warn(f"data track #{stream.index} ({_codec_name(stream)}) is left out: {self.ext} cannot hold "
                      f"data tracks (.mp4 and .mov can)")

    def _add_chapters(self, source: av.container.InputContainer) -> None:
        chapters = source.chapters()
        if chapters:
            self.output.set_chapters(chapters)

    def write_header_extras(self) -> None:
        """Mux what belongs at the start, once the header is written: the cover pictures."""
        for stream, picture in self.covers:
            packet = av.Packet(picture)
            packet.stream = stream
            packet.is_keyframe = True
            self.output.mux(packet)

    def take(self, packet: av.Packet) -> list[av.Packet]:
        """The output packets for one input packet of :attr:`packet_streams`."""
        transcoder = self.transcodes.get(packet.stream.index)
        if transcoder is not None:
            return transcoder.encode(packet)
        packet.stream = self.copies[packet.stream.index]
        return [packet]

    def flush(self) -> list[av.Packet]:
        """What the re-encoders still hold, at the end."""
        return [p for transcoder in self.transcodes.values() for p in transcoder.encode(None)]


def mp4_tracks(source: av.container.InputContainer) -> list[Track]:
    """What each track of an MP4/MOV input is, in stream order; empty for other containers, and
    for a file whose boxes cannot be read (its streams are then kept or named by their codec)."""
    if "mp4" not in source.format.name.split(","):
        return []
    try:
        return read_tracks(Path(source.name))
    except (BoxError, OSError, struct.error):
        return []


def _codec_name(stream: av.stream.Stream) -> str:
    """The stream's format ("mp3", not the decoder's "mp3float"); data streams have no decoder."""
    if stream.codec_context is None:  # named by its handler ("GoPro MET") where it has one
        return stream.metadata.get("handler_name") or stream.name or "unknown codec"
    return stream.codec_context.codec.canonical_name


def _copy_flags(source: av.stream.Stream, out: av.stream.Stream, ext: str) -> None:
    """The input stream's disposition flags, language, title and other tags, onto ``out``."""
    out.disposition = source.disposition
    out.metadata.update(own_metadata(source.metadata))
    language = out.metadata.get("language")
    if ext == ".mov" and language in _QUICKTIME_LANGUAGE:
        out.metadata["language"] = _QUICKTIME_LANGUAGE[language]  # the same language, as MOV spells it
