"""One engine, many jobs: built once, each job's output as if it ran alone, and a failed job costs
only itself."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from gpen_video.errors import InputError, UsageError
from gpen_video.faces.parsenet import ParseNet
from gpen_video.options import BatchOptions, JobOptions, RestoreOptions
from gpen_video.pipeline.batch import restore_many
from gpen_video.pipeline.engine import Engine
from gpen_video.worker.device import DeviceWorker

from . import corpus
from . import facexlib_references as references
from .conftest import decoded_planes, shared_file
from .made_by_tools import ffmpeg


def _options(weights: Path) -> RestoreOptions:
    """The CPU, the small GPEN and the real mobile detector; FFV1, so outputs compare sample for sample."""
    return RestoreOptions(device="cpu", weights=weights, detector="retinaface-mobile",
                          detector_weights=shared_file("weights/retinaface_mobilenet0.25.pth"), batch_size=4,
                          codec="ffv1")


@pytest.fixture
def built(monkeypatch) -> list[DeviceWorker]:
    """Every DeviceWorker built while the test runs (the real ones, counted)."""
    workers: list[DeviceWorker] = []
    real_init = DeviceWorker.__init__

    def counting_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        workers.append(self)

    monkeypatch.setattr(DeviceWorker, "__init__", counting_init)
    return workers


def _assert_same_video(a: Path, b: Path) -> None:
    planes_a, planes_b = decoded_planes(a), decoded_planes(b)
    assert len(planes_a) == len(planes_b)
    for frame_a, frame_b in zip(planes_a, planes_b):
        for plane_a, plane_b in zip(frame_a, frame_b):
            np.testing.assert_array_equal(plane_a, plane_b)


def test_one_engine_runs_many_jobs_each_as_if_alone(small_gpen, tmp_path, built):
    videos = [corpus.encoded(tmp_path / "a.mp4", "libx264", "yuv420p", frames=8),
              corpus.interlaced(tmp_path / "b.mp4", top_first=True, frames=4, cut_at=8),
              corpus.encoded(tmp_path / "c.mkv", "ffv1", "yuv422p", frames=6)]
    photo = shared_file("media/images/whole_two_people.jpg")
    broken = corpus.size_change_ts(tmp_path / "broken.ts")  # fails half-way, at the change of size
    together = tmp_path / "together"
    together.mkdir()
    with Engine(_options(small_gpen), progress=False) as engine:
        engine.restore(videos[0], together / "a.mkv")
        with pytest.raises(InputError, match="changes size"):
            engine.restore(broken, together / "broken.mkv")
        assert not list(together.glob("*broken*")) and not list(together.glob(".*"))
        for video in videos[1:]:
            engine.restore(video, together / f"{video.stem}.mkv")
        engine.restore(photo, together / "photo.png")
    assert len(built) == 1  # one worker for five jobs

    for video in videos:
        _assert_same_video(together / f"{video.stem}.mkv", _alone(small_gpen, video, tmp_path))
    assert (together / "photo.png").read_bytes() == _alone(small_gpen, photo, tmp_path).read_bytes()


def _alone(weights: Path, source: Path, tmp_path: Path) -> Path:
    """``source`` restored by an engine of its own, the only job it runs."""
    output = tmp_path / "alone" / (source.stem + (".png" if source.suffix == ".jpg" else ".mkv"))
    output.parent.mkdir(exist_ok=True)
    if not output.exists():
        with Engine(_options(weights), progress=False) as engine:
            engine.restore(source, output)
    return output


def test_jobs_at_once_share_the_workers_and_each_comes_out_as_if_alone(small_gpen, tmp_path, built):
    """Four files restored at once on one engine, their batches interleaved on its one worker; one
    of them fails half-way, which costs only itself."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    videos = [corpus.encoded(inputs / "a.mp4", "libx264", "yuv420p", frames=12),
              corpus.encoded(inputs / "c.mkv", "ffv1", "yuv422p", frames=9),
              corpus.interlaced(inputs / "b.mp4", top_first=False, frames=4, cut_at=8)]
    corpus.size_change_ts(inputs / "broken.ts")
    with Engine(_options(small_gpen), progress=False) as engine:
        results = restore_many(engine, [inputs], tmp_path / "out", BatchOptions(name="{stem}.mkv", jobs=4),
                               JobOptions(), progress=False)
    assert len(built) == 1
    assert [(r.input.name, bool(r.error)) for r in results] == [
        ("a.mp4", False), ("b.mp4", False), ("broken.ts", True), ("c.mkv", False)]
    assert "changes size" in results[2].error
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.mkv", "b.mkv", "c.mkv"]
    for video in videos:
        _assert_same_video(tmp_path / "out" / f"{video.stem}.mkv", _alone(small_gpen, video, tmp_path))


def test_jobs_bring_options_of_their_own_to_one_engine(small_gpen, tmp_path, built):
    """One warm engine runs a job with a time range, one choosing the largest face, one at half
    strength, one with the face parser's mask (which the engine had not loaded), and one with the
    engine's options: each comes out as an engine of its own options makes it. What the workers
    keep (here the GPEN batch) is refused per job, in one line, before any work."""
    talk = shared_file("media/videos/talking_head_speech_liveportrait_d20.mp4")
    clip = tmp_path / "clip.mp4"
    ffmpeg("-i", talk, "-t", "1", "-c", "copy", clip)
    parser_weights = tmp_path / "parsenet_random.pth"  # the official weights cannot be had here
    torch.save(references.seeded_weights(ParseNet(), seed=4), parser_weights)
    base = _options(small_gpen)
    jobs = {"ranged": dataclasses.replace(base, start=0.4, end=0.6),
            "largest": dataclasses.replace(base, faces="largest"),
            "weaker": dataclasses.replace(base, strength=0.5), "own": None,
            "parsed": dataclasses.replace(base, mask="parse", parse_weights=parser_weights, start=0.4, end=0.6)}
    with Engine(base, progress=False) as engine:
        for name, options in jobs.items():
            engine.restore(clip, tmp_path / f"{name}.mkv", options=options)
        with pytest.raises(UsageError, match="^--batch-size is set when the engine starts; a job cannot change it$"):
            engine.restore(clip, tmp_path / "other.mkv", options=dataclasses.replace(base, batch_size=2))
    assert len(built) == 1 and not (tmp_path / "other.mkv").exists()
    for name, options in jobs.items():
        alone = tmp_path / f"{name}-alone.mkv"
        with Engine(options or base, progress=False) as engine:
            engine.restore(clip, alone)
        _assert_same_video(tmp_path / f"{name}.mkv", alone)
    changed = [any((a != b).any() for a, b in zip(x, y))
               for x, y in zip(decoded_planes(clip), decoded_planes(tmp_path / "ranged.mkv"))]
    assert any(changed) and not all(changed)  # only the frames in the range were restored


def test_an_engine_that_has_not_run_a_job_has_loaded_nothing(small_gpen, tmp_path, built):
    with Engine(_options(small_gpen), progress=False) as engine, \
            pytest.raises(Exception, match="exists; pass --overwrite"):
        existing = tmp_path / "out.mkv"
        existing.write_bytes(b"keep")
        engine.restore(corpus.encoded(tmp_path / "a.mp4", "libx264", "yuv420p", frames=2), existing)
    assert built == [] and existing.read_bytes() == b"keep"


def test_compile_auto_compiles_only_where_it_pays_for_the_work():
    """Before this machine has measured anything, a 31-frame clip does not wait seconds of compiling
    to save a fraction of one, a long job does, and an empty compile cache asks for more work; once
    both paths are measured, their figures decide, and a compile measured slower is never chosen."""
    from gpen_video.worker.speeds import Measured

    unmeasured = Measured()
    assert [unmeasured.compile_pays(n, warm_cache=False) for n in (31, 16000, 74999, 75000, None)] == \
        [False, False, False, True, True]
    assert [unmeasured.compile_pays(n, warm_cache=True) for n in (31, 15999, 16000)] == [False, False, True]
    faster = Measured(eager=2e-3, compiled=1e-3, compile_warm=3.0)
    assert [faster.compile_pays(n, warm_cache=True) for n in (2999, 3000)] == [False, True]
    # No cold compile measured: its presumed 24 s against the measured saving.
    assert [faster.compile_pays(n, warm_cache=False) for n in (23999, 24000)] == [False, True]
    slower = Measured(eager=1e-3, compiled=1.2e-3, compile_warm=0.1)
    assert not any(slower.compile_pays(n, warm_cache=True) for n in (31, 10**7, None))
    only_eager = Measured(eager=5e-3)  # the saving is presumed until the compiled path is measured too
    assert [only_eager.compile_pays(n, warm_cache=True) for n in (15999, 16000)] == [False, True]


def test_measured_speeds_are_kept_per_setup_and_survive_a_damaged_file(tmp_path, monkeypatch):
    from gpen_video.worker import speeds

    monkeypatch.setenv("GPEN_VIDEO_HOME", str(tmp_path))
    assert speeds.measured("H100 | fp16") == speeds.Measured()
    speeds.record("H100 | fp16", eager=1.4e-3)
    speeds.record("H100 | fp16", compiled=1.1e-3, compile_warm=5.0)
    speeds.record("H200 | fp16", eager=1.0e-3)
    assert speeds.measured("H100 | fp16") == speeds.Measured(eager=1.4e-3, compiled=1.1e-3, compile_warm=5.0)
    assert speeds.measured("H200 | fp16") == speeds.Measured(eager=1.0e-3)
    assert [p.name for p in tmp_path.iterdir()] == [speeds.SPEEDS_FILE]  # no temporary file left
    (tmp_path / speeds.SPEEDS_FILE).write_text('{"H100 | fp16": {"eager": "fast"')
    assert speeds.measured("H100 | fp16") == speeds.Measured()
    speeds.record("H100 | fp16", eager=1.3e-3)  # measured again from scratch
    assert speeds.measured("H100 | fp16") == speeds.Measured(eager=1.3e-3)


def test_the_cpu_never_compiles(small_gpen):
    for setting, expected in (("auto", False), ("on", True), ("off", False)):
        engine = Engine(dataclasses.replace(_options(small_gpen), compile=setting), progress=False)
        assert engine.workers.compiles(31) is engine.workers.compiles(None) is expected
