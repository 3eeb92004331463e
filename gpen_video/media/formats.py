"""Which encoder and pixel format an output gets: the input's own, unless the user says otherwise
or the container cannot hold it, and every loss on the way named in words.

The choice is pure logic over FFmpeg's codec and format tables, so it is decided (and any loss
refused with ``--strict``) before a frame is decoded.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

import av
import av.logging

from ..errors import OutputError
from ..values import encoder_option_pairs
from .hdr import PARAMS_OPTION

if TYPE_CHECKING:
    from ..options import RestoreOptions

#: Visually lossless defaults per encoder family.
DEFAULT_CRF = {"libx264": 18, "libx265": 20, "libvpx-vp9": 20, "libsvtav1": 24}
#: Encoders that take a bit rate (--bitrate, --maxrate).
RATE_TAKERS = frozenset({"libx264", "libx265", "libvpx-vp9", "libsvtav1", "h264_nvenc", "hevc_nvenc", "mpeg2video"})
#: The highest --crf each encoder takes (the lowest is 0): x264 and x265 refuse more, or print
#: their own error before FFmpeg's "Invalid data".
MAX_CRF = {"libx264": 51, "libx265": 51, "libvpx-vp9": 63, "libsvtav1": 63}
DEFAULT_PRESET = {"libx264": "fast", "libx265": "fast", "h264_nvenc": "p5", "hevc_nvenc": "p5", "libsvtav1": "8"}
#: What x264 takes as its preset, tune and profile (x264.h's name lists; a tune may join several,
#: as ``film+fastdecode``). Checked before the encoder opens: x264 prints its own refusal to the
#: terminal, beside the one line a bad option gets.
X264_NAMES = {"preset": ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower",
                         "veryslow", "placebo"),
              "tune": ("film", "animation", "grain", "stillimage", "psnr", "ssim", "fastdecode", "zerolatency"),
              "profile": ("baseline", "main", "high", "high10", "high422", "high444")}
#: Container (by extension) -> the encoders tried when the input's own codec cannot be followed:
#: the first that keeps the input's pixel format whole, else the first (AV1 keeps 10-bit in WebM,
#: where this FFmpeg's VP9 takes 8 bits only; x265 keeps 12-bit where x264 stops at 10).
FALLBACK_CODECS = {".mp4": ("libx264", "libx265"), ".mov": ("libx264", "libx265"), ".mkv": ("libx264", "libx265"),
                   ".webm": ("libvpx-vp9", "libsvtav1")}
#: Input codec (canonical name) -> the encoder that writes the same format.
FOLLOW_CODEC = {"h264": "libx264", "hevc": "libx265", "prores": "prores_ks", "vp9": "libvpx-vp9",
                "ffv1": "ffv1", "av1": "libsvtav1", "dvvideo": "dvvideo", "dnxhd": "dnxhd",
                "mpeg2video": "mpeg2video"}
#: Input codecs that store every sample exactly: an output that cannot be one of them is
#: encoded losslessly another way (x264 at CRF 0) rather than lossily.
LOSSLESS_CODECS = frozenset({"ffv1", "huffyuv", "ffvhuff", "utvideo", "magicyuv", "png", "qtrle", "rawvideo"})
#: ProRes profile names as FFmpeg's decoder reports them -> prores_ks's ``profile`` option.
PRORES_PROFILES = {"Proxy": "proxy", "LT": "lt", "Standard": "standard", "HQ": "hq", "4444": "4444", "XQ": "4444xq"}
#: DNxHD/DNxHR profile names as FFmpeg's decoder reports them -> the dnxhd encoder's ``profile``.
DNX_PROFILES = {"DNXHD": "dnxhd", "DNXHR LB": "dnxhr_lb", "DNXHR SQ": "dnxhr_sq", "DNXHR HQ": "dnxhr_hq",
                "DNXHR HQX": "dnxhr_hqx", "DNXHR 444": "dnxhr_444"}
#: MPEG-2's quantiser where the input's bit rate is unknown: 2, as FFmpeg users write ``-q:v 2``
#: for near-transparent MPEG-2 (in FFmpeg's lambda units, 118 a step).
_MPEG2_QUALITY = str(2 * 118)


@dataclass(frozen=True)
class PixelTraits:
    """What a pixel format keeps of a picture: sample depth, chroma subsampling, alpha."""

    bits: int
    chroma_shift: tuple[int, int]  # log2 (horizontal, vertical) subsampling of the chroma planes
    alpha: bool
    rgb: bool

    @classmethod
    def of(cls, name: str) -> PixelTraits:
        fmt = av.VideoFormat(name, 64, 64)
        components = fmt.components
        colour = [c for c in components if not c.is_alpha]
        shift = (0, 0)
        if len(colour) == 3 and not fmt.is_rgb:
            shift = ((64 // colour[1].width).bit_length() - 1, (64 // colour[1].height).bit_length() - 1)
        elif len(colour) == 1:  # grey: no chroma at all, the most subsampled of all
            shift = (8, 8)
        return cls(max(c.bits for c in components), shift, any(c.is_alpha for c in components), fmt.is_rgb)

    @property
    def chroma(self) -> str:
        return {(0, 0): "4:4:4", (1, 0): "4:2:2", (1, 1): "4:2:0", (2, 0): "4:1:1", (0, 1): "4:4:0",
                (2, 2): "4:1:0", (8, 8): "grey"}.get(self.chroma_shift, "subsampled")

    def losses_to(self, other: PixelTraits) -> list[str]:
        """What a picture in this format loses when stored as ``other``, in words."""
        lost = []
        if self.alpha and not other.alpha:
            lost.append("the alpha channel")
        if other.chroma_shift[0] > self.chroma_shift[0] or other.chroma_shift[1] > self.chroma_shift[1]:
            lost.append(f"{self.chroma} chroma (stored as {other.chroma})")
        if other.bits < self.bits:
            lost.append(f"{self.bits}-bit samples (stored as {other.bits}-bit)")
        return lost


def pick_pix_fmt(codec: av.codec.Codec, wanted: str) -> tuple[str, list[str]]:
    """The input's pixel format if the encoder takes it, else the one that loses least of it
    (alpha, then chroma, then depth), with the losses in words."""
    formats = [f.name for f in codec.video_formats or []]
    if not formats or wanted in formats:
        return wanted, []
    source = PixelTraits.of(wanted)

    def cost(name: str) -> tuple:
        traits = PixelTraits.of(name)
        return (source.alpha and not traits.alpha,
                max(traits.chroma_shift[0] - source.chroma_shift[0], 0)
                + max(traits.chroma_shift[1] - source.chroma_shift[1], 0),
                max(source.bits - traits.bits, 0),
                traits.rgb != source.rgb,
                traits.alpha != source.alpha,  # no alpha plane the input lacks
                traits.bits - source.bits,  # then the smallest that holds it all
                traits.chroma_shift != source.chroma_shift)

    best = min(formats, key=cost)
    return best, source.losses_to(PixelTraits.of(best))


@dataclass
class EncoderChoice:
    """The encoder for an output, and why it is that one."""

    codec: str
    options: dict[str, str] = field(default_factory=dict)  # encoder options the input calls for
    lossless: bool = False  # CRF 0, standing in for a lossless input codec
    warnings: list[str] = field(default_factory=list)


def choose_encoder(ext: str, allowed: frozenset[str], source: av.stream.Stream, asked: str | None,
                   pix_fmt: str) -> EncoderChoice:
    """``asked`` when the user named an encoder; else the one that writes the input's own codec,
    with the input's ProRes profile, when the container ``ext`` can hold it; else one of the
    container's (x264 at CRF 0 for a lossless input), with a warning naming the codec it changes."""
    if asked:
        return EncoderChoice(asked, _input_options(asked, source))
    name = source.codec_context.codec.canonical_name
    follow = FOLLOW_CODEC.get(name)
    if follow is not None and follow in av.codecs_available and name in allowed:
        return EncoderChoice(follow, _input_options(follow, source))
    lossless = name in LOSSLESS_CODECS and "h264" in allowed
    candidates = [c for c in FALLBACK_CODECS[ext] if c in av.codecs_available]
    keeping = [c for c in candidates if not pick_pix_fmt(av.codec.Codec(c, "w"), pix_fmt)[1]]
    fallback = "libx264" if lossless else (keeping or candidates)[0]
    warnings = []
    if name in LOSSLESS_CODECS and not lossless:
        warnings.append(f"the input's video is lossless {name}, which {ext} cannot hold; it is encoded lossily "
                        f"as {_format_name(fallback)} ({fallback}): use .mkv to keep it lossless")
    else:
        how = "losslessly as h264 (libx264 at CRF 0)" if lossless else f"as {_format_name(fallback)} ({fallback})"
        why = f"{ext} cannot hold the input's {name} video" if follow is not None else \
            f"the input's {name} video is not written back as {name}"
        warnings.append(f"{why}; it is encoded {how} (--codec names another encoder)")
    return EncoderChoice(fallback, lossless=lossless, warnings=warnings)


def checked_encoder(name: str, ext: str, allowed: frozenset[str], settings: RestoreOptions) -> av.codec.Codec:
    """The encoder ``name``, once it is known to exist, to encode video that an ``ext`` file can
    hold, and to take ``--preset``, ``--crf``, ``--bitrate``, ``--maxrate`` and each of
    ``--encoder-options`` if given: FFmpeg would drop an option the encoder does not know without a word."""
    preset, crf = settings.preset, settings.crf
    try:
        codec = av.codec.Codec(name, "w")
    except Exception:
        raise OutputError(f"encoder {name!r} is not available in this FFmpeg build") from None
    if codec.type != "video":
        raise OutputError(f"{name!r} is not a video encoder")
    if codec.name not in allowed and codec.canonical_name not in allowed:
        raise OutputError(f"a {ext} file cannot hold {codec.canonical_name} video; "
                          f"use one of {', '.join(sorted(allowed))} or another extension")
    for flag, value, takers in (("--preset", preset, DEFAULT_PRESET), ("--crf", crf, DEFAULT_CRF)):
        if value is not None and codec.name not in takers:
            raise OutputError(f"{codec.name} takes no {flag}; {', '.join(takers)} do")
    given = encoder_option_pairs(settings.encoder_options or "")
    if codec.name == "libx264":
        _check_x264_names(preset, given)
    if crf is not None and crf > MAX_CRF[codec.name]:
        raise OutputError(f"--crf {crf} is beyond {codec.name}'s range, 0 to {MAX_CRF[codec.name]}")
    for flag, value in (("--bitrate", settings.bitrate), ("--maxrate", settings.maxrate)):
        if value is not None and codec.name not in RATE_TAKERS:
            raise OutputError(f"{codec.name} takes no {flag}; {', '.join(sorted(RATE_TAKERS))} do")
    if given:
        known = av.CodecContext.create(codec.name, "w").supported_options
        names = {o.name for o in (*known.generic, *known.private)}
        for key in given:
            if key not in names:
                near = difflib.get_close_matches(key, sorted(names), n=1)
                hint = f"; did you mean {near[0]}?" if near else ""
                raise OutputError(f"--encoder-options: {codec.name} has no option {key!r}{hint}")
        refused = _refused_parameter(codec.name, given)
        if refused is not None:
            raise OutputError(f"--encoder-options: {codec.name} refused {PARAMS_OPTION[codec.name]}: {refused}")
    return codec


def _check_x264_names(preset: str | None, options: dict[str, str]) -> None:
    """``--preset`` and the preset, tune and profile among ``--encoder-options`` are names x264 knows."""
    given = [("--preset ", "preset", preset)] + [(f"--encoder-options {key}=", key, options[key])
                                                 for key in X264_NAMES if key in options]
    for flag, key, value in given:
        names = re.split(r"[,./+-]", value) if key == "tune" and value else [value]
        for name in names:
            if name is not None and name.lower() not in X264_NAMES[key]:
                raise OutputError(f"{flag}{value}: libx264 has no {key} {name!r} (its {key}s: "
                                  f"{', '.join(X264_NAMES[key])})")


def quieted(codec: str) -> list[str]:
    """The parameter list entries (and environment) that keep an encoder's own log to its
    errors: x265 and SVT-AV1 print their whole configuration to stderr otherwise."""
    if codec == "libsvtav1":
        os.environ.setdefault("SVT_LOG", "1")
    return ["log-level=error"] if codec == "libx265" else []


def _refused_parameter(codec: str, options: dict[str, str]) -> str | None:
    """What the encoder said of an entry of its parameter list (``x264-params``, ``x265-params``,
    ``svtav1-params``) that it could not take, opened on a small picture with that list: it only
    warns, and encodes without the entry. None when it took them all."""
    given = options.get(PARAMS_OPTION.get(codec, ""))
    if not given:
        return None
    context = av.CodecContext.create(codec, "w")
    context.width, context.height, context.pix_fmt, context.time_base = 64, 64, "yuv420p", Fraction(1, 25)
    context.options = {PARAMS_OPTION[codec]: ":".join([*quieted(codec), given])}
    level = av.logging.get_level()
    av.logging.set_level(av.logging.WARNING)
    try:
        with av.logging.Capture() as said:
            context.open()
    finally:
        av.logging.set_level(level)
    refusals = [text.strip() for _, name, text in said if name == codec and ("option" in text or "value" in text)]
    return refusals[0] if refusals else None


def encoder_options(codec: str, choice: EncoderChoice, settings: RestoreOptions) -> dict[str, str]:
    """The encoder's options: what the input calls for; the quality (``--crf``, else a
    ``--bitrate``, else the codec's visually lossless CRF, CRF 0 where standing in for a lossless
    codec), capped at ``--maxrate``; the preset; last, ``--encoder-options``, which win."""
    options = dict(choice.options)
    crf, preset = settings.crf, settings.preset
    if settings.bitrate is not None:
        options["b"] = str(settings.bitrate)
    elif crf is None:
        crf = 0 if choice.lossless else DEFAULT_CRF.get(codec)
    if crf is not None:
        options["crf"] = str(crf)
        if codec == "libvpx-vp9":
            options["b"] = "0"  # constant quality, not a bit rate
    if settings.maxrate is not None:
        options.update(maxrate=str(settings.maxrate), bufsize=str(2 * settings.maxrate))
    preset = preset or DEFAULT_PRESET.get(codec)
    if preset is not None:
        options["preset"] = preset
    if settings.encoder_options:
        options.update(encoder_option_pairs(settings.encoder_options))
    return options


def _format_name(encoder: str) -> str:
    return av.codec.Codec(encoder, "w").canonical_name


def _input_options(encoder: str, source: av.stream.Stream) -> dict[str, str]:
    """What an encoder needs to write the input's own flavour of its codec: ProRes's profile
    (4444 keeps alpha; prores_ks would pick HQ), DNxHD/DNxHR's profile (and classic DNxHD's bit
    rate, which picks its compression ID; DNxHR HQ from other codecs), MPEG-2's bit rate (its
    encoder's default is 200 kb/s), FFV1's version 3."""
    name = source.codec_context.codec.canonical_name
    if encoder == "prores_ks" and name == "prores":
        profile = PRORES_PROFILES.get(source.profile or "")
        return {"profile": profile} if profile else {}
    bit_rate = source.bit_rate or source.codec_context.bit_rate
    if encoder == "dnxhd":  # DNxHR HQ unless the input is DNx: classic DNxHD takes a few sizes only
        profile = DNX_PROFILES.get((source.profile or "").upper(), "") if name == "dnxhd" else "dnxhr_hq"
        options = {"profile": profile} if profile else {}
        if profile == "dnxhd" and bit_rate:
            options["b"] = str(round(bit_rate / 1e6) * 1_000_000)  # the compression IDs come in whole Mb/s
        return options
    if encoder == "ffv1":
        return {"level": "3"}  # as archives write FFV1: CRCs in each slice, the SAR in each frame
    if encoder == "mpeg2video":
        if name == "mpeg2video" and bit_rate:
            return {"b": str(bit_rate), "maxrate": str(bit_rate), "bufsize": str(bit_rate // 2)}
        return {"flags": "+qscale", "global_quality": _MPEG2_QUALITY}
    return {}
