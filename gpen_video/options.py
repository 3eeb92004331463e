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
from .values import (
    Check,
    Range,
    at_least,
    between,
    encoder_option_list,
    numbers,
    parse_rate,
    parse_time,
    ray_address,
    track_ids,
)

#: Frames per --resume segment: about a minute at 25 fps, so a crash loses at most that much work.
SEGMENT_FRAMES = 1500


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
        parse=numbers("--gpus", "0,1"), metavar="0,1")
    device: str | None = option(None, "force the CPU (slow) or CUDA", "devices", choices=("cpu", "cuda"))
    precision: str | None = option(None, "GPEN arithmetic (default fp16 on GPU, fp32 on CPU)", "devices",
                                   choices=sorted(PRECISIONS))
    batch_size: int = option(16, "faces per GPEN batch, and frames per detection batch up to 1080p (fewer for "
                                 "larger frames)", "devices", check=at_least(1, "a positive integer"))
    compile: str = option("auto", "torch.compile and CUDA graphs on GPUs: GPEN up to 1.5x faster than eager on "
                                  "some GPUs, 5 s more to start (24 s on a machine's first run); auto compiles "
                                  "where this machine's own measured speeds say it pays for the job's frames "
                                  "(until both are measured: from 16000 frames, 75000 on a first run)",
                          "devices", choices=("auto", "on", "off"))
    workers_per_device: int = option(1, "workers (model replicas) per device; more can keep one GPU busier",
                                     "devices", check=at_least(1, "a positive integer"))
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
    min_face: float = option(0.0, "ignore faces smaller than this many pixels", "faces", check=at_least(0))
    max_faces: int | None = option(None, "restore at most this many faces per frame (largest score first)",
                                   "faces", check=at_least(1, "a positive integer"))
    faces: str = option("all", "which faces to restore, chosen per track so that it never flickers between "
                               "people: all; largest, a track that is the largest face in at least half of its "
                               "frames; center, one that is the nearest the centre likewise (a first pass over the "
                               "clip finds them)", "faces", choices=FACE_CHOICES)
    tracks: tuple[int, ...] | None = option(
        None, "restore only these tracks, numbered as --tracks-out lists them (--detect-only lists them quickly); "
              "a first pass over the clip checks that each exists", "faces", parse=numbers("--tracks", "3,7"),
        check=track_ids, metavar="3,7")
    mask: str = option("box", "the paste-back mask: box, the official feathered rectangle; parse, the face as a "
                              "face-parsing network (facexlib's ParseNet, as the official GPEN) finds it: skin, "
                              "features, hair and neck, not the background, a hat or clothes, so a hand or a "
                              "microphone in front of the face stays as it was", "faces", choices=("box", "parse"))
    parse_weights: Path | None = option(None, "face-parser checkpoint for --mask parse (never downloads)", "faces")
    strength: float = option(1.0, "blend of the restored face over the decoded one, 0..1", "faces",
                             check=between(0.0, 1.0))
    smooth: float = option(DEFAULT_SMOOTH, "temporal smoothing of face landmarks: a still face's are "
                                           "fitted over a Gaussian window of 2.5 x S frames (sigma), a "
                                           "moving one's over down to 1 x S, so that motion is not lagged "
                                           "(0 turns it off)", "faces", check=at_least(0))
    codec: str | None = option(None, "libx264, libx265, prores_ks, ffv1, libvpx-vp9, libsvtav1, h264_nvenc, "
                                     "hevc_nvenc (default: the input's own codec where the container holds it, "
                                     "else libx264)", "encoding")
    crf: int | None = option(None, "quality (default: visually lossless for the codec; 0 = lossless x264)",
                             "encoding", check=at_least(0))
    preset: str | None = option(None, "encoder preset (default: fast for x264/x265)", "encoding")
    bitrate: int | None = option(None, "target video bit rate, as 8M or 8000k, instead of a quality target (--crf)",
                                 "encoding", parse=parse_rate, metavar="RATE", check=at_least(1000, "1000 or more"))
    maxrate: int | None = option(None, "cap on the video bit rate, as 20M, as platforms ask for; with a quality "
                                       "target, a capped one (the encoder's buffer holds two seconds of it)",
                                 "encoding", parse=parse_rate, metavar="RATE", check=at_least(1000, "1000 or more"))
    encoder_options: str | None = option(None, "the encoder's own options as FFmpeg names them, comma-separated: "
                                               "tune=film,x264-params=aq-mode=3:ref=4 (an option the encoder does "
                                               "not have is an error)", "encoding", metavar="K=V,...",
                                         check=encoder_option_list)
    pix_fmt: str | None = option(None, "output pixel format (default: the input's, else the closest the encoder "
                                       "takes, with a warning naming the loss)", "encoding")
    encoder_threads: int = option(0, "encoder threads (default 0: the encoder's own choice, about 1.5 per core "
                                     "for x264)", "encoding", check=at_least(0))
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
                                 parse=parse_time, metavar="TIME", check=at_least(0))
    end: float | None = option(None, "restore faces only before this time; every frame from it on is encoded as "
                                     "decoded (the file keeps all its frames either way)", "time",
                               parse=parse_time, metavar="TIME", check=at_least(0))

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


#: What an engine's workers are built with and keep for their life: its devices, GPEN and the
#: detector. A job may bring other values of every other option.
ENGINE_FIELDS = ("gpus", "device", "precision", "batch_size", "compile", "workers_per_device", "worker", "model",
                 "weights", "detector", "detector_weights", "threshold", "min_face", "max_faces")


def job_options(engine: RestoreOptions, job: RestoreOptions | None) -> RestoreOptions:
    """A job's options on an engine of ``engine``'s: ``job`` (None: the engine's own), refused
    where it changes what the engine's workers keep."""
    if job is None:
        return engine
    for name in ENGINE_FIELDS:
        if getattr(job, name) != getattr(engine, name):
            raise UsageError(f"--{name.replace('_', '-')} is set when the engine starts; a job cannot change it")
    return job


@dataclass(frozen=True)
class JobOptions(_Checked):
    """What happens around one job, beside the restoration itself."""

    overwrite: bool = option(False, "replace OUTPUT if it exists", "output")
    resume: bool = option(False, "encode in segments kept beside OUTPUT; after a crash, the same command with "
                                 "--resume continues from the last complete segment", "output")
    segment_frames: int = option(SEGMENT_FRAMES, f"frames per --resume segment (default {SEGMENT_FRAMES}: the most "
                                                 f"work a crash can lose), and per unit of a long video split "
                                                 f"across a --ray cluster", "output",
                                 check=at_least(1, "a positive number of frames"))
    tracks_out: Path | None = option(None, "write the faces found and used per frame as JSON (with many inputs: "
                                           "a folder, one OUTPUT-name.json each)", "output")
    detect_only: bool = option(False, "find and track the faces only, without GPEN: print each track (its id for "
                                      "--tracks, when it is seen, its size) and write --tracks-out if given; takes "
                                      "INPUT and no OUTPUT", "output")

    qc: bool = option(False, "measure how much flicker the restoration adds to each face track: its restored "
                             "face's change from frame to frame, beyond what the input's own motion explains, "
                             "over the input's (1.0: none added); in the summary, which names the tracks to "
                             "check, the tracks file and the report. Costs CPU time on every frame with a face",
                      "output")
    preview: int | None = option(None, "write, instead of the video, a contact sheet (OUTPUT .png or .jpg) of this "
                                       "many evenly spaced frames, decoded beside restored, faces boxed; it seeks "
                                       "to them, so a long clip takes seconds", "output", check=between(1, 64))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.detect_only and self.resume:
            raise UsageError("--detect-only and --resume cannot be combined (nothing is encoded to resume)")
        if self.qc and (self.detect_only or self.preview is not None):
            other = "--detect-only" if self.detect_only else "--preview"
            raise UsageError(f"--qc measures a restored video; it cannot be combined with {other}")
        if self.preview is not None and (self.resume or self.detect_only or self.tracks_out):
            other = "--resume" if self.resume else "--detect-only" if self.detect_only else "--tracks-out"
            raise UsageError(f"--preview writes only the contact sheet; it cannot be combined with {other}")
        if self.resume and self.tracks_out:
            raise UsageError("--tracks-out cannot be combined with --resume (a resumed run sees only part of "
                             "the video)")


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
                          "more memory); with --ray, on each actor", "batch", check=between(1, 8))
    ray: str | None = option(None, "restore the files on a Ray cluster (the [ray] extra): auto, the running one; "
                                   "ray://HOST:PORT; local, one started here. One actor per GPU (CPU actors on "
                                   "a cluster without GPUs), each with warm weights; a file whose actor dies runs "
                                   "again on another. Inputs and OUTDIR must be on a filesystem every node sees",
                             "batch", metavar="ADDRESS", check=ray_address)
    ray_actors: int | None = option(None, "actors with --ray (default: one per GPU of the cluster, else one per "
                                          "node)", "batch", check=at_least(1, "a positive integer"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ray_actors is not None and self.ray is None:
            raise UsageError("--ray-actors needs --ray")


def value_type(owner: type, spec: dataclasses.Field) -> type:
    """The type a field's values have, None left out (``int | None`` -> int)."""
    hint = typing.get_type_hints(owner)[spec.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint
