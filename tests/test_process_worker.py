"""Workers in processes of their own (``--worker process``): frames through shared memory, the
same output as thread workers, and a worker process that dies stops its job with its own error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from gpen_video.api import restore_video
from gpen_video.errors import UsageError, WorkerDied
from gpen_video.options import RestoreOptions
from gpen_video.pipeline.engine import Engine
from gpen_video.worker.shared import BLOCK_SLOTS, SharedFrames

from . import corpus
from .conftest import shared_file

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "portrait.mp4"


def _options(weights: Path, **extra) -> dict:
    return {"device": "cpu", "weights": weights, "detector": "retinaface-mobile", "precision": "fp32",
            "detector_weights": shared_file("weights/retinaface_mobilenet0.25.pth"), "progress": False,
            "codec": "ffv1", "batch_size": 4, **extra}


def _frames(path: Path) -> list[tuple[int, bytes]]:
    """Every frame's pts and samples (all planes, at their own bit depth)."""
    with av.open(str(path)) as c:
        return [(f.pts, b"".join(bytes(p) for p in f.planes)) for f in c.decode(video=0)]


@pytest.mark.parametrize("workers", [1, 2])
def test_worker_processes_give_the_frames_of_a_thread_worker_in_order(small_gpen, tmp_path, workers):
    """One or two worker processes (two: each takes whichever batch comes when it is free) give
    the thread worker's frames, sample for sample, with the same timestamps, in the same order."""
    thread, process = tmp_path / "thread.mkv", tmp_path / "process.mkv"
    expected = restore_video(SAMPLE, thread, **_options(small_gpen))
    summary = restore_video(SAMPLE, process, **_options(small_gpen, worker="process", workers_per_device=workers))
    assert (summary.frames, summary.faces) == (expected.frames, expected.faces) == (100, 100)
    assert _frames(process) == _frames(thread)


def test_deep_frames_travel_through_shared_memory_whole(small_gpen, tmp_path):
    """10-bit samples travel as 16-bit words: the worker process restores the frames the thread worker does."""
    source = corpus.encoded(tmp_path / "deep.mkv", "ffv1", "yuv420p10le", frames=6)
    thread, process = tmp_path / "thread.mkv", tmp_path / "process.mkv"
    restore_video(source, thread, **_options(small_gpen, threshold=0.5))
    summary = restore_video(source, process, **_options(small_gpen, threshold=0.5, worker="process"))
    assert summary.faces > 0
    with av.open(str(process)) as c:
        assert c.streams.video[0].codec_context.pix_fmt == "yuv420p10le"
    assert _frames(process) == _frames(thread)


def test_a_worker_process_that_dies_stops_its_job_with_its_own_error(small_gpen, tmp_path):
    """Killed mid-job, the worker's process ends the job at once with an error that says so, and
    nothing is left at OUTPUT; the engine's next job starts a new worker process and comes out
    as a run that nothing interrupted (a batch loses only the file that was running)."""
    out = tmp_path / "out.mkv"
    whole = tmp_path / "whole" / "out.mkv"
    whole.parent.mkdir()
    restore_video(SAMPLE, whole, **_options(small_gpen, worker="process"))
    options = RestoreOptions(**{k: v for k, v in _options(small_gpen, worker="process").items() if k != "progress"})
    with Engine(options, progress=False) as engine:
        killed = []

        def kill_after_some_frames(done: int, found: int) -> None:
            if not killed:
                process = engine.workers._pool.workers[0].process
                os.kill(process.pid, signal.SIGKILL)
                killed.append(process)

        with pytest.raises(WorkerDied, match=r"worker process of cpu was killed by signal 9"):
            engine.restore(SAMPLE, out, on_frame=kill_after_some_frames)
        assert killed and not out.exists() and sorted(tmp_path.iterdir()) == [whole.parent]
        engine.restore(SAMPLE, out)
        assert engine.workers._pool.workers[0].process.pid != killed[0].pid
    assert _frames(out) == _frames(whole)


def test_the_command_line_reports_a_dead_worker_process_in_one_line(small_gpen, tmp_path):
    """The command's worker process is killed as its first restoration is sent (by a wrapper
    that patches the command's own process)."""
    script = (
        "import os, signal, sys\n"
        "from gpen_video.worker.process import ProcessWorker\n"
        "queue = ProcessWorker.queue_restore\n"
        "def killing(self, *args):\n"
        "    os.kill(self.process.pid, signal.SIGKILL)\n"
        "    return queue(self, *args)\n"
        "ProcessWorker.queue_restore = killing\n"
        "from gpen_video.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    out = tmp_path / "out.mkv"
    run = subprocess.run([sys.executable, "-c", script, str(SAMPLE), str(out), "--device", "cpu", "--worker",
                          "process", "--weights", str(small_gpen), "--detector", "retinaface-mobile",
                          "--detector-weights", str(shared_file("weights/retinaface_mobilenet0.25.pth"))],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "gpen-video: error: the worker process of cpu was killed by signal 9 while it held work")
    assert not out.exists()


def test_nvdec_needs_thread_workers():
    with pytest.raises(UsageError, match="--decoder nvdec needs --worker thread"):
        RestoreOptions(worker="process", decoder="nvdec")


def test_shared_slots_are_reused_once_given_back_and_located_from_their_samples():
    frames = SharedFrames()
    picture = av.VideoFrame.from_ndarray(np.arange(48 * 64 * 3, dtype=np.uint8).reshape(48, 64, 3) % 251,
                                         format="rgb24").reformat(format="yuv420p")
    staged = [frames.stage(picture) for _ in range(BLOCK_SLOTS + 1)]
    assert len(frames.blocks) == 2  # a block fills, then another is made
    samples, give_back = staged[0]
    assert samples.numel() == 48 * 64 * 3 // 2 and samples.dtype == torch.uint8
    assert np.array_equal(samples.numpy()[: 48 * 64], picture.to_ndarray()[:48].ravel())  # the luma plane first
    ref = frames.locate(samples)
    assert torch.equal(ref.view(frames.blocks), samples)
    give_back()
    again, _ = frames.stage(picture)
    assert frames.locate(again) == ref and len(frames.blocks) == 2  # the slot given back is taken next


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_two_worker_processes_on_one_gpu_give_the_frames_of_a_thread_worker(small_gpen, tmp_path):
    """On one GPU, in fp32: two worker processes give one thread worker's frames, in order."""
    gpu = {**_options(small_gpen), "device": None, "gpus": [0], "compile": "on"}
    thread, process = tmp_path / "thread.mkv", tmp_path / "process.mkv"
    restore_video(SAMPLE, thread, **gpu)
    summary = restore_video(SAMPLE, process, **gpu, worker="process", workers_per_device=2)
    assert summary.faces == 100
    assert _frames(process) == _frames(thread)
