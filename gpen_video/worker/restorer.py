"""GPEN and the paste-back on one device: upright RGB frames and their faces in, restored frames
out (align -> GPEN -> mask -> paste back). A :class:`~.device.DeviceWorker` gets one only for jobs
that restore, so ``--detect-only`` never loads GPEN's weights or warms it up."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from ..errors import PrecisionError
from ..faces.align import invert_affine, reference_points, similarity_transforms, warp_faces
from ..faces.parse import FaceParser, MaskSmoother
from ..model.downloads import cache_dir
from ..model.fast import build_inference_model
from ..model.graphs import GraphedModel, padded
from ..model.precision import TOLERANCE, finite_faces, reference_face, relative_difference
from ..options import RestoreOptions
from .compose import Compositor
from .messages import FaceSpec, Paste
from .speeds import GpenTimer, record, setup_key

log = logging.getLogger(__name__)


def compile_cache() -> Path:
    """Where torch.compile keeps what it makes (Inductor's FX graphs, AOT graphs, Triton kernels):
    under ``$GPEN_VIDEO_HOME``, so that the next process on this machine starts warm (Inductor's
    default, ``/tmp/torchinductor_USER``, goes with a reboot); a TORCHINDUCTOR_CACHE_DIR the user
    set wins. Set for this process by the first restorer that compiles."""
    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or cache_dir() / "torch-compile")


def compile_cache_warm() -> bool:
    """Whether an earlier process on this machine has left compiled work in :func:`compile_cache`."""
    cache = compile_cache()
    return cache.is_dir() and any(cache.iterdir())


class FaceRestorer:
    """GPEN (compiled into a CUDA graph, or eager), the compositor and, for ``--mask parse``,
    ParseNet, on one device."""

    def __init__(self, state_dict: dict[str, torch.Tensor], options: RestoreOptions, device: torch.device,
                 compiled: bool) -> None:
        self.device = device
        self.compiled = compiled and device.type == "cuda"  # torch.compile + CUDA graphs: GPUs only
        self.precision = options.precision_on(str(device))  # fp32 from the first failed guard on
        self.strict = options.strict
        self._state_dict = state_dict  # for an fp32 build, should a half-precision guard fail
        model = self._build(self.precision, eager=not self.compiled)
        self.crop_size = model.config.size
        self.face_batch = options.batch_size  # faces per GPEN call; halved for good on out-of-memory
        self.out_of_memory = 0  # times the batch was halved
        self.unrestored = 0  # faces left as decoded: half precision gave values that are not finite
        self.notes: list[str] = []  # what the next job's summary must say (a precision fallback)
        self._nonfinite: list[torch.Tensor] = []  # per GPEN call, on the device: faces not finite
        self.model: Callable[[torch.Tensor], torch.Tensor] = model
        self._warming: threading.Thread | None = None
        self._warm_up_failure: BaseException | None = None
        # GPEN's speed on this GPU, kept for --compile auto's next choice here (in the planned precision).
        self._timer = (GpenTimer(setup_key(options, str(device)), "compiled" if self.compiled else "eager")
                       if device.type == "cuda" else None)
        if self.compiled:
            if self._checks_precision:  # on the model as built, before the compile it would waste
                face = reference_face(self.crop_size, device)
                with torch.no_grad():
                    self._check_precision(self.model(face), face)
            warm = compile_cache_warm()
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache())
            start = time.perf_counter()
            self.model = GraphedModel(torch.compile(self.model, fullgraph=True, dynamic=False))
            # Compile and capture now, in the caller's thread: restorers must not compile concurrently
            # (dynamo is not thread-safe), and the 30-odd seconds belong before the first frame.
            log.info("compiling GPEN for %s (once per run, about half a minute)", device)
            self._warm_up()
            if self._timer is not None:
                record(self._timer.key, **{"compile_warm" if warm else "compile_cold": time.perf_counter() - start})
        elif device.type == "cuda":
            # The precision check, and the first call of each batch shape, which chooses the
            # convolutions' algorithms: done now, beside the detector's first frames, instead of
            # after them (GPU batches are all padded to one shape).
            self._warming = threading.Thread(target=self._warm_up_eager, name=f"gpen-warm-up-{device}", daemon=True)
            self._warming.start()
        self.compositor = Compositor(self.crop_size, device)
        # --mask parse: ParseNet on the restored faces, in GPEN's precision on a GPU, loaded when a
        # job first asks for it (by its checkpoint: None, the cached one).
        self._parsers: dict[str | None, FaceParser] = {}
        if options.mask == "parse":
            self._parser(Paste.of(options).parse_weights)
        self.smoother = MaskSmoother()
        self.reference = reference_points(self.crop_size)

    def _parser(self, weights: str | None) -> FaceParser:
        """The face parser of the checkpoint ``weights`` (None: the cached one), loaded on first use."""
        if weights not in self._parsers:
            self._parsers[weights] = FaceParser(weights, self.device, half=self.precision != "fp32", progress=False)
        return self._parsers[weights]

    def close(self) -> None:
        """Wait for GPEN's warm-up, which runs in a thread of its own until the first restoration
        joins it: if none comes, it may still be queuing CUDA work when the process exits, which
        would abort it."""
        if self._warming is not None:
            self._warming.join()
            self._warming = None

    def _build(self, precision: str, eager: bool) -> torch.nn.Module:
        """GPEN in ``precision``: eager on a GPU, its elementwise work runs fused in Triton kernels;
        to be compiled, in PyTorch's operations, which the compiler fuses itself."""
        kernels = "triton" if self.device.type == "cuda" and eager else "torch"
        return build_inference_model(self._state_dict, device=self.device, precision=precision, kernels=kernels)

    @property
    def _checks_precision(self) -> bool:
        """Half precision on a GPU is checked against fp32 when GPEN loads."""
        return self.device.type == "cuda" and self.precision != "fp32"

    @torch.no_grad()
    def _check_precision(self, restored: torch.Tensor, face: torch.Tensor) -> None:
        """GPEN's output for the shipped ``face`` against fp32's on this checkpoint; the fp32 model
        runs PyTorch's operations, which need no Triton kernel compiled for one call."""
        exact = self._build("fp32", eager=False)
        difference = relative_difference(restored, exact(face))
        del exact
        if difference > TOLERANCE:
            self._fall_back(f"GPEN in {self.precision} differs from fp32 by {difference:.1%} on this checkpoint's "
                            f"test face (more than {TOLERANCE:.0%})", "GPEN runs in fp32 instead, slower")

    @torch.no_grad()
    def _warm_up_eager(self) -> None:
        """The warm-up batch, its first face the shipped one, checked against fp32 (in half
        precision): one call makes the choices for the batch shape and gives the check its face."""
        try:
            batch = torch.zeros(self.face_batch, 3, self.crop_size, self.crop_size, device=self.device)
            if self._checks_precision:
                batch[:1] = reference_face(self.crop_size, self.device)
            restored = self.model(batch)
            if self._checks_precision:
                self._check_precision(restored[:1], batch[:1])
        except BaseException as exc:  # raised by the first restoration, in the thread that restores
            self._warm_up_failure = exc

    def _fall_back(self, reason: str, outcome: str) -> None:
        """A half-precision guard failed: GPEN runs in fp32 from here on, and the next summary says
        so once; with --strict the run stops instead."""
        if self.strict:
            raise PrecisionError(f"{reason} on {self.device} (refused: --strict)")
        message = f"{reason} on {self.device}; {outcome}"
        log.warning(message)
        self.notes.append(message)
        self.precision = "fp32"
        self.model = self._build("fp32", eager=True)
        self._timer = None  # the figures kept are for the planned precision

    def take_nonfinite(self) -> torch.Tensor | None:
        """How many faces of the GPEN calls since the last take came out not finite (left as
        they went in), as a count still on the device: read it with the batch's results."""
        if not self._nonfinite:
            return None
        counts, self._nonfinite = self._nonfinite, []
        return torch.stack(counts).sum()

    def note_nonfinite(self, faces: int) -> None:
        """``faces`` came out not finite (read back from :meth:`take_nonfinite`): counted, and the
        first time in half precision, GPEN falls back to fp32."""
        if not faces:
            return
        self.unrestored += faces
        if self.precision != "fp32":
            self._fall_back(f"GPEN in {self.precision} gave values that are not finite for {faces} face(s)",
                            "they are left as decoded, and GPEN runs in fp32 from here on, slower")

    @torch.no_grad()
    def _warm_up(self) -> None:
        """One GPEN batch of zeros: the host's choices for its shape are made once it is queued."""
        self.model(torch.zeros(self.face_batch, 3, self.crop_size, self.crop_size, device=self.device))

    @torch.no_grad()
    def _gpen(self, crops: torch.Tensor) -> torch.Tensor:
        """Restored crops in [0, 255], in fixed-size batches (a short one padded): on a GPU a
        compiled graph is then reused and eager convolutions keep the algorithms chosen for that
        shape; on any device a face comes out the same whatever faces share its batch (oneDNN's
        and cuDNN's sums change in the last bit with the batch size, not with the other faces),
        so a video restored in segments (``--resume``, a cluster) gives a whole run's frames.

        On CUDA out-of-memory the batch is halved for good and the same faces are run again: no
        face is dropped or repeated.
        """
        self.close()
        if self._warm_up_failure is not None:
            raise self._warm_up_failure
        out = []
        start = 0
        while start < len(crops):
            batch = self.face_batch
            chunk = crops[start : start + batch]
            n = len(chunk)
            chunk = padded(chunk, batch)
            x = chunk / 127.5 - 1.0  # official normalisation: (x/255 - 0.5) / 0.5
            try:
                with self._timer.timing(batch) if self._timer is not None else contextlib.nullcontext():
                    y = self.model(x)[:n]
            except torch.cuda.OutOfMemoryError:
                if batch == 1:
                    raise
                self.face_batch = batch // 2
                self.out_of_memory += 1
                torch.cuda.empty_cache()
                log.warning("CUDA out of memory on %s: GPEN batch halved to %d", self.device, self.face_batch)
                continue
            if self.precision != "fp32":  # a face that came out not finite is left as it went in, and counted
                finite = finite_faces(y)
                y = torch.where(finite[:, None, None, None], y, x[:n])
                self._nonfinite.append((~finite).sum())
            out.append(((y * 0.5 + 0.5).clamp(0, 1) * 255).float())
            start += n
        return torch.cat(out) if out else crops

    @torch.no_grad()
    def restore_rgb(self, frames: torch.Tensor, faces: Sequence[Sequence[FaceSpec]],
                    indices: Sequence[int] | None = None, clip: int = 0,
                    paste: Paste = Paste()) -> tuple[torch.Tensor, torch.Tensor]:
        """Restore ``faces[i]`` in ``frames[i]`` ((N, 3, H, W) upright RGB on this device, whole
        levels; ``indices`` their picture numbers, ``clip`` their job), pasted back as ``paste``
        says: the new frames, and the (N, H, W) bool mask of the pixels the pasted faces reach.
        At strength 0 the frames stay as they are, and GPEN does not run."""
        specs = [FaceSpec(*face) for fs in faces for face in fs]
        owner = np.array([i for i, fs in enumerate(faces) for _ in fs], dtype=np.int64)
        if not len(owner) or paste.strength == 0:
            return frames, torch.zeros_like(frames[:, 0], dtype=torch.bool)
        transforms = similarity_transforms(np.stack([f.landmarks for f in specs]), self.reference)
        crops = warp_faces(frames, owner, transforms, self.crop_size)
        restored = self._gpen(crops)
        masks = None
        if paste.parse:
            indices = indices if indices is not None else range(len(faces))
            keys = [(indices[i], f.track) for i, f in zip(owner, specs)]
            masks = self.smoother(clip, keys, self._parser(paste.parse_weights).masks(restored))
        sizes = np.array([f.size for f in specs])
        return self.compositor.paste_batch(frames, restored, invert_affine(transforms), sizes, owner, masks,
                                           paste.strength)
