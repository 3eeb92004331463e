"""``--ray``: a batch on a real local Ray cluster with CPU actors and the small GPEN gives, file for
file, what the single-process batch gives (lossless FFV1, fp32: the same frames, timestamps and
audio packets), also when an actor is killed in the middle of a file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest

from gpen_video.api import restore_many

from . import corpus
from .conftest import decoded_planes, shared_file
from .test_preservation import _packets

ray = pytest.importorskip("ray", reason="needs Ray (pip install 'gpen-video[ray]')")

CLIPS = {"talk.mp4": "media/videos/talking_head_speech_liveportrait_d20.mp4",
         "event.mp4": "media/videos/multi_face_event_video_01.mp4",
         "vfr.mp4": "media/videos/talking_head_vfr_retalking1.mp4"}
#: One thread for torch in the driver's batch and in the actors (Ray gives each one CPU), so
#: both sum GPEN's convolutions in the same order and the lossless outputs are the same.
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def _cli(small_gpen: Path, *args: object, timeout: int = 600) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "gpen_video.cli", *map(str, args), "--device", "cpu", "--weights", small_gpen,
               "--detector", "retinaface-mobile", "--detector-weights",
               shared_file("weights/retinaface_mobilenet0.25.pth"), "--batch-size", "4", "--codec", "ffv1",
               "--name", "{stem}.mkv", "--quiet"]
    return subprocess.run(list(map(str, command)), capture_output=True, text=True, timeout=timeout, env=ONE_THREAD)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Three real clips, a second of each, with their sound."""
    folder = tmp_path_factory.mktemp("cluster") / "in"
    folder.mkdir()
    for name, source in CLIPS.items():
        corpus.excerpt(folder / name, shared_file(source), 1.0)
    return folder


@pytest.fixture(scope="module")
def alone(small_gpen, inputs, tmp_path_factory) -> Path:
    """The same batch in one process, on this machine."""
    out = tmp_path_factory.mktemp("alone")
    run = _cli(small_gpen, inputs, out)
    assert run.returncode == 0, run.stderr
    return out


def _assert_same_outputs(expected: Path, got: Path) -> None:
    assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in expected.iterdir())  # nothing else
    for path in sorted(expected.iterdir()):
        other = got / path.name
        with av.open(str(path)) as a, av.open(str(other)) as b:
            assert [f.pts for f in a.decode(video=0)] == [f.pts for f in b.decode(video=0)], path.name
        assert _packets(path, 1) == _packets(other, 1), path.name  # the sound, packet for packet
        for x, y in zip(decoded_planes(path), decoded_planes(other), strict=True):
            for plane_x, plane_y in zip(x, y):
                np.testing.assert_array_equal(plane_x, plane_y, path.name)


def test_a_batch_on_a_local_ray_cluster_equals_the_batch_in_one_process(small_gpen, inputs, alone, tmp_path):
    out = tmp_path / "out"
    run = _cli(small_gpen, inputs, out, "--ray", "local", "--ray-actors", "2")
    assert run.returncode == 0, run.stderr
    _assert_same_outputs(alone, out)


def test_a_killed_actor_s_file_runs_again_and_comes_out_the_same(small_gpen, inputs, alone, tmp_path):
    """The test starts the cluster and runs the batch through the API on it; it kills the actor at
    work as soon as its first output file is being written: Ray restarts the actor and runs the
    file again."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", object_store_memory=256 * 1024 * 1024,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    try:
        out = tmp_path / "out"
        results: list = []
        batch = threading.Thread(target=lambda: results.extend(restore_many(
            [inputs], out, ray="auto", ray_actors=1, name="{stem}.mkv", progress=False, device="cpu",
            weights=small_gpen, detector="retinaface-mobile",
            detector_weights=shared_file("weights/retinaface_mobilenet0.25.pth"), batch_size=4, codec="ffv1")))
        batch.start()
        deadline = time.monotonic() + 300
        while not list(out.glob(".*.partial-*")) and batch.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert batch.is_alive()
        actors = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == "gpen-video"]
        assert len(actors) == 1
        ray.kill(ray.get_actor(actors[0]["name"], namespace="gpen-video"), no_restart=False)
        batch.join(timeout=600)
        assert [r.error for r in results] == ["", "", ""]
    finally:
        ray.shutdown()
    _assert_same_outputs(alone, out)


def test_ray_options_are_checked_before_any_work(small_gpen, inputs, tmp_path):
    bad = _cli(small_gpen, inputs, tmp_path / "out", "--ray", "nowhere")
    assert bad.returncode == 1 and "--ray must be local, auto, ray://HOST:PORT or HOST:PORT" in bad.stderr
    lonely = _cli(small_gpen, inputs, tmp_path / "out", "--ray-actors", "2")
    assert lonely.returncode == 1 and bad.stderr.count("\n") == 1 and "--ray-actors needs --ray" in lonely.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def long_input(small_gpen, tmp_path_factory) -> tuple[Path, Path]:
    """A clip of three 30-frame segments (key frames every 30 frames: the last segment's decoding
    starts part-way), and its restoration in one process on this machine."""
    folder = tmp_path_factory.mktemp("long") / "in"
    folder.mkdir()
    (folder / "event.mp4").write_bytes(shared_file(CLIPS["event.mp4"]).read_bytes())
    out = tmp_path_factory.mktemp("long-alone")
    run = _cli(small_gpen, folder, out)
    assert run.returncode == 0, run.stderr
    return folder, out


def test_a_long_clip_is_split_into_segments_across_actors_and_comes_out_the_same(small_gpen, long_input, tmp_path):
    folder, alone = long_input
    out = tmp_path / "out"
    run = _cli(small_gpen, folder, out, "--ray", "local", "--ray-actors", "2", "--segment-frames", "30")
    assert run.returncode == 0, run.stderr
    _assert_same_outputs(alone, out)


def test_a_killed_driver_resumes_from_the_finished_segments_and_comes_out_the_same(small_gpen, long_input, tmp_path):
    folder, alone = long_input
    out = tmp_path / "out"
    work = out / ".event.mkv.gpen-work"
    command = [sys.executable, "-m", "gpen_video.cli", folder, out, "--ray", "local", "--ray-actors", "1",
               "--segment-frames", "30", "--resume", "--device", "cpu", "--weights", small_gpen, "--detector",
               "retinaface-mobile", "--detector-weights", shared_file("weights/retinaface_mobilenet0.25.pth"),
               "--batch-size", "4", "--codec", "ffv1", "--name", "{stem}.mkv", "--quiet"]
    driver = subprocess.Popen(list(map(str, command)), env=ONE_THREAD, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    deadline = time.monotonic() + 300
    while not list(work.glob("segment-*.bin")):
        assert driver.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(driver.pid, 9)  # the driver, and the local Ray cluster it started
    driver.wait()
    finished = len(list(work.glob("segment-*.bin")))
    assert 1 <= finished < 3 and not (out / "event.mkv").exists()

    resumed = subprocess.run(list(map(str, command)), check=False, capture_output=True, text=True, timeout=600,
                             env=ONE_THREAD)
    assert resumed.returncode == 0, resumed.stderr
    assert not work.exists()
    _assert_same_outputs(alone, out)


def test_each_actor_asks_for_its_node_s_cores_per_gpu_and_fits_on_every_node():
    from gpen_video.pipeline.cluster import cpus_per_actor

    def node(cpus: float, gpus: float = 0, alive: bool = True) -> dict:
        return {"Alive": alive, "Resources": {"CPU": cpus, **({"GPU": gpus} if gpus else {})}}

    assert cpus_per_actor([node(16, 1)], gpus=1, actors=1) == 16  # not one: Ray would give torch one thread
    assert cpus_per_actor([node(16, 1), node(64, 8), node(32, 0)], gpus=9, actors=9) == 8  # the GPU nodes' fewest
    assert cpus_per_actor([node(2)], gpus=0, actors=2) == 1  # two CPU actors on a two-core machine
    assert cpus_per_actor([node(8), node(4), node(96, alive=False)], gpus=0, actors=2) == 4
    assert cpus_per_actor([node(1, 2)], gpus=2, actors=2) == 1  # never less than one
