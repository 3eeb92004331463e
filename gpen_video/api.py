"""The Python API: ``restore_video`` and ``restore_image``, with every check made before any work."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import torch
from tqdm import tqdm

from .faces.detect import DEFAULT_DETECTOR, DETECTORS, box_size
from .faces.track import FaceTracker, track_faces
from .faces.tracks_file import TracksWriter
from .pipeline import Pipeline, frames_per_batch
from .restore import DeviceSettings, DeviceWorker
from .video.decode import InputError, open_input, probe
from .video.encode import CONTAINERS, EncoderSettings, OutputError, VideoWriter
from .video.outputs import OutputClaim, partial_path
from .video.segments import SEGMENT_FRAMES, SegmentedWriter, SegmentStore, work_dir_for
from .weights import DEFAULT_MODEL, load_gpen_weights

log = logging.getLogger(__name__)
IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


class UsageError(ValueError):
    """Options that cannot work together or are out of range. The message is one line."""


@dataclass
class Summary:
    output: Path
    frames: int
    faces: int
    frames_with_faces: int
    seconds: float
    busy: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    damaged: int = 0  # input frames decoded with errors or repeated in place of undecodable ones
    resumed_at: int = 0  # the first frame this run encoded (--resume)
    truncated: str = ""  # why the input ended early (--allow-truncated), or ""

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        """The closing report: frames, faces, time, and each stage's busy share of the wall time."""
        lines = [f"{self.output}: {self.frames} frames, {self.faces} faces restored on {self.frames_with_faces} "
                 f"frames, {self.seconds:.1f} s ({self.fps:.1f} fps)"]
        if self.resumed_at:
            lines.append(f"resumed at frame {self.resumed_at}: the frames before it came from the work directory")
        if self.truncated:
            lines.append(f"warning: {self.truncated}; every frame that decodes was restored")
        if self.damaged:
            lines.append(f"warning: {self.damaged} frame(s) of the input were damaged: decoded with errors, "
                         f"or the previous frame repeated where one could not be decoded")
        if self.busy:
            busy = ", ".join(f"{k} {v / self.seconds:.0%}" for k, v in sorted(self.busy.items()))
            lines.append(f"stage busy time: {busy}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _devices(gpus: list[int] | None, device: str | None) -> list[str]:
    if device not in (None, "cpu", "cuda"):
        raise UsageError(f"unknown device {device!r}; use cpu or cuda")
    available = torch.cuda.device_count()
    missing = [g for g in gpus or [] if not 0 <= g < available]
    if missing:
        raise UsageError(f"GPU {missing[0]} does not exist ({available} CUDA GPU(s) visible)")
    if device == "cpu":
        if gpus:
            raise UsageError("--gpus and --device cpu contradict each other; give one")
        return ["cpu"]
    if not gpus:
        if available == 0:
            if device == "cuda":
                raise UsageError("--device cuda was asked for, but no CUDA GPU is visible")
            return ["cpu"]
        gpus = [0]
    return [f"cuda:{g}" for g in dict.fromkeys(gpus)]


def _check_paths(input: Path, output: Path, overwrite: bool, extensions: set[str] | dict) -> None:
    if output.suffix.lower() not in extensions:
        raise UsageError(f"unsupported output extension {output.suffix!r}; use one of {', '.join(sorted(extensions))}")
    if input.exists() and output.exists() and os.path.samefile(input, output):
        raise UsageError("OUTPUT is the input file; choose another path")
    if output.resolve() == input.resolve():
        raise UsageError("OUTPUT is the input file; choose another path")
    if output.is_dir():
        raise UsageError(f"OUTPUT is a directory: {output}")
    if output.exists() and not overwrite:
        raise UsageError(f"{output} exists; pass --overwrite to replace it")
    parent = output.resolve().parent
    if not parent.is_dir():
        raise UsageError(f"output directory does not exist: {parent}")
    try:  # a real probe: permissions, read-only file systems and ACLs all answer the same way
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError:
        raise UsageError(f"output directory is not writable: {parent}") from None


def _settings(devices: list[str], precision: str | None, batch_size: int, compile: bool | None,
              strength: float, **detection) -> list[DeviceSettings]:
    if batch_size < 1:
        raise UsageError(f"batch size must be a positive integer, got {batch_size}")
    if not 0.0 <= strength <= 1.0:
        raise UsageError(f"strength must be in [0, 1], got {strength}")
    if detection["detector"] not in DETECTORS:
        raise UsageError(f"unknown detector {detection['detector']!r}; choose one of {', '.join(DETECTORS)}")
    out = []
    for dev in devices:
        gpu = dev.startswith("cuda")
        out.append(DeviceSettings(device=dev, precision=precision or ("fp16" if gpu else "fp32"),
                                  face_batch=batch_size, compile=gpu if compile is None else compile,
                                  strength=strength, **detection))
    return out


def restore_video(input: str | Path, output: str | Path, *, gpus: list[int] | None = None,
                  device: str | None = None, model: str = DEFAULT_MODEL, weights: str | Path | None = None,
                  precision: str | None = None, batch_size: int = 16, compile: bool | None = None,
                  detector: str = DEFAULT_DETECTOR, detector_weights: str | Path | None = None,
                  threshold: float = 0.9, min_face: float = 0.0, max_faces: int | None = None,
                  strength: float = 1.0, smooth: float | None = None, codec: str | None = None,
                  crf: int | None = None, preset: str | None = None, pix_fmt: str | None = None,
                  encoder_threads: int = 0,
                  tracks_out: str | Path | None = None, overwrite: bool = False, progress: bool = True,
                  resume: bool = False, segment_frames: int = SEGMENT_FRAMES, workers_per_device: int = 1,
                  allow_truncated: bool = False, strict: bool = False) -> Summary:
    """Restore every face in ``input`` and write ``output``; audio, timing and metadata are kept.

    With ``resume`` the video is encoded in segments of ``segment_frames`` frames kept in a work
    directory beside ``output``; a later call with ``resume`` continues after the last finished one.

    ``workers_per_device`` > 1 runs several workers on each device (each with its own model
    replica); it exists to exercise multi-worker dispatch where only one device is at hand.

    A cut-off input is refused unless ``allow_truncated``; with ``strict`` anything of the input
    the output cannot keep (a stream, a flag, alpha, bit depth) is refused instead of warned about.

    Returns the :class:`Summary`. Raises ``InputError``, ``OutputError``, ``UsageError`` or
    ``WeightsError`` (one-line messages) before any output exists when something cannot work.
    """
    input, output = Path(input), Path(output)
    _check_paths(input, output, overwrite, CONTAINERS)
    if resume and tracks_out:
        raise UsageError("--tracks-out cannot be combined with --resume (a resumed run sees only part of the video)")
    if segment_frames < 1:
        raise UsageError(f"segment length must be a positive number of frames, got {segment_frames}")
    if encoder_threads < 0:
        raise UsageError(f"encoder threads must be 0 (the encoder's choice) or more, got {encoder_threads}")
    devices = [d for d in _devices(gpus, device) for _ in range(workers_per_device)]
    settings = _settings(devices, precision, batch_size, compile, strength, detector=detector,
                         detector_weights=detector_weights, threshold=threshold, min_face=min_face,
                         max_faces=max_faces)
    info = probe(input)
    if info.truncated:
        if not allow_truncated:
            raise InputError(f"{info.truncated}; pass --allow-truncated to restore what is there")
        log.warning("%s; restoring every frame that decodes", info.truncated)
    container = open_input(input)
    try:
        encoder_settings = EncoderSettings(codec=codec, crf=crf, preset=preset, pix_fmt=pix_fmt,
                                           threads=encoder_threads, strict=strict)
        writer: VideoWriter | SegmentedWriter = VideoWriter(output, container, info, encoder_settings, overwrite)
        tracks = None
        try:
            # After the writer, which checks the encoder settings: a wrong option must not cost a
            # download. Before --resume's work directory, which a failed download must not leave.
            state_dict, _ = load_gpen_weights(model, weights, progress)
            start_frame = 0
            if resume:
                stat = input.stat()
                job = {"input": str(input.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                       "segment_frames": segment_frames,
                       "options": repr((model, str(weights), precision, detector, threshold, min_face, max_faces,
                                        strength, smooth, encoder_settings))}
                writer = SegmentedWriter(writer, SegmentStore(work_dir_for(output), job), input, segment_frames)
                start_frame = writer.first_frame
            workers = [DeviceWorker(state_dict, s) for s in settings]
            batch_frames = frames_per_batch(batch_size, info.width * info.height)
            for worker in workers:
                worker.capture_detection(batch_frames, info.height, info.width)
            tracks = TracksWriter(Path(tracks_out)) if tracks_out else None
            bar = tqdm(total=info.frames, initial=start_frame, unit="frame", disable=not progress, dynamic_ncols=True)
            faces = [0]

            def on_frame(frames: int, found: int) -> None:
                faces[0] += found
                bar.update(frames)
                bar.set_postfix(faces=faces[0], refresh=False)

            tracker = FaceTracker() if smooth is None else FaceTracker(smooth=smooth)
            pipeline = Pipeline(container, writer, workers, tracker, batch_frames=batch_frames,
                                tracks=tracks, on_frame=on_frame, start_frame=start_frame,
                                allow_truncated=allow_truncated, truncated=info.truncated, fields=info.fields,
                                fps=info.fps)
            try:
                result = pipeline.run()
            finally:
                bar.close()
        except BaseException:
            writer.abort()
            if tracks is not None:
                tracks.abort()
            raise
    finally:
        container.close()
    memory = [f"{w.device}: out of memory {w.out_of_memory} time(s), GPEN batch lowered to {w.face_batch}"
              for w in workers if w.out_of_memory]
    return Summary(output, result.frames, result.faces, result.frames_with_faces, result.seconds, result.busy,
                   writer.warnings + memory, result.damaged, start_frame, result.truncated)


def restore_image(input: str | Path, output: str | Path, *, device: str | None = None,
                  gpus: list[int] | None = None, model: str = DEFAULT_MODEL, weights: str | Path | None = None,
                  precision: str | None = None, detector: str = DEFAULT_DETECTOR,
                  detector_weights: str | Path | None = None, threshold: float = 0.9, min_face: float = 0.0,
                  max_faces: int | None = None, strength: float = 1.0, tracks_out: str | Path | None = None,
                  overwrite: bool = False, progress: bool = True) -> Summary:
    """Restore the faces of one photo (EXIF orientation honoured) into another image file."""
    input, output = Path(input), Path(output)
    _check_paths(input, output, overwrite, IMAGE_EXTENSIONS)
    settings = _settings(_devices(gpus, device)[:1], precision, 16, False, strength, detector=detector,
                         detector_weights=detector_weights, threshold=threshold, min_face=min_face,
                         max_faces=max_faces)[0]
    if not input.is_file():
        raise InputError(f"input not found: {input}")
    bgr = cv2.imread(str(input), cv2.IMREAD_COLOR)  # applies the EXIF orientation
    if bgr is None:
        raise InputError(f"cannot read {input} as an image")
    start = time.perf_counter()
    claim = OutputClaim(output, overwrite)
    tmp = partial_path(output)
    try:
        state_dict, _ = load_gpen_weights(model, weights, progress)
        worker = DeviceWorker(state_dict, settings)
        rgb = np.ascontiguousarray(bgr[:, :, ::-1])
        frame = torch.from_numpy(rgb).to(worker.device).permute(2, 0, 1)[None].float()
        found = worker.detector.detect_rgb(frame)[0]
        tracked = track_faces([(0, 0.0, found, rgb)], smooth=0)[0]
        restored, _ = worker.restore_rgb(frame, [[(f.landmarks, box_size(f.box)) for f in tracked.faces]])
        image = restored[0].permute(1, 2, 0).to(torch.uint8).cpu().numpy()
        if not cv2.imwrite(str(tmp), np.ascontiguousarray(image[:, :, ::-1])):
            raise OutputError(f"cannot write {output}")
        claim.publish(tmp)
    finally:
        claim.release()
        tmp.unlink(missing_ok=True)
    if tracks_out:
        writer = TracksWriter(Path(tracks_out))
        writer.add(tracked)
        writer.close()
    faces = len(tracked.faces)
    return Summary(output, 1, faces, int(faces > 0), time.perf_counter() - start)
