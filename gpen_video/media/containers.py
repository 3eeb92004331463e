"""What each output container (by extension) can hold: the video codecs, audio codecs and
subtitle formats FFmpeg's muxer writes into it, and the audio codec to re-encode to where a copy
is impossible. Every claim a message makes about a container comes from this table, and
tests/test_world_files.py holds its video codecs against FFmpeg's muxers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContainerRules:
    """What one output container can hold: video codecs, audio codecs (None: any), subtitle
    formats, and the audio codec to re-encode to when a copy is impossible."""

    video: frozenset[str]
    audio: frozenset[str] | None
    subtitles: frozenset[str]
    fallback_audio: str


_MP4_AUDIO = frozenset({"aac", "mp3", "mp2", "alac", "ac3", "eac3", "opus", "flac"})
CONTAINERS = {
    ".mp4": ContainerRules(frozenset({"h264", "hevc", "av1", "vp9", "mpeg2video", "ffv1"}), _MP4_AUDIO,
                           frozenset({"mov_text"}), "aac"),
    ".mov": ContainerRules(frozenset({"h264", "hevc", "prores", "dnxhd", "dvvideo", "mpeg2video"}),
                           _MP4_AUDIO | {"pcm_s16le", "pcm_s24le", "pcm_s16be", "pcm_s24be"},
                           frozenset({"mov_text", "eia_608"}), "aac"),
    ".mkv": ContainerRules(frozenset({"h264", "hevc", "prores", "ffv1", "av1", "vp9", "mpeg2video"}), None,
                           frozenset({"subrip", "ass", "ssa", "webvtt"}), "aac"),
    ".webm": ContainerRules(frozenset({"vp9", "av1"}), frozenset({"opus", "vorbis"}), frozenset({"webvtt"}), "libopus"),
}
