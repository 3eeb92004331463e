"""Many inputs in one call: a folder of real clips, a photo and a broken file, through the CLI."""

from __future__ import annotations

import json
import os
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from . import corpus
from .conftest import shared_file
from .test_preservation import gpen_video

CLIPS = {"speech.mp4": "media/videos/talking_head_speech_retalking2.mp4",
         "vfr.mp4": "media/videos/talking_head_vfr_retalking1.mp4",
         "phone.mp4": corpus.PHONE}


def _timeline(path: Path) -> tuple[list[Fraction], list[tuple[Fraction | None, bytes]]]:
    """Every video frame's time, and every audio packet's time and bytes."""
    frames = _frame_times(path)
    with av.open(str(path)) as container:
        audio = [(p.pts * p.time_base if p.pts is not None else None, bytes(p))
                 for p in container.demux(audio=0) if p.size]
    return frames, audio


def _frame_times(path: Path) -> list[Fraction]:
    with av.open(str(path)) as container:
        return [f.pts * f.time_base for f in container.decode(video=0)]


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "clips"
    folder.mkdir()
    for name, source in CLIPS.items():
        corpus.excerpt(folder / name, shared_file(source), 1.0)
    (folder / "people.jpg").write_bytes(shared_file("media/images/whole_two_people.jpg").read_bytes())
    corpus.cut(folder / "broken.mp4", folder / "speech.mp4", 0.4)
    return folder


def _stats(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()}


def test_a_folder_is_restored_and_a_broken_file_costs_only_itself(small_gpen, tmp_path):
    folder, out = _folder(tmp_path), tmp_path / "restored"
    before = _stats(folder)
    run = gpen_video(small_gpen, folder, out, "--report", tmp_path / "report.json", timeout=900)
    assert run.returncode == 1, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("gpen-video: error:")]
    assert len(errors) == 1 and errors[0].startswith(f"gpen-video: error: {folder / 'broken.mp4'}: "), run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["tool"], report["schema"]) == ("gpen-video", 1)
    records = {Path(r["input"]).name: r for r in report["files"]}
    assert sorted(records) == ["broken.mp4", "people.jpg", "phone.mp4", "speech.mp4", "vfr.mp4"]
    assert records["broken.mp4"]["result"] == "failed" and records["broken.mp4"]["error"] in errors[0]
    for name in ("people.jpg", *CLIPS):
        record = records[name]
        assert record["result"] == "done" and record["error"] is None and record["output"] == str(out / name)
        assert record["frames"] == (1 if name == "people.jpg" else len(_frame_times(folder / name)))
        assert 0 < record["faces"] and record["seconds"] > 0 and isinstance(record["warnings"], list)
    assert sorted(p.name for p in out.iterdir()) == ["people.jpg", "phone.mp4", "speech.mp4", "vfr.mp4"]
    assert not [p for p in tmp_path.rglob("*") if "partial" in p.name or p.name.endswith(".lock")]
    for name in CLIPS:
        assert _timeline(out / name) == _timeline(folder / name), name
    photo = cv2.imread(str(folder / "people.jpg")).astype(int)
    restored = cv2.imread(str(out / "people.jpg")).astype(int)
    assert restored.shape == photo.shape and np.abs(restored - photo).max() > 30  # faces changed
    assert _stats(folder) == before  # the inputs are only read

    done = _stats(out)
    again = gpen_video(small_gpen, folder, out, "--skip-existing", timeout=900)
    assert again.returncode == 1  # the broken file is still broken, and said so
    assert _stats(out) == done  # nothing that exists was touched
    assert sum("skipped" in line for line in again.stderr.splitlines()) >= 4


def test_outputs_follow_the_name_template(small_gpen, tmp_path):
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    corpus.encoded(folder / "sub" / "clip.avi", "mpeg4", "yuv420p", frames=4)
    (folder / "face.png").write_bytes(shared_file("media/images/cropped_ffhq_00000.png").read_bytes())
    out = tmp_path / "out"
    run = gpen_video(small_gpen, folder, out, "--recursive", "--name", "{stem}_gpen.{ext}", "--quiet")
    assert run.returncode == 0, run.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "face_gpen.png", os.path.join("sub", "clip_gpen.mkv")]  # AVI cannot be written: Matroska


def test_two_batches_on_one_folder_restore_each_file_once(small_gpen, tmp_path):
    """Two users (or a retry while the first run goes on) point batches at the same OUTDIR: every
    output is claimed by one job, finished once, and the other run names it busy or done."""
    import subprocess
    import sys

    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    for name in ("a.mp4", "b.mp4", "c.mp4"):
        corpus.encoded(folder / name, "libx264", "yuv420p", frames=8)
    command = [sys.executable, "-m", "gpen_video.cli", str(folder), str(out), "--device", "cpu", "--weights",
               str(small_gpen), "--detector", "retinaface-mobile", "--detector-weights",
               str(shared_file("weights/retinaface_mobilenet0.25.pth")), "--batch-size", "4", "--jobs", "1"]
    runs = [subprocess.Popen(command, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    reports = [run.communicate(timeout=600)[1] for run in runs]
    assert sorted(p.name for p in out.iterdir()) == ["a.mp4", "b.mp4", "c.mp4"]  # no partial or lock left
    for name in ("a.mp4", "b.mp4", "c.mp4"):
        done = [r for r in reports if f"ok      {folder / name} ->" in r]
        refused = [r for r in reports if f"FAILED  {folder / name}: " in r]
        assert len(done) == 1 and len(refused) == 1, reports
        assert _frame_times(out / name) == _frame_times(folder / name)
    for run, report in zip(runs, reports):
        refusals = [line for line in report.splitlines() if line.startswith("  FAILED")]
        assert all("another gpen-video job is writing" in line or "exists" in line for line in refusals), report
        assert run.returncode == (1 if refusals else 0)


def test_one_input_and_a_new_folder_named_with_a_slash_writes_into_that_folder(small_gpen, tmp_path):
    """``gpen-video clip.mp4 restored/``: the trailing slash says it is a folder, though it does
    not exist yet (a path without one and without an extension is an error saying so)."""
    clip = corpus.encoded(tmp_path / "clip.mp4", "libx264", "yuv420p", frames=4)
    run = gpen_video(small_gpen, clip, f"{tmp_path / 'restored'}{os.sep}", "--quiet")
    assert run.returncode == 0, run.stderr
    assert [p.name for p in (tmp_path / "restored").iterdir()] == ["clip.mp4"]
    assert _frame_times(tmp_path / "restored" / "clip.mp4") == _frame_times(clip)


def test_a_time_range_in_a_batch_applies_to_its_videos_and_its_photos_are_restored_whole(small_gpen, tmp_path):
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    corpus.excerpt(folder / "speech.mp4", shared_file(CLIPS["speech.mp4"]), 0.4)
    (folder / "people.jpg").write_bytes(shared_file("media/images/whole_two_people.jpg").read_bytes())
    run = gpen_video(small_gpen, folder, out, "--start", "0.2", "--tracks-out", tmp_path / "tracks", "--quiet")
    assert run.returncode == 0, run.stderr
    photo, restored = (cv2.imread(str(p)).astype(int) for p in (folder / "people.jpg", out / "people.jpg"))
    assert np.abs(restored - photo).max() > 30  # its faces restored, though it has no time 0.2 s into it
    records = json.loads((tmp_path / "tracks" / "speech.json").read_text())["frames"]
    restored_at = [any(face["restored"] for face in r["faces"]) for r in records]
    assert restored_at[:5] == [False] * 5 and any(restored_at[5:])  # 25 fps: from frame 5 on
    assert _frame_times(out / "speech.mp4") == _frame_times(folder / "speech.mp4")


def test_a_photo_in_a_batch_with_a_time_range_gets_the_same_choice_of_faces_as_alone(small_gpen, tmp_path):
    """``--faces`` chooses a photo's faces by a first pass over it; in a batch with a time range,
    that pass sees the whole photo too, so the photo comes out as it does without the range."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "people.jpg").write_bytes(shared_file("media/images/whole_two_people.jpg").read_bytes())
    for out, extra in ((tmp_path / "alone", ()), (tmp_path / "ranged", ("--start", "0.2"))):
        run = gpen_video(small_gpen, folder, out, "--faces", "largest", "--quiet", *extra)
        assert run.returncode == 0, run.stderr
    alone, ranged = (cv2.imread(str(tmp_path / d / "people.jpg")).astype(int) for d in ("alone", "ranged"))
    photo = cv2.imread(str(folder / "people.jpg")).astype(int)
    assert (np.abs(alone - photo).max(axis=2) > 30).sum() > 10_000  # the largest face restored
    assert np.array_equal(alone, ranged)
