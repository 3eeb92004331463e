"""The command as users run it: a subprocess, its output, its exit codes, and what it leaves on disk."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from .conftest import SMALL_GPEN_SIZE, paste_region, shared_file

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "portrait.mp4"



def gpen_video(*args: object, weights: Path | None = None,
               preset: str | None = "ultrafast") -> subprocess.CompletedProcess:
    extra = []
    if weights is not None:
        extra = ["--device", "cpu", "--weights", str(weights), "--detector", "retinaface-mobile",
                 "--detector-weights", str(shared_file("weights/retinaface_mobilenet0.25.pth"))]
        extra += ["--preset", preset] if preset else []
    return subprocess.run([sys.executable, "-m", "gpen_video.cli", *map(str, args), *extra],
                          capture_output=True, text=True, timeout=600)


def test_help_and_version():
    out = gpen_video("--help")
    assert out.returncode == 0
    for option in ("--gpus", "--model", "--weights", "--precision", "--batch-size", "--detector", "--detector-weights",
                   "--strength", "--smooth", "--codec", "--crf", "--preset", "--tracks-out", "--overwrite", "--resume",
                   "--segment-frames", "--encoder-threads",
                   "--device", "--quiet", "examples:"):
        assert option in out.stdout
    version = gpen_video("--version")
    assert version.returncode == 0 and version.stdout.startswith("gpen-video ")


def test_restores_the_sample_with_progress_and_summary(small_gpen, tmp_path):
    out = tmp_path / "restored.mp4"
    run = gpen_video(SAMPLE, out, "--tracks-out", tmp_path / "t.json", "--verbose", "--report",
                     tmp_path / "report.json", weights=small_gpen)
    assert run.returncode == 0, run.stderr
    record, = json.loads((tmp_path / "report.json").read_text())["files"]
    assert {k: record[k] for k in ("input", "output", "result", "error", "frames", "faces", "warnings")} == {
        "input": str(SAMPLE), "output": str(out), "result": "done", "error": None, "frames": 100, "faces": 100,
        "warnings": []}
    assert record["decoder"] == "decoded on the CPU" and set(record["startup_seconds"]) >= {"workers", "GPEN"}
    # Not a terminal: plain progress lines, the first when the first frame is written, the last at the end.
    progress = [line for line in run.stderr.splitlines() if line.startswith("restoring: ")]
    assert re.fullmatch(r"restoring: 1/100 frames, the first after [\d.]+ s, faces 1", progress[0])
    assert progress[-1].startswith("restoring: 100/100 frames, ") and progress[-1].endswith(", faces 100")
    assert "\r" not in run.stderr
    assert "100 frames, 100 faces restored on 100 frames" in run.stderr
    assert "stage busy time:" in run.stderr
    # Where the job's start went: its first picture through the stages, in their order, each later.
    first = re.search(r"the job's first picture: (.*) into the job", run.stderr).group(1).split(", ")
    assert [part.split()[0] for part in first] == ["decoded", "detected", "tracked", "restored", "written"]
    seconds = [float(part.split()[1]) for part in first]
    assert seconds == sorted(seconds) and seconds[-1] > 0
    assert out.stat().st_size > 0
    assert len(json.loads((tmp_path / "t.json").read_text())["frames"]) == 100
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left

    again = gpen_video(SAMPLE, out, weights=small_gpen)
    assert again.returncode == 1
    assert "exists; pass --overwrite" in again.stderr and "Traceback" not in again.stderr
    quiet = gpen_video(SAMPLE, out, "--overwrite", "--quiet", weights=small_gpen)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_the_summary_is_short_unless_verbose(tmp_path):
    """By default the file, its counts, time and speed, the tracks chosen and the warnings; the
    decoder, the start-up and the stages' busy time only under --verbose."""
    from gpen_video.pipeline.summary import Summary

    summary = Summary(tmp_path / "out.mp4", 100, 90, 90, 4.0, busy={"encode": 1.0}, warnings=["a stream was left out"],
                      milestones={"started": 1.0, "decoded": 1.1, "written": 1.5}, decoder="decoded on the CPU",
                      choice="tracks restored: 0 of 0, 1")
    assert summary.describe(0.0).splitlines() == [
        f"{tmp_path / 'out.mp4'}: 100 frames, 90 faces restored on 90 frames, 4.0 s (25.0 fps)",
        "tracks restored: 0 of 0, 1", "warning: a stream was left out"]
    verbose = summary.describe(0.0, verbose=True)
    for line in ("decoded on the CPU", "first frame written 1.5 s after the start", "stage busy time: encode 25%"):
        assert line in verbose


@pytest.mark.parametrize(("codec", "preset", "suffix", "encoded_as", "pix_fmt"),
                         [("libx265", "ultrafast", ".mp4", "hevc", "yuv420p"),
                          ("prores_ks", None, ".mov", "prores", "yuv422p10le")])
def test_other_codecs_restore_every_frame_and_stay_quiet(small_gpen, tmp_path, codec, preset, suffix, encoded_as,
                                                         pix_fmt):
    """x265 prints its own statistics to stderr unless told not to; ProRes takes no 4:2:0, so the
    sample's frames go to the nearest format it takes."""
    out = tmp_path / f"restored{suffix}"
    run = gpen_video(SAMPLE, out, "--codec", codec, "--quiet", weights=small_gpen, preset=preset)
    assert run.returncode == 0 and run.stderr == ""
    with av.open(str(out)) as container:
        video = container.streams.video[0]
        assert (video.codec_context.name, video.codec_context.pix_fmt) == (encoded_as, pix_fmt)
        assert [s.type for s in container.streams] == ["video", "audio"]
        assert sum(1 for _ in container.decode(video=0)) == 100


def test_help_shows_each_default_and_range_and_python_m_runs_the_command():
    """Every option says what it is when not given, and what it takes."""
    out = gpen_video("--help").stdout
    flat = " ".join(out.split())
    for shown in ("--model NAME official GPEN checkpoint (one of GPEN-BFR-256", "default: GPEN-BFR-512)",
                  "default: retinaface-r50)", "(in [0, 1]; default: 1.0)", "(at least 0; default: 1.0)",
                  "(at least 1; default: 16)", "(in [1, 8]; default: 2)", "(one of all, largest, center; default: all)",
                  "(one of box, parse; default: box)"):
        assert shown in flat, shown
    assert out.startswith("usage: gpen-video [options] INPUT OUTPUT\n")
    assert len(out.split("\n\n")[0].splitlines()) == 3  # a short usage block
    module = subprocess.run([sys.executable, "-m", "gpen_video", "--version"], capture_output=True, text=True)
    assert module.returncode == 0 and module.stdout.startswith("gpen-video ")


@pytest.mark.parametrize(("typed", "said"), [
    ("--strenght", "gpen-video: error: unknown option --strenght; did you mean --strength?"),
    ("--strengt", "gpen-video: error: unknown option --strengt; did you mean --strength?"),  # no abbreviations
    ("--colour-boost", "gpen-video: error: unknown option --colour-boost; gpen-video --help lists the options"),
])
def test_an_unknown_option_is_one_line_naming_the_nearest(tmp_path, typed, said):
    run = gpen_video(tmp_path / "a.mp4", tmp_path / "b.mp4", typed, "0.5")
    assert run.returncode == 2 and run.stderr.strip() == said
    assert sorted(tmp_path.iterdir()) == []


def test_usage_errors_exit_2():
    run = gpen_video("only-one-argument.mp4")
    assert run.returncode == 2 and "usage:" in run.stderr
    assert gpen_video("a.mp4", "b.mp4", "--gpus", "x").returncode == 2


def test_bad_input_gives_one_line_and_exit_1(small_gpen, tmp_path):
    run = gpen_video(tmp_path / "missing.mp4", tmp_path / "out.mp4", "--report", tmp_path / "report.json",
                     weights=small_gpen)
    assert run.returncode == 1
    assert run.stderr.strip() == f"gpen-video: error: input not found: {tmp_path / 'missing.mp4'}"
    assert not (tmp_path / "out.mp4").exists()
    assert json.loads((tmp_path / "report.json").read_text())["files"] == [
        {"input": str(tmp_path / "missing.mp4"), "output": str(tmp_path / "out.mp4"), "result": "failed",
         "error": f"input not found: {tmp_path / 'missing.mp4'}"}]


def test_image_round_trip_honours_exif(small_gpen, tmp_path):
    src = shared_file("media/images/exif_orientation5_meds-aa-S001-01.jpg")
    out = tmp_path / "restored.png"
    run = gpen_video(src, out, "--tracks-out", tmp_path / "t.json", weights=small_gpen)
    assert run.returncode == 0, run.stderr
    upright = cv2.imread(str(src))  # OpenCV applies the EXIF orientation (5: transpose)
    result = cv2.imread(str(out))
    assert result.shape == upright.shape == (600, 480, 3)
    frames = json.loads((tmp_path / "t.json").read_text())["frames"]
    assert len(frames) == 1 and len(frames[0]["faces"]) == 1
    changed = np.any(result != upright, axis=2)
    assert 0 < changed.mean() < 0.9
    # A photo runs as a one-picture job in planar RGB: every pixel the face does not reach is exact.
    region = paste_region(frames[0]["faces"], SMALL_GPEN_SIZE, *upright.shape[:2])
    assert changed.any() and not changed[~region].any()


def test_the_libraries_own_log_lines_stay_out_of_the_output_unless_they_are_errors():
    """NVIDIA's video library logs its driver version on every NVDEC run: not the user's business."""
    script = ("import logging; from gpen_video.console import configure_logging; configure_logging(False); "
              "logging.getLogger('PyNvVideoCodec').setLevel(logging.INFO); "  # as the library itself does
              "logging.getLogger('PyNvVideoCodec').info('Supported NVENC Driver Version: 208'); "
              "logging.getLogger('PyNvVideoCodec').warning('Using NVENC 13.0 version'); "
              "logging.getLogger('PyNvVideoCodec').error('the driver is gone'); "
              "logging.getLogger('gpen_video.pipeline').info('restoring on the CPU')")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.stderr.splitlines() == ["gpen-video: PyNvVideoCodec: the driver is gone",
                                       "gpen-video: restoring on the CPU"]
