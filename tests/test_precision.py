"""Half-precision GPEN is guarded on the user's own checkpoint: against fp32 on a shipped face when a
GPU first loads it, and on every restored batch for values that are not finite. A checkpoint built
to defeat fp16 (an encoder whose activations overflow it) must never reach an output as garbage."""

from __future__ import annotations

import re
from pathlib import Path

import av
import pytest
import torch

from gpen_video.model.fast import build_inference_model
from gpen_video.model.precision import TOLERANCE, reference_face, relative_difference

from . import made_by_tools as tools
from .conftest import SMALL_GPEN_SIZE, requires_cuda
from .test_preservation import _warnings, gpen_video


def _overflowing(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint with its encoder's convolutions 1000 times larger: in fp16 their activations
    overflow to infinity; in fp32 the generator's demodulation keeps the output finite."""
    return {k: v * 1000 if k.startswith("ecd") and k.endswith(".weight") else v for k, v in state_dict.items()}


@pytest.fixture
def overflowing_gpen(golden, tmp_path) -> Path:
    path = tmp_path / "overflowing.pth"
    torch.save(_overflowing(golden["state_dict"]), path)
    return path


def test_the_shipped_face_tells_a_checkpoint_half_precision_cannot_run(golden):
    face = reference_face(SMALL_GPEN_SIZE, torch.device("cpu"))
    assert face.shape == (1, 3, SMALL_GPEN_SIZE, SMALL_GPEN_SIZE) and -1 <= face.min() < face.max() <= 1
    for state_dict, fits in ((golden["state_dict"], True), (_overflowing(golden["state_dict"]), False)):
        with torch.no_grad():
            exact = build_inference_model(state_dict, precision="fp32")(face)
            for precision in ("fp16", "bf16"):
                difference = relative_difference(build_inference_model(state_dict, precision=precision)(face), exact)
                assert (difference < TOLERANCE) is (fits or precision == "bf16"), (precision, difference)


def _clip(tmp_path: Path) -> Path:
    """The talking head's first 0.8 s, its packets copied (PyAV, so a GPU machine without
    FFmpeg's command line runs the GPU test too)."""
    src = tmp_path / "in.mp4"
    with av.open(str(tools.shared_file(tools.TALKING_HEAD))) as whole, av.open(str(src), "w") as part:
        video = whole.streams.video[0]
        copy = part.add_stream_from_template(video)
        for packet in whole.demux(video):
            if packet.dts is None or packet.dts * packet.time_base >= 0.8:  # in decoding order: every
                continue  # packet kept has the packets it refers to
            packet.stream = copy
            part.mux(packet)
    return src


def test_faces_half_precision_cannot_compute_are_left_as_decoded_and_named(overflowing_gpen, tmp_path):
    src = _clip(tmp_path)
    out = tmp_path / "out.mp4"
    run = gpen_video(overflowing_gpen, src, out, "--precision", "fp16", "--preset", "ultrafast")
    assert run.returncode == 0, run.stderr
    warnings = set(_warnings(run))  # logged as it happens, and again in the summary
    assert len(warnings) == 1, warnings
    assert re.fullmatch(r"gpen-video: (warning: )?GPEN in fp16 gave values that are not finite for \d+ face\(s\) on "
                        r"cpu; they are left as decoded, and GPEN runs in fp32 from here on, slower",
                        warnings.pop())
    with av.open(str(src)) as a, av.open(str(out)) as b:
        assert sum(1 for _ in b.decode(video=0)) == sum(1 for _ in a.decode(video=0))
    strict = gpen_video(overflowing_gpen, src, tmp_path / "strict.mp4", "--precision", "fp16", "--strict")
    assert strict.returncode == 1
    assert re.fullmatch(r"gpen-video: error: GPEN in fp16 gave values that are not finite for \d+ face\(s\) on cpu "
                        r"\(refused: --strict\)", strict.stderr.strip().splitlines()[-1]), strict.stderr
    assert not (tmp_path / "strict.mp4").exists()


@requires_cuda
@pytest.mark.gpu
def test_a_gpu_checks_half_precision_against_fp32_when_it_loads_gpen(overflowing_gpen, tmp_path):
    src = _clip(tmp_path)
    run = gpen_video(overflowing_gpen, src, tmp_path / "out.mp4", "--preset", "ultrafast", device="cuda")
    assert run.returncode == 0, run.stderr
    assert {line for line in _warnings(run) if "GPEN in fp16" in line} and all(
        re.fullmatch(r"gpen-video: (warning: )?GPEN in fp16 differs from fp32 by inf% on this checkpoint's test face "
                     r"\(more than 2%\) on cuda(:0)?; GPEN runs in fp32 instead, slower", line)
        for line in _warnings(run) if "GPEN in fp16" in line), run.stderr
    strict = gpen_video(overflowing_gpen, src, tmp_path / "strict.mp4", "--strict", device="cuda")
    assert strict.returncode == 1 and "(refused: --strict)" in strict.stderr, strict.stderr
    assert not (tmp_path / "strict.mp4").exists()


@requires_cuda
@pytest.mark.gpu
def test_only_half_precision_on_a_gpu_is_checked_against_fp32(golden):
    from gpen_video.options import RestoreOptions
    from gpen_video.worker.restorer import FaceRestorer

    for precision, checked in (("fp32", False), ("fp16", True), ("bf16", True)):
        restorer = FaceRestorer(golden["state_dict"], RestoreOptions(precision=precision), torch.device("cuda"),
                                compiled=False)
        restorer.close()
        assert restorer._checks_precision is checked, precision
