"""Every option, in one place: its default, type, allowed values, check and help text.

:class:`RestoreOptions` says how a restoration is done: where, with which model and detector,
how strongly, encoded how. :class:`JobOptions` says what happens around one job: replace an
existing output, resume, write a tracks file. The command line's flags are made from their fields
(``cli.py``), the API takes the same names as keywords, and a ``--resume`` job's fingerprint is
the whole of :class:`RestoreOptions`, so a job is never continued with other settings.
Setting a new option is one field here.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError
from .faces.choices import DEFAULT_DETECTOR, DEFAULT_SMOOTH, DEFAULT_THRESHOLD, DETECTORS, FACE_CHOICES
from .model.choices import DEFAULT_MODEL, OFFICIAL_MODELS, PRECISIONS

#: Frames per --resume segment: about a minute at 25 fps, so a crash loses at most that much work.
SEGMENT_FRAMES = 1500


Check = Callable[[Any], str | None]  # a value -> what is wrong with it, or None


@dataclass(frozen=True)
class Range:
    """A number's allowed range, as a check and as the words ``--help`` shows for it."""

    low: float
    high: float | None = None
    low_open: bool = False  # the low end itself is not allowed
    what: str = ""  # how a message names the range, where its numbers alone say it badly

    def __call__(self, value: float | None) -> str | None:
        if value is None:
            return None
        if value < self.low or (self.low_open and value == self.low) or (self.high is not None and value > self.high):
            return f"must be {self.what or self.describe()}, got {value}"
        return None

    def describe(self) -> str:
        if self.high is None:
            return f"at least {self.low:g}" if not self.low_open else f"more than {self.low:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"


def _at_least(low: float, what: str = "") -> Range:
    return Range(low, what=what)


def _between(low: float, high: float) -> Range:
    return Range(low, high)


def _numbers(flag: str, example: str) -> Callable[[str], tuple[int, ...]]:
    """A flag's comma-separated whole numbers: ``--gpus 0,1`` -> (0, 1)."""

    def parse(text: str) -> tuple[int, ...]:
        import argparse

        try:
            return tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes numbers like {example}; got {text!r}") from None

    return parse


def _track_ids(ids: tuple[int, ...] | None) -> str | None:
    if ids is None:
        return None
    if not ids:
        return "needs at least one track id"
    negative = [i for i in ids if i < 0]
    return f"takes track ids from 0 up, got {negative[0]}" if negative else None


def parse_time(text: str) -> float:
    """``--start 75.5``, ``--start 1:15.5`` or ``--start 00:01:15.500`` -> 75.5 seconds."""
    import argparse

    try:
        parts = [float(part) for part in text.strip().split(":")]
        if len(parts) > 3 or any(part < 0 for part in parts) or any(part >= 60 for part in parts[1:]):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes seconds (75.5) or [HH:]MM:SS.mmm (1:15.5); got {text!r}") from None
    return sum(part * 60 ** power for power, part in enumerate(reversed(parts)))


def parse_rate(text: str) -> int:
    """``--bitrate 8M``, ``8000k`` or ``8000000`` -> bits per second."""
    import argparse

    scale = {"k": 1000, "m": 1000**2, "g": 1000**3}.get(text.strip()[-1:].lower(), 1)
    try:
        return round(float(text.strip()[:-1] if scale > 1 else text) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes bits per second, as 8M, 8000k or 8000000; got {text!r}") from None


def encoder_option_pairs(text: str) -> dict[str, str]:
    """``tune=film,x264-params=aq-mode=3:ref=4`` -> {"tune": "film", "x264-params": "aq-mode=3:ref=4"}."""
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    return {key.strip(): value.strip() for key, value in pairs}


def _key_values(text: str | None) -> str | None:
    if text is None:
        return None
    bad = [item for item in text.split(",") if "=" not in item or not item.split("=", 1)[0].strip()]
    return f"takes KEY=VALUE items separated by commas, got {bad[0]!r}" if bad or not text.strip() else None


def option(default: Any, help: str, group: str, *, choices: typing.Iterable[str] | None = None,
           check: Check | None = None, parse: Callable[[str], Any] | None = None, metavar: str | None = None) -> Any:
    """A field with what the command line and the checks need: its ``help``, its flag ``group``,
    allowed ``choices``, a ``check``, and how to ``parse`` the flag's text."""
    return field(default=default, metadata={"help": help, "group": group, "check": check, "parse": parse,
                                            "metavar": metavar,
                                            "choices": tuple(choices) if choices is not None else None})


def flag_of(spec: dataclasses.Field) -> str:
    """The command-line flag of a field: its name, ``--like-this``."""
    return "--" + spec.name.replace("_", "-")


class _Checked:
    """Checks every field on construction (and on :func:`dataclasses.replace`): a bad value is a
    :class:`UsageError` naming its flag, before anything is loaded."""

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            choices = spec.metadata["choices"]
            if choices is not None and value is not None and value not in choices:
                raise UsageError(f"{flag_of(spec)} must be one of {', '.join(choices)}, got {value!r}")
            check = spec.metadata["check"]
            problem = check(value) if check is not None else None
            if problem:
                raise UsageError(f"{flag_of(spec)} {problem}")


@dataclass(frozen=True)
class RestoreOptions(_Checked):
    """How to restore: devices, model, detection, blending and encoding. Frozen and picklable, so
    one value can be handed to any worker, process or node."""

    gpus: tuple[int, ...] | None = option(
        None, "comma-separated CUDA GPU numbers (default: 0 when a GPU exists)", "devices",
        parse=_numbers("--gpus", "0,1"), metavar="0,1")
    device: str | None = option(None, "force the CPU (slow) or CUDA", "devices", choices=("cpu", "cuda"))
    precision: str | None = option(None, "GPEN arithmetic (default fp16 on GPU, fp32 on CPU)", "devices",
                                   choices=sorted(PRECISIONS))
    batch_size: int = option(16, "faces per GPEN batch, and frames per detection batch up to 1080p (fewer for "
                                 "larger frames)", "devices", check=_at_least(1, "a positive integer"))
    compile: str = option("auto", "torch.compile and CUDA graphs on GPUs: GPEN 1.28x faster than eager, 5 s more "
                                  "to start (24 s on a machine's first run); auto compiles for 16000 frames or "
                                  "more (75000 on the first run)", "devices", choices=("auto", "on", "off"))
    workers_per_device: int = option(1, "workers (model replicas) per device; more can keep one GPU busier",
                                     "devices", check=_at_least(1, "a positive integer"))
    worker: str = option("thread", "where each worker runs: thread, in this process; process, in a process of "
                                   "its own (one per GPU), its frames passed through shared memory, so that the "
                                   "workers' Python shares no interpreter lock with the other workers, the decoder "
                                   "and the encoder (decodes on the CPU)", "devices", choices=("thread", "process"))
    model: str = option(DEFAULT_MODEL, "official GPEN checkpoint", "model", choices=OFFICIAL_MODELS)
    weights: Path | None = option(None, "a GPEN checkpoint file to use instead (never downloads)", "model")
    detector: str = option(DEFAULT_DETECTOR, "face detector", "faces", choices=DETECTORS)
    detector_weights: Path | None = option(None, "detector checkpoint file (never downloads)", "faces")
    threshold: float = option(DEFAULT_THRESHOLD, "detection confidence (default 0.9, as GPEN)", "faces",
                              check=Range(0.0, 1.0, low_open=True))
    min_face: float = option(0.0, "ignore faces smaller than this many pixels", "faces", check=_at_least(0))
    max_faces: int | None = option(None, "restore at most this many faces per frame (largest score first)",
                                   "faces", check=_at_least(1, "a positive integer"))
    faces: str = option("all", "which faces to restore, chosen per track so that it never flickers between "
                               "people: all; largest, a track that is the largest face in at least half of its "
                               "frames; center, one that is the nearest the centre likewise (a first pass over the "
                               "clip finds them)", "faces", choices=FACE_CHOICES)
    tracks: tuple[int, ...] | None = option(
        None, "restore only these tracks, numbered as --tracks-out lists them (--detect-only lists them quickly); "
              "a first pass over the clip checks that each exists", "faces", parse=_numbers("--tracks", "3,7"),
        check=_track_ids, metavar="3,7")
    mask: str = option("box", "the paste-back mask: box, the official feathered rectangle; parse, the face as a "
                              "face-parsing network (facexlib's ParseNet, as the official GPEN) finds it: skin, "
                              "features, hair and neck, not the background, a hat or clothes, so a hand or a "
                              "microphone in front of the face stays as it was", "faces", choices=("box", "parse"))
    parse_weights: Path | None = option(None, "face-parser checkpoint for --mask parse (never downloads)", "faces")
    strength: float = option(1.0, "blend of restored over original, 0..1", "faces", check=_between(0.0, 1.0))
    smooth: float = option(DEFAULT_SMOOTH, "temporal smoothing of face tracks, a Gaussian sigma in frames "
                                           "(0 turns it off)", "faces", check=_at_least(0))
    codec: str | None = option(None, "libx264, libx265, prores_ks, ffv1, libvpx-vp9, libsvtav1, h264_nvenc, "
                                     "hevc_nvenc (default: the input's own codec where the container holds it, "
                                     "else libx264)", "encoding")
    crf: int | None = option(None, "quality (default: visually lossless for the codec; 0 = lossless x264)",
                             "encoding", check=_at_least(0))
    preset: str | None = option(None, "encoder preset (default: fast for x264/x265)", "encoding")
    bitrate: int | None = option(None, "target video bit rate, as 8M or 8000k, instead of a quality target (--crf)",
                                 "encoding", parse=parse_rate, metavar="RATE", check=_at_least(1000, "1000 or more"))
    maxrate: int | None = option(None, "cap on the video bit rate, as 20M, as platforms ask for; with a quality "
                                       "target, a capped one (the encoder's buffer holds two seconds of it)",
                                 "encoding", parse=parse_rate, metavar="RATE", check=_at_least(1000, "1000 or more"))
    encoder_options: str | None = option(None, "the encoder's own options as FFmpeg names them, comma-separated: "
                                               "tune=film,x264-params=aq-mode=3:ref=4 (an option the encoder does "
                                               "not have is an error)", "encoding", metavar="K=V,...",
                                         check=_key_values)
    pix_fmt: str | None = option(None, "output pixel format (default: the input's, else the closest the encoder "
                                       "takes, with a warning naming the loss)", "encoding")
    encoder_threads: int = option(0, "encoder threads (default 0: the encoder's own choice, about 1.5 per core "
                                     "for x264)", "encoding", check=_at_least(0))
    no_faststart: bool = option(False, "leave an MP4/MOV's index at the end of the file, as FFmpeg writes it; by "
                                       "default it goes to the front (faststart), so that web players can start "
                                       "before the whole file arrives", "encoding")
    strict: bool = option(False, "refuse, before any work, anything of the input the output cannot keep "
                                 "(a stream, flag, alpha, bit depth) instead of warning about it", "encoding")
    allow_truncated: bool = option(False, "restore every frame a cut-off input still holds, instead of "
                                          "refusing it", "input")
    decoder: str = option("auto", "the video decoder: nvdec, the GPU's (H.264 and HEVC, 4:2:0, needs the [nvdec] "
                                  "extra), frames and timing identical to the CPU's; cpu, libavcodec; auto, NVDEC "
                                  "where it can decode the stream, else the CPU", "input",
                          choices=("auto", "cpu", "nvdec"))
    start: float | None = option(None, "restore faces from this time on (seconds or [HH:]MM:SS.mmm from the first "
                                       "frame); every frame before it is encoded as decoded", "time",
                                 parse=parse_time, metavar="TIME", check=_at_least(0))
    end: float | None = option(None, "restore faces only before this time; every frame from it on is encoded as "
                                     "decoded (the file keeps all its frames either way)", "time",
                               parse=parse_time, metavar="TIME", check=_at_least(0))

    def __post_init__(self) -> None:
        for name in ("gpus", "tracks"):  # lists from the API: kept as tuples, so the options stay hashable
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))
        super().__post_init__()
        if self.tracks is not None and self.faces != "all":
            raise UsageError(f"--tracks and --faces {self.faces} both choose faces; give one")
        if self.worker == "process" and self.decoder == "nvdec":
            raise UsageError("--decoder nvdec needs --worker thread: NVDEC's pictures stay in this process's GPU "
                             "memory")
        if self.bitrate is not None and self.crf is not None:
            raise UsageError("--bitrate and --crf both set how good the video is; give one")
        if self.end is not None and self.end <= (self.start or 0.0):
            raise UsageError(f"--end {self.end:g} must come after --start {self.start or 0.0:g}")

    @property
    def selects(self) -> bool:
        """Whether only some tracks are restored, which a first pass over the clip must find."""
        return self.faces != "all" or self.tracks is not None

    @property
    def time_range(self) -> tuple[float, float | None] | None:
        """(start, end or None) where faces are restored, or None: the whole clip."""
        return None if self.start is None and self.end is None else (self.start or 0.0, self.end)

    def fingerprint(self) -> dict[str, Any]:
        """Every field's value, as JSON can hold it: what a resumed job must match."""
        return {name: str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
                for name, value in dataclasses.asdict(self).items()}

    def devices(self) -> list[str]:
        """The torch devices to run on, each once per worker; checked against the GPUs visible here
        (where the work runs, not where the options were made)."""
        import torch

        available = torch.cuda.device_count()
        missing = [g for g in self.gpus or () if not 0 <= g < available]
        if missing:
            raise UsageError(f"GPU {missing[0]} does not exist ({available} CUDA GPU(s) visible)")
        if self.device == "cpu":
            if self.gpus:
                raise UsageError("--gpus and --device cpu contradict each other; give one")
            devices = ["cpu"]
        elif not self.gpus and available == 0:
            if self.device == "cuda":
                raise UsageError("--device cuda was asked for, but no CUDA GPU is visible")
            devices = ["cpu"]
        else:
            devices = [f"cuda:{g}" for g in dict.fromkeys(self.gpus or (0,))]
        return [d for d in devices for _ in range(self.workers_per_device)]

    def precision_on(self, device: str) -> str:
        return self.precision or ("fp16" if device.startswith("cuda") else "fp32")



@dataclass(frozen=True)
class JobOptions(_Checked):
    """What happens around one job, beside the restoration itself."""

    overwrite: bool = option(False, "replace OUTPUT if it exists", "output")
    resume: bool = option(False, "encode in segments kept beside OUTPUT; after a crash, the same command with "
                                 "--resume continues from the last complete segment", "output")
    segment_frames: int = option(SEGMENT_FRAMES, f"frames per --resume segment (default {SEGMENT_FRAMES}: the most "
                                                 f"work a crash can lose), and per unit of a long video split "
                                                 f"across a --ray cluster", "output",
                                 check=_at_least(1, "a positive number of frames"))
    tracks_out: Path | None = option(None, "write the faces found and used per frame as JSON (with many inputs: "
                                           "a folder, one OUTPUT-name.json each)", "output")
    detect_only: bool = option(False, "find and track the faces only, without GPEN: print each track (its id for "
                                      "--tracks, when it is seen, its size) and write --tracks-out if given; takes "
                                      "INPUT and no OUTPUT", "output")

    preview: int | None = option(None, "write, instead of the video, a contact sheet (OUTPUT .png or .jpg) of this "
                                       "many evenly spaced frames, decoded beside restored, faces boxed; it seeks "
                                       "to them, so a long clip takes seconds", "output", check=_between(1, 64))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.detect_only and self.resume:
            raise UsageError("--detect-only and --resume cannot be combined (nothing is encoded to resume)")
        if self.preview is not None and (self.resume or self.detect_only or self.tracks_out):
            other = "--resume" if self.resume else "--detect-only" if self.detect_only else "--tracks-out"
            raise UsageError(f"--preview writes only the contact sheet; it cannot be combined with {other}")
        if self.resume and self.tracks_out:
            raise UsageError("--tracks-out cannot be combined with --resume (a resumed run sees only part of "
                             "the video)")


def _ray_address(value: str | None) -> str | None:
    if value is None or value in ("local", "auto") or value.startswith("ray://") or ":" in value:
        return None
    return f"must be local, auto, ray://HOST:PORT or HOST:PORT, got {value!r}"


@dataclass(frozen=True)
class BatchOptions(_Checked):
    """How a call with many inputs (``IN1 IN2 ... OUTDIR`` or ``INDIR OUTDIR``) finds and names them."""

    name: str = option("{stem}.{ext}", "output file names in OUTDIR, from the input's {stem} and {ext} "
                                       "(an extension that cannot be written becomes mkv)", "batch",
                       metavar="TEMPLATE")
    recursive: bool = option(False, "also restore the videos and images in INDIR's subfolders, into the same "
                                    "subfolders of OUTDIR", "batch")
    skip_existing: bool = option(False, "leave outputs that already exist alone (a re-run continues a batch)",
                                 "batch")
    jobs: int = option(2, "files restored at once: one's start overlaps another's end, and their decoding and "
                          "encoding share the CPU's cores (each takes its own frames in flight, so more take "
                          "more memory); with --ray, on each actor", "batch", check=_between(1, 8))
    ray: str | None = option(None, "restore the files on a Ray cluster (the [ray] extra): auto, the running one; "
                                   "ray://HOST:PORT; local, one started here. One actor per GPU (CPU actors on "
                                   "a cluster without GPUs), each with warm weights; a file whose actor dies runs "
                                   "again on another. Inputs and OUTDIR must be on a filesystem every node sees",
                             "batch", metavar="ADDRESS", check=_ray_address)
    ray_actors: int | None = option(None, "actors with --ray (default: one per GPU of the cluster, else one per "
                                          "node)", "batch", check=_at_least(1, "a positive integer"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ray_actors is not None and self.ray is None:
            raise UsageError("--ray-actors needs --ray")


def value_type(owner: type, spec: dataclasses.Field) -> type:
    """The type a field's values have, None left out (``int | None`` -> int)."""
    hint = typing.get_type_hints(owner)[spec.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint
