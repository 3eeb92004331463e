"""The benchmark harnesses run end to end on the CPU (tiny model), so they never rot between GPU runs."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def test_model_throughput_smoke(tmp_path):
    out = tmp_path / "rows.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/model_throughput.py"), "--smoke", "--json", str(out)],
                   check=True, capture_output=True, text=True, cwd=ROOT)
    rows = json.loads(out.read_text())["rows"]
    assert rows[0]["variant"].startswith("official") and rows[0]["precision"] == "fp32"
    fast = rows[1:]
    assert {r["precision"] for r in fast} == {"fp16", "bf16"}
    assert all(r["faces_per_s"] > 0 and r["rel_error"] < 1e-2 for r in fast)


def _smoke(script: str, tmp_path: Path, golden: dict, *options: str) -> object:
    """Run a GPU benchmark's ``--smoke`` mode with the small golden GPEN and the shared detector;
    the JSON it writes."""
    from .conftest import SHARED, shared_file

    weights = tmp_path / "gpen_small.pth"
    torch.save(golden["state_dict"], weights)
    out = tmp_path / "out.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke", "--weights", str(weights),
                    "--detector-weights", str(shared_file("weights/retinaface_mobilenet0.25.pth")),
                    "--json", str(out), *options], check=True, capture_output=True, text=True, cwd=ROOT,
                   env={**os.environ, "GPEN_VIDEO_SHARED": str(SHARED)})
    return json.loads(out.read_text())


def test_pipeline_bench_smoke(tmp_path, golden):
    numbers = _smoke("pipeline_bench.py", tmp_path, golden)
    assert numbers["transcode_fps"] > 0 and numbers["our_fps"] > 0 and numbers["baseline_fps"] > 0
    assert numbers["crowd_faces_per_frame"] >= 3  # the crowd clip has ~8 faces; the harness must see them
    assert numbers["run_rss_mib_short"] > 100 and numbers["run_rss_mib_long"] > 100  # whole runs were measured
    # and beside a plain transcode's peak of the same clip, in a process of its own:
    assert numbers["transcode_rss_mib_hd"] > 100
    assert numbers["run_over_transcode_mib_hd"] == numbers["run_rss_mib_short"] - numbers["transcode_rss_mib_hd"]
    assert numbers["run_fps_long"] > 0  # and its ratio is to a transcode of the same long clip:
    assert numbers["long_ratio"] == numbers["run_fps_long"] / numbers["long_transcode_fps"]
    assert numbers["crowd_gpu_busy"] == numbers["one_face_gpu_busy"] == {}  # no GPU here: reported as none
    assert numbers["crowd_decoder"] == numbers["one_face_decoder"] == "decoded on the CPU"
    threads = numbers["crowd_thread_cpu"]  # the stage threads' CPU, as a share of the run
    assert threads["worker-cpu"] > 0.1 and all(0 <= v < os.cpu_count() for v in threads.values()), threads


def test_batch_bench_smoke(tmp_path, golden):
    numbers = _smoke("batch_bench.py", tmp_path, golden)
    assert numbers["clips"] == 3 and numbers["transcode_s"] > 0
    assert all(numbers[k] > 0 for k in ("batch_cold_s", "batch_s", "batch_jobs1_s"))
    assert numbers["separate_over_batch"] == round(numbers["separate_mean_s"] * 3 / numbers["batch_s"], 2)


def test_ray_bench_smoke(tmp_path, golden):
    pytest.importorskip("ray", reason="needs Ray (pip install 'gpen-video[ray]')")
    numbers = _smoke("ray_bench.py", tmp_path, golden)
    for name in ("clips", "long"):
        assert numbers[f"{name}_plain_s"] > 0 and numbers[f"{name}_ray_s"] > 0
        assert numbers[f"{name}_ray_over_plain"] == round(numbers[f"{name}_ray_s"] / numbers[f"{name}_plain_s"], 3)


def test_worker_bench_smoke(tmp_path, golden):
    numbers = _smoke("worker_bench.py", tmp_path, golden)
    rows = {f"{kind}_{place}": numbers[f"{kind}_{place}"] for kind in ("thread", "process") for place in ("one", "all")}
    assert all(r["crowd_faces_per_s"] > 0 and r["one_face_fps"] > 0 for r in rows.values())
    assert all(r["one_face_over_transcode"] == round(r["one_face_fps"] / numbers["one_face_transcode_fps"], 3)
               for r in rows.values())
    for kind in ("thread", "process"):
        assert numbers[f"{kind}_all_over_one"] == round(
            rows[f"{kind}_all"]["crowd_faces_per_s"] / rows[f"{kind}_one"]["crowd_faces_per_s"], 3)
    assert numbers["process_over_thread_all"] == round(
        rows["process_all"]["crowd_faces_per_s"] / rows["thread_all"]["crowd_faces_per_s"], 3)


def test_controls_bench_smoke(tmp_path, golden):
    numbers = _smoke("controls_bench.py", tmp_path, golden)
    assert all(numbers[k] > 0 for k in ("render_s", "largest_s", "tracks_s", "detect_only_s", "preview_s",
                                         "preview_long_s"))
    assert numbers["largest_over_render"] == round(numbers["largest_s"] / numbers["render_s"], 3)
    assert numbers["faces_restored"] == 5 and numbers["parse_s"] > 0 and numbers["parse_net_ms_per_face"] > 0
    assert 2 <= numbers["preview_decoded"] <= numbers["preview_long_decoded"] <= 10  # 5 and 10 frames


def test_decoder_bench_smoke(tmp_path, golden):
    numbers = _smoke("decoder_bench.py", tmp_path, golden)
    assert numbers["decoders"] == ["cpu"]  # NVDEC's rows need a GPU
    assert numbers["decode_only_one_face_cpu"]["fps"] > 0
    for clip in ("one_face", "one_face_4k", "crowd"):
        row = numbers[f"{clip}_cpu"]
        assert row["decoder"] == "decoded on the CPU" and row["fps"] > 0, clip
        assert row["over_transcode"] == round(row["fps"] / numbers[f"{clip}_transcode_fps"], 3), clip
        assert row["over_encode_only"] == round(row["fps"] / numbers[f"{clip}_encode_only_fps"], 3), clip
        assert 0 < row["pipeline_cpu_ms_per_frame"] <= row["process_cpu_ms_per_frame"], clip
        assert 0 < row["first_frame_s"] and row["after_first_frame_fps"] > 0, clip
        assert list(row["first_picture_s"]) == ["decoded", "detected", "tracked", "restored", "written"], clip
        assert row["first_picture_s"]["written"] == pytest.approx(row["first_frame_s"], abs=0.01), clip
        assert row["thread_cpu_s"] and all(k.startswith(("decode", "track", "encode", "worker-"))
                                           for k in row["thread_cpu_s"]), clip
    assert numbers["crowd_cpu"]["faces_per_s"] > 0
    assert numbers["detector_ms_per_frame_retinaface-r50"] > numbers["detector_ms_per_frame_retinaface-mobile"] > 0


def test_startup_bench_smoke(tmp_path, golden):
    numbers = _smoke("startup_bench.py", tmp_path, golden)
    assert numbers["import_s"] > 0
    steps = list(numbers["steps"].values())
    assert len(steps) == 12 and steps == sorted(steps) and steps[0] > 0
    for variant in ("eager", "compiled-cold", "compiled-warm"):
        row = numbers[variant]
        assert 0 < row["first_frame_s"] < row["wall_s"], variant
        stages = row["first_picture_s"]
        assert list(stages) == ["decoded", "detected", "tracked", "restored", "written"], variant
        assert list(stages.values()) == sorted(stages.values()) and stages["written"] < row["first_frame_s"], variant
        gpen = "GPEN (compiling)" if "GPEN (compiling)" in row else "GPEN"
        parts = [row["workers"], row["weights"], row[gpen]]  # the start's parts: each may round to 0.0 s
        assert min(parts) >= 0 and sum(parts) > 0, variant


def test_trace_pipeline_smoke(tmp_path, golden):
    """Every labelled step is caught on the worker thread, where the profiler must see it."""
    from .conftest import shared_file

    crowd = shared_file("media/videos/multi_face_crowd_facenet_pytorch.mp4")
    numbers = _smoke("trace_pipeline.py", tmp_path, golden, str(crowd))
    steps = numbers["worker_ms_per_frame"]
    assert {"detect/detector", "detect/thumbnails", "detected/wait", "restore/warp", "restore/gpen",
            "restore/paste", "collect/wait"} <= set(steps), steps
    assert numbers["frames"] == 25 and numbers["faces"] >= 3 * 25
    assert "gpu_busy" not in numbers  # no GPU here: no GPU rows


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_busy_share_tells_a_busy_gpu_from_an_idle_one():
    spec = importlib.util.spec_from_file_location("gpu_busy", ROOT / "benchmarks" / "gpu_busy.py")
    gpu_busy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_busy)
    x = torch.randn(4096, 4096, device="cuda:0")
    with gpu_busy.GpuBusy([0]) as busy:
        end = time.monotonic() + 2
        while time.monotonic() < end:
            for _ in range(20):
                x = (x @ x).clamp(-1, 1)
            torch.cuda.synchronize()
    with gpu_busy.GpuBusy([0]) as idle:
        time.sleep(2)
    assert busy.shares()[0] > 0.8 and idle.shares()[0] < 0.2


def test_encoder_contention_smoke(tmp_path, golden):
    rows = {r["variant"]: r for r in _smoke("encoder_contention.py", tmp_path, golden,
                                            "--variants",
                                            "transcode,transcode-planes,encode-only,encode-beside-python,no-faces,"
                                            "no-detection,default:cpu")}
    assert all(r["fps"] > 0 for r in rows.values())
    # The thread accounting names the pipeline's device worker, and adds up to no more than the process used.
    for row in rows.values():
        assert 0 < sum(row["thread_cpu_s"].values()) <= row["process_cpu_s"] + 0.1
        assert row["busiest_thread_s"].keys() == row["thread_cpu_s"].keys()
        assert all(row["busiest_thread_s"][k] <= v for k, v in row["thread_cpu_s"].items())
    assert rows["default:cpu"]["thread_cpu_s"]["worker-cpu"] > 0
    assert "restore[cpu]" not in rows["no-faces"]["busy"] and "restore[cpu]" in rows["default:cpu"]["busy"]
    assert not any(stage.startswith("detect") for stage in rows["no-detection"]["busy"])
    assert 0 < rows["default:cpu"]["busy"]["encode waiting for its queue"] < 1
    assert rows["encode-only"]["output_bytes"] == rows["transcode"]["output_bytes"]  # the same frames encoded
    assert rows["encode-beside-python"]["output_bytes"] == rows["transcode"]["output_bytes"]
    beside = rows["encode-beside-python"]["alongside"]  # the GIL's other taker ran (its own CPU clock)
    assert beside["steps"] > 0 and 0 < beside["cpu_s"] <= rows["encode-beside-python"]["process_cpu_s"] + 0.1
    assert all(rows[v]["alongside"] == {} for v in ("transcode", "encode-only", "default:cpu"))
    assert list(rows["default:cpu"]["first_picture_s"]) == ["decoded", "detected", "tracked", "restored", "written"]
    assert list(rows["no-detection"]["first_picture_s"]) == ["decoded", "tracked", "written"]  # nothing detected


def test_compare_versions_smoke(tmp_path, golden):
    old = tmp_path / "old"
    old.symlink_to(ROOT)  # the version is named after the folder
    rows = _smoke("compare_versions.py", tmp_path, golden, "--old", str(old), "--marginal", "0.5",
                  "--clips", "crowd")  # one clip: the other differs only in its file
    assert sorted((r["clip"], r["version"], r["length"]) for r in rows) == [
        ("crowd", version, length) for version in ("new", "old") for length in ("long", "short")]
    frames = {(r["version"], r["length"]): r["frames"] for r in rows}
    assert all(frames[version, "long"] > frames[version, "short"] for version, _ in frames)
    assert all(r["fps"] > 0 and r["faces_per_s"] > 2 * r["fps"] for r in rows)  # the crowd's faces were found
    assert all(0 < r["busy"]["restore[cpu]"] <= 1 for r in rows)
    assert all(0 < r["first_picture_s"]["written"] < r["seconds"] for r in rows)


def test_staging_copy_smoke(tmp_path):
    out = tmp_path / "rows.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/staging_copy.py"), "--smoke", "--json", str(out)],
                   check=True, capture_output=True, text=True, cwd=ROOT)
    rows = json.loads(out.read_text())
    pinned = torch.cuda.is_available()
    assert len(rows) == 2 * (5 if pinned else 2)  # every case, twice
    assert all(0 < r["wall_ms"] and 0 <= r["cpu_ms"] for r in rows)


def test_steadiness_smoke(tmp_path):
    """The harness finds the clip's face as one track, and the known path's truth lines up with
    what the detector finds (the raw error a few % of the eye distance, not a misplaced truth)."""
    from .conftest import SHARED, shared_file

    shared_file("media/videos/talking_head_vfr_retalking1.mp4")  # the smoke's clip and photo
    shared_file("media/images/whole_facexlib_test2.jpg")
    out = tmp_path / "out.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "steadiness.py"), "--smoke", "--detector-weights",
                    str(shared_file("weights/retinaface_mobilenet0.25.pth")), "--json", str(out)],
                   check=True, capture_output=True, text=True, cwd=ROOT,
                   env={**os.environ, "GPEN_VIDEO_SHARED": str(SHARED)})
    numbers = json.loads(out.read_text())
    [track] = numbers["clips"]
    assert track["frames"] == 30 and 0 < track["jitter_ratio"] < 1 and 0 < track["jitter_ratio_before"] < 1
    [path] = numbers["paths"]
    assert path["path"] == "fast-turn" and 0 < path["raw_error_pct"] < 10
    assert path["smoothed_error_pct"] > 0 and path["before_error_pct"] > 0
