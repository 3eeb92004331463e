"""Bad input gets one clear line and exit code 1; nothing appears at OUTPUT; the input is untouched."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from . import corpus
from .conftest import shared_file
from .test_preservation import _NOTES

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "portrait.mp4"


def _run(*args: object, weights: Path | None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The CLI on the CPU with the reference detector; without ``weights`` it looks in its cache."""
    extra = ["--device", "cpu", "--detector", "retinaface-mobile",
             "--detector-weights", str(shared_file("weights/retinaface_mobilenet0.25.pth"))]
    extra += ["--weights", str(weights)] if weights is not None else []
    return subprocess.run([sys.executable, "-m", "gpen_video.cli", *map(str, args), *extra],
                          capture_output=True, text=True, timeout=300, env=env)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _audio_only(path: Path) -> None:
    """An MP4 holding one second of AAC audio and no video."""
    with av.open(str(path), "w") as c:
        stream = c.add_stream("aac", rate=48000)
        stream.layout = "mono"
        samples = (np.sin(np.arange(48000) / 10) * 0.3).astype(np.float32)[None]
        for start in range(0, 48000, 1024):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples[:, start : start + 1024]), format="fltp",
                                               layout="mono")
            frame.sample_rate, frame.pts = 48000, start
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode(None):
            c.mux(packet)


def _cases(tmp: Path, small_gpen: Path) -> dict[str, tuple[list, str]]:
    (tmp / "empty.mp4").write_bytes(b"")
    (tmp / "notes.mp4").write_text("this is not a video\n")
    (tmp / "truncated.mp4").write_bytes(SAMPLE.read_bytes()[:60_000])
    (tmp / "adir").mkdir()
    link = tmp / "link.mp4"
    link.symlink_to(tmp / "copy.mp4")
    (tmp / "copy.mp4").write_bytes(SAMPLE.read_bytes())
    not_gpen = tmp / "not_gpen.pth"
    torch.save({"conv.weight": torch.zeros(3)}, not_gpen)
    cut = tmp / "cut.pth"
    cut.write_bytes(small_gpen.read_bytes()[:200_000])
    _audio_only(tmp / "speech.mp4")
    out = tmp / "out.mp4"
    return {
        "missing": ([tmp / "missing.mp4", out], "input not found"),
        "directory": ([tmp / "adir", out], "looks like a file, but with several inputs or a folder of them"),
        "zero bytes": ([tmp / "empty.mp4", out], "empty file"),
        "text file": ([tmp / "notes.mp4", out], "cannot read"),
        "truncated mp4": ([tmp / "truncated.mp4", out], "cannot read"),
        "audio only": ([tmp / "speech.mp4", out], "has no video stream"),
        "output is input": ([tmp / "copy.mp4", tmp / "copy.mp4", "--overwrite"], "OUTPUT is the input"),
        "output via link": ([tmp / "copy.mp4", link, "--overwrite"], "OUTPUT is the input"),
        "no output dir": ([SAMPLE, tmp / "nowhere" / "out.mp4"], "output directory does not exist"),
        "bad extension": ([SAMPLE, tmp / "out.avi"], "unsupported output extension"),
        "no such encoder": ([SAMPLE, out, "--codec", "h264_nvenc"], "h264_nvenc"),
        "not a gpen checkpoint": ([SAMPLE, out, "--weights", not_gpen], "not a GPEN checkpoint"),
        "truncated checkpoint": ([SAMPLE, out, "--weights", cut], "truncated or corrupt"),
        "missing gpu": ([SAMPLE, out, "--gpus", "7"], "GPU 7 does not exist"),
        "zero batch": ([SAMPLE, out, "--batch-size", "0"], "--batch-size must be a positive integer, got 0"),
        "strength above 1": ([SAMPLE, out, "--strength", "1.5"], "--strength must be in [0, 1], got 1.5"),
        "negative encoder threads": ([SAMPLE, out, "--encoder-threads", "-1"],
                                     "--encoder-threads must be at least 0, got -1"),
        "preset the codec lacks": ([SAMPLE, tmp / "out.mov", "--codec", "prores_ks", "--preset", "hq"],
                                   "prores_ks takes no --preset"),
        "crf the codec lacks": ([SAMPLE, tmp / "out.mkv", "--codec", "ffv1", "--crf", "0"], "ffv1 takes no --crf"),
        "crf beyond x264's": ([SAMPLE, out, "--crf", "99"], "--crf 99 is beyond libx264's range, 0 to 51"),
        "crf beyond x265's": ([SAMPLE, out, "--codec", "libx265", "--crf", "60"],
                              "--crf 60 is beyond libx265's range, 0 to 51"),
        "an option x264 lacks": ([SAMPLE, out, "--encoder-options", "tuen=film"],
                                 "--encoder-options: libx264 has no option 'tuen'; did you mean tune?"),
        "a tune x264 lacks": ([SAMPLE, out, "--encoder-options", "tune=film+flim"],
                              "--encoder-options tune=film+flim: libx264 has no tune 'flim' (its tunes: film,"),
        "a preset x264 lacks": ([SAMPLE, out, "--preset", "quick"], "--preset quick: libx264 has no preset 'quick'"),
        "a parameter x264 refuses": ([SAMPLE, out, "--encoder-options", "x264-params=ref=2:nonsense=1"],
                                     "--encoder-options: libx264 refused x264-params: Error parsing option "
                                     "'nonsense = 1'."),
        "a value x265 refuses": ([SAMPLE, out, "--codec", "libx265", "--encoder-options", "x265-params=keyint=abc"],
                                 "--encoder-options: libx265 refused x265-params: Invalid value for keyint: abc."),
        "a bit rate prores lacks": ([SAMPLE, tmp / "out.mov", "--codec", "prores_ks", "--bitrate", "20M"],
                                    "prores_ks takes no --bitrate"),
        "bit rate and crf": ([SAMPLE, out, "--bitrate", "2M", "--crf", "20"],
                             "--bitrate and --crf both set how good the video is; give one"),
        "no extension": ([SAMPLE, tmp / "out"], f"OUTPUT {tmp / 'out'} has no extension: name a file such as "
                                                 f"{tmp / 'out'}.mp4"),
        "a detector as --weights": ([SAMPLE, out, "--weights", shared_file("weights/retinaface_mobilenet0.25.pth")],
                                    "is not a GPEN checkpoint: it is the retinaface-mobile detector, which "
                                    "--detector retinaface-mobile --detector-weights takes"),
    }


CASE_NAMES = ["missing", "directory", "zero bytes", "text file", "truncated mp4", "audio only", "output is input",
              "output via link",
              "no output dir", "bad extension", "no such encoder", "not a gpen checkpoint", "truncated checkpoint",
              "missing gpu", "zero batch", "strength above 1", "negative encoder threads", "preset the codec lacks",
              "crf the codec lacks", "crf beyond x264's", "crf beyond x265's", "no extension", "an option x264 lacks",
              "a tune x264 lacks", "a preset x264 lacks",
              "a bit rate prores lacks", "bit rate and crf",
              "a detector as --weights"]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_input_fails_cleanly(case, small_gpen, tmp_path):
    args, message = _cases(tmp_path, small_gpen)[case]
    if case == "missing gpu" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a GPU 7")
    before = {p: _digest(p) for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()}
    run = _run(*args, weights=small_gpen) if "--weights" not in args else _run_with_weights(args)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpen-video: error: ") and message in lines[0], run.stderr
    after = {p: _digest(p) for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()}
    assert after == before  # no output, no temp file, inputs unchanged


@pytest.mark.parametrize("option", ["--detector-weights", "--parse-weights"])
def test_a_gpen_checkpoint_given_for_another_network_is_named_as_what_it_is(small_gpen, tmp_path, option):
    """One line naming the file's kind and the option that takes it, not the loader's half sentence."""
    args = [sys.executable, "-m", "gpen_video.cli", SAMPLE, tmp_path / "out.mp4", "--device", "cpu",
            "--weights", small_gpen, "--detector", "retinaface-mobile", "--mask", "parse",
            "--detector-weights", shared_file("weights/retinaface_mobilenet0.25.pth"), "--parse-weights", small_gpen,
            option, small_gpen]
    run = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=300)
    network = "retinaface-mobile" if option == "--detector-weights" else "ParseNet"
    assert run.returncode == 1
    assert run.stderr.strip() == (f"gpen-video: error: {small_gpen} does not fit {network}: it is a GPEN generator, "
                                  f"which --weights takes")
    assert list(tmp_path.iterdir()) == []


def test_encoder_settings_fail_before_the_weights_download(tmp_path):
    """A wrong option costs the user nothing: no 300 MB download (here, with no network, a
    download error would hide the real one)."""
    run = _run(SAMPLE, tmp_path / "out.mkv", "--codec", "ffv1", "--crf", "0", weights=None,
               env={**os.environ, "GPEN_VIDEO_HOME": str(tmp_path / "empty-cache")})
    assert run.returncode == 1
    assert run.stderr.strip() == "gpen-video: error: ffv1 takes no --crf; libx264, libx265, libvpx-vp9, libsvtav1 do"
    assert list(tmp_path.iterdir()) == []


def _run_with_weights(args: list) -> subprocess.CompletedProcess:
    """Cases that bring their own --weights (the last one given wins with argparse)."""
    i = args.index("--weights")
    return _run(*args[:i], *args[i + 2 :], weights=args[i + 1])


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupt_exits_130_and_leaves_nothing(sig, small_gpen, tmp_path):
    import signal
    import time

    out = tmp_path / "out.mp4"
    args = [sys.executable, "-m", "gpen_video.cli", SAMPLE, out, "--device", "cpu", "--weights", small_gpen,
            "--detector", "retinaface-mobile",
            "--detector-weights", shared_file("weights/retinaface_mobilenet0.25.pth")]
    proc = subprocess.Popen(list(map(str, args)), stderr=subprocess.PIPE, text=True)
    seen = ""
    # Until frames have come out of every stage (the bar's count is past 0); a Ctrl-C while the
    # stages start is the test of that name in test_pipeline_threads.
    while not re.search(r"restoring: [1-9]\d*/100 frames", seen):
        seen += proc.stderr.read(1)
        assert proc.poll() is None, seen
    proc.send_signal(getattr(signal, sig))
    start = time.perf_counter()
    proc.wait(timeout=30)
    assert time.perf_counter() - start < 10
    assert proc.returncode == 130
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_in_a_batch_stops_the_files_under_way_and_leaves_none_of_them(small_gpen, tmp_path):
    """Two files restore at once (``--jobs 2``) when Ctrl-C comes: both stop, neither leaves a
    partial file or a lock, the files not started are never begun, and the exit is 130."""
    import shutil
    import signal
    import time

    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    for name in ("a.mp4", "b.mp4", "c.mp4"):
        shutil.copy(SAMPLE, folder / name)
    args = [sys.executable, "-m", "gpen_video.cli", folder, out, "--jobs", "2", "--device", "cpu", "--weights",
            small_gpen, "--detector", "retinaface-mobile",
            "--detector-weights", shared_file("weights/retinaface_mobilenet0.25.pth")]
    proc = subprocess.Popen(list(map(str, args)), stderr=subprocess.PIPE, text=True)
    seen = ""
    while not re.search(r"restoring 3 files: [1-9]\d*/300 frames", seen):  # frames have come out of the first jobs
        seen += proc.stderr.read(1)
        assert proc.poll() is None, seen
    proc.send_signal(signal.SIGINT)
    start = time.perf_counter()
    rest = proc.communicate(timeout=60)[1]
    assert time.perf_counter() - start < 20
    assert proc.returncode == 130, seen + rest
    assert "gpen-video: interrupted; the files finished before it are kept, those under way are not" in rest
    assert [p.name for p in out.iterdir()] == []  # 100 frames each: none was finished
    assert sorted(p.name for p in folder.iterdir()) == ["a.mp4", "b.mp4", "c.mp4"]


def test_a_full_disk_is_a_clean_error_and_leaves_no_partial_file(small_gpen, tmp_path):
    import resource

    def small_disk() -> None:  # files may not grow past 300 kB: the output will hit that
        resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))

    out = tmp_path / "out.mkv"
    args = [sys.executable, "-m", "gpen_video.cli", SAMPLE, out, "--codec", "ffv1", "--device", "cpu",
            "--weights", small_gpen, "--detector", "retinaface-mobile",
            "--detector-weights", shared_file("weights/retinaface_mobilenet0.25.pth"), "--quiet"]
    run = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=300, preexec_fn=small_disk)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpen-video: error: ") and "File too large" in lines[0], run.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_output_directory_is_refused(small_gpen, tmp_path):
    if os.geteuid() == 0:  # root writes through permission bits; /proc takes no new files from anyone
        locked = Path("/proc")
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
    run = _run(SAMPLE, locked / "out.mp4", weights=small_gpen)
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip() == f"gpen-video: error: output directory is not writable: {locked}"
    assert not list(locked.glob("*out*.mp4"))  # no output, no temporary file


def test_damaged_input_keeps_every_frame_and_reports_the_damage(small_gpen, tmp_path):
    """Two stretches of garbage in the middle of the sample's video data: the job finishes, each
    lost frame is stood in for at its own time, and the summary counts the damaged frames."""
    data = bytearray(SAMPLE.read_bytes())
    noise = np.random.default_rng(0).integers(0, 256, 2000, dtype=np.uint8).tobytes()
    for at in (0.35, 0.6):  # inside the media data; the index at the end stays intact
        start = int(len(data) * at)
        data[start : start + len(noise)] = noise
    damaged, out = tmp_path / "damaged.mp4", tmp_path / "out.mp4"
    damaged.write_bytes(bytes(data))
    run = _run(damaged, out, weights=small_gpen)
    assert run.returncode == 0, run.stderr
    assert "frame(s) of the input were damaged" in run.stderr
    with av.open(str(damaged)) as c:
        packet_times = sorted(p.pts for p in c.demux(video=0) if p.pts is not None)
    with av.open(str(out)) as c:
        frame_times = [f.pts for f in c.decode(video=0)]
    assert len(frame_times) == len(packet_times) == 100
    assert frame_times == packet_times
    assert damaged.read_bytes() == bytes(data)  # the input is untouched


def _frame_count(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


@pytest.mark.parametrize("kind", ["mp4 index at the front", "mkv"])
def test_a_cut_file_is_refused_unless_allowed_and_then_every_whole_frame_is_restored(kind, small_gpen, tmp_path):
    """Cut at half its bytes, as a copy or download that stopped. An MP4 whose index comes first
    says how much is missing before any work; a Matroska file shows it once decoding ends."""
    video = shared_file("media/videos/multi_face_event_video_01.mp4")  # 90 frames, 3.04 s
    if kind == "mkv":
        whole = tmp_path / "whole.mkv"
        with av.open(str(video)) as src, av.open(str(whole), "w") as out:
            pairs = {s.index: out.add_stream_from_template(s) for s in src.streams}
            for packet in src.demux():
                if packet.dts is not None:
                    packet.stream = pairs[packet.stream.index]
                    out.mux(packet)
    else:
        whole = corpus.faststart_copy(tmp_path / "whole.mp4", video)
    src = corpus.cut(tmp_path / f"cut{whole.suffix}", whole, 0.5)
    before = _digest(src)
    out = tmp_path / "out.mkv"
    run = _run(src, out, "--codec", "ffv1", weights=small_gpen)
    assert run.returncode == 1
    lines = [line for line in run.stderr.splitlines()  # past the progress lines and the CPU note
             if line.startswith("gpen-video:") and not line.startswith(_NOTES)]
    # The camera wrote a SMPTE timecode on each frame (H.264 picture timing), which FFV1 cannot carry:
    # named where the output is begun before the cut is found (Matroska keeps no index to tell it).
    timecode = "gpen-video: the SMPTE timecode on the input's frames is left out: ffv1 cannot write it (hevc_nvenc can)"
    assert lines[:-1] == ([timecode] if kind == "mkv" else []), run.stderr
    assert lines[-1].startswith(f"gpen-video: error: {src} is truncated: "), run.stderr
    assert lines[-1].endswith("; pass --allow-truncated to restore what is there")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([whole.name, src.name])
    allowed = _run(src, out, "--codec", "ffv1", "--allow-truncated", weights=small_gpen)
    assert allowed.returncode == 0, allowed.stderr
    assert f"{src} is truncated" in allowed.stderr
    # Every frame that decodes on its own (libavcodec, one thread, the cut packet left out) is there.
    with av.open(str(src)) as container:
        stream = container.streams.video[0]
        decodable = 0
        for packet in container.demux(stream):
            if packet.is_corrupt:
                continue
            try:
                decodable += len(packet.decode())
            except av.InvalidDataError:
                pass
    assert 20 < decodable < 90
    assert _frame_count(out) == decodable
    assert _digest(src) == before


def test_a_stream_that_changes_size_is_refused_at_the_change(small_gpen, tmp_path):
    src = corpus.size_change_ts(tmp_path / "broadcast.ts")
    run = _run(src, tmp_path / "out.mp4", weights=small_gpen)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        f"gpen-video: error: {src}: the video changes size from 320x240 to 480x360 at 0.400 s (frame 10); "
        "cut it into parts of one size first")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broadcast.ts"]


def test_a_second_job_on_the_same_output_is_refused_at_once(small_gpen, tmp_path):
    """One OUTPUT, one job: the second is refused while the first runs; with --overwrite both
    finish and the last to finish wins."""
    out = tmp_path / "out.mp4"
    first = subprocess.Popen([sys.executable, "-m", "gpen_video.cli", str(SAMPLE), str(out), "--device", "cpu",
                              "--weights", str(small_gpen), "--detector", "retinaface-mobile", "--detector-weights",
                              str(shared_file("weights/retinaface_mobilenet0.25.pth"))],
                             stderr=subprocess.PIPE, text=True)
    seen = ""
    while not re.search(r"restoring: [1-9]\d*/100 frames", seen):  # the first job is writing
        seen += first.stderr.read(1)
        assert first.poll() is None, seen
    second = _run(SAMPLE, out, weights=small_gpen)
    assert second.returncode == 1
    assert second.stderr.strip() == (f"gpen-video: error: another gpen-video job is writing {out}; wait for it, "
                                     f"or pass --overwrite to let the last job to finish win")
    first.stderr.read()
    assert first.wait(timeout=300) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mp4"]  # no lock or partial file left behind
    assert _run(SAMPLE, out, weights=small_gpen).returncode == 1  # it exists now
    racing = [subprocess.Popen([sys.executable, "-m", "gpen_video.cli", str(SAMPLE), str(out), "--overwrite",
                                "--device", "cpu", "--weights", str(small_gpen), "--detector", "retinaface-mobile",
                                "--detector-weights", str(shared_file("weights/retinaface_mobilenet0.25.pth")),
                                "--quiet"], stderr=subprocess.PIPE, text=True) for _ in range(2)]
    assert [p.wait(timeout=300) for p in racing] == [0, 0]
    assert _frame_count(out) == 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mp4"]


def test_ctrl_c_half_a_second_in_is_one_line_and_exit_130(small_gpen, tmp_path):
    """At 0.5 s the command is still importing torch: the interrupt must still be one line. (It
    waits, past 0.5 s if need be, until torch's library is loading, so a slow start of the
    interpreter itself, before any of our code runs, cannot make it flaky.)"""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "gpen_video.cli", str(SAMPLE), str(tmp_path / "out.mp4"),
                             "--device", "cpu", "--weights", str(small_gpen)], stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    maps = Path(f"/proc/{proc.pid}/maps")
    while proc.poll() is None and "libtorch" not in maps.read_text():
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.strip() == "gpen-video: interrupted; nothing was written"
    assert list(tmp_path.iterdir()) == []
