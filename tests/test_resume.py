"""Long jobs: a run killed outright (kill -9) continues with --resume from its last finished
segment, and the result is the file an uninterrupted run gives."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import av

from .conftest import shared_file

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "portrait.mp4"


def _command(output: Path, weights: Path) -> list[str]:
    return [sys.executable, "-m", "gpen_video.cli", str(SAMPLE), str(output), "--resume", "--segment-frames", "20",
            "--device", "cpu", "--weights", str(weights), "--detector", "retinaface-mobile",
            "--detector-weights", str(shared_file("weights/retinaface_mobilenet0.25.pth")),
            "--batch-size", "4", "--preset", "ultrafast"]


def _timeline(path: Path) -> tuple[list, list]:
    """Video frame timestamps, and the audio packets (timestamps and bytes)."""
    with av.open(str(path)) as c:
        frames = [f.pts for f in c.decode(video=0)]
    with av.open(str(path)) as c:
        audio = [(p.pts, p.dts, bytes(p)) for p in c.demux(audio=0) if p.dts is not None]
    return frames, audio


def test_a_killed_job_resumes_from_its_last_segment(small_gpen, tmp_path):
    killed, whole = tmp_path / "killed" / "out.mp4", tmp_path / "whole" / "out.mp4"
    killed.parent.mkdir()
    whole.parent.mkdir()
    work = killed.with_name(".out.mp4.gpen-work")
    proc = subprocess.Popen(_command(killed, small_gpen), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (work / "segment-000001.bin").exists():  # two of the five segments are done
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert not killed.exists()
    finished = len(list(work.glob("segment-*.bin")))
    assert 2 <= finished < 5

    resumed = subprocess.run(_command(killed, small_gpen), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed at frame {20 * finished}" in resumed.stderr
    assert sorted(p.name for p in killed.parent.iterdir()) == ["out.mp4"]  # work dir and stale temp file gone

    subprocess.run(_command(whole, small_gpen), capture_output=True, check=True, timeout=600)
    frames, audio = _timeline(killed)
    assert (frames, audio) == _timeline(whole)
    assert (frames, audio) == _timeline(SAMPLE)  # every frame and audio packet of the source, on time
    assert len(frames) == 100


def test_resume_refuses_the_work_of_another_job(small_gpen, tmp_path):
    out = tmp_path / "out.mp4"
    work = tmp_path / ".out.mp4.gpen-work"
    work.mkdir()
    (work / "job.json").write_text('{"input": "some other video"}')
    run = subprocess.run(_command(out, small_gpen), capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert "holds the work of another job" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not out.exists() and (work / "job.json").read_text() == '{"input": "some other video"}'
