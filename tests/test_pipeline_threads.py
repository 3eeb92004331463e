"""Pipeline mechanics: several workers, failures in a stage, and memory that stays flat."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from gpen_video.api import restore_video
from gpen_video.faces.detect import box_size
from gpen_video.media.colour import frame_planes, packed_to_frame, unpack_planes
from gpen_video.media.demux import read_frames
from gpen_video.model.weights import load_gpen_weights
from gpen_video.options import RestoreOptions
from gpen_video.pipeline.batching import frames_in_flight, frames_per_batch, restore_cut
from gpen_video.worker import device as device_module
from gpen_video.worker import restorer as restorer_module
from gpen_video.worker.device import DeviceWorker

from .conftest import SMALL_GPEN_SIZE, assert_same_restoration, shared_file, write_clip

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "portrait.mp4"


def _options(weights: Path) -> dict:
    return {"device": "cpu", "weights": weights, "detector": "retinaface-mobile",
            "detector_weights": shared_file("weights/retinaface_mobilenet0.25.pth"), "progress": False}


def _worker(weights: Path, device: str) -> DeviceWorker:
    """A device worker with the GPEN ``weights`` and the reference RetinaFace-mobile."""
    state_dict, _ = load_gpen_weights(weights=weights)
    options = RestoreOptions(precision="fp32", compile="off", detector="retinaface-mobile",
                             detector_weights=shared_file("weights/retinaface_mobilenet0.25.pth"))
    worker = DeviceWorker(options, device)
    worker.load_restorer(state_dict)
    return worker


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="yuv420p") for f in c.decode(video=0)]


def test_two_workers_give_the_same_frames_in_the_same_order(small_gpen, tmp_path):
    """Two workers run the batches side by side, in two threads that share the CPU's cores: the
    frames come out in order, with the same faces (see :func:`assert_same_restoration` for why
    restored samples may round a level apart)."""
    one, two = tmp_path / "one.mkv", tmp_path / "two.mkv"
    restore_video(SAMPLE, one, codec="ffv1", batch_size=4, tracks_out=tmp_path / "one.json", **_options(small_gpen))
    summary = restore_video(SAMPLE, two, codec="ffv1", batch_size=4, workers_per_device=2,
                            tracks_out=tmp_path / "two.json", **_options(small_gpen))
    assert summary.faces == 100
    assert any(k.startswith("restore") for k in summary.busy)
    assert_same_restoration(one, tmp_path / "one.json", two, tmp_path / "two.json", crop_size=SMALL_GPEN_SIZE)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])])
def test_frames_kept_on_the_device_since_detection_restore_as_a_fresh_upload_does(small_gpen, device):
    """On a GPU the kept planes were uploaded in the detection stream and are read in the restoration one."""
    worker = _worker(small_gpen, device)
    kept, fresh = list(read_frames(SAMPLE, limit=3)), list(read_frames(SAMPLE, limit=3))
    found, _ = worker.detect(kept)
    assert all(f.buffers.state == "kept" for f in kept)
    faces = [[(face.landmarks, box_size(face.box)) for face in fs] for fs in found]
    assert sum(map(len, faces)) == 3
    a, b = worker.restore(kept, faces), worker.restore(fresh, faces)
    assert all(f.buffers.state == "released" and f.buffers.device is None for f in kept)  # let go once restored
    assert [r.faces for r in a] == [1, 1, 1]
    assert all(np.array_equal(x, y)
               for ra, rb in zip(a, b) for x, y in zip(frame_planes(ra.frame), frame_planes(rb.frame)))
    assert not any(all(np.array_equal(x, y) for x, y in zip(frame_planes(r.frame), frame_planes(f.frame)))
                   for r, f in zip(a, kept))  # every frame's face changed


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_queuing_a_restoration_never_waits_for_the_gpu(small_gpen):
    """Restorations are queued while earlier work runs; a host wait inside would leave the GPU
    idle while the host prepares the next batch. Seven faces per frame (some small, for the
    small-face blur) make the paste-back run several chunks."""
    worker = _worker(small_gpen, "cuda")
    frames = list(read_frames(SAMPLE, limit=3))
    found, _ = worker.detect(frames)
    faces = [[(face.landmarks + shift, size) for face in fs for shift, size in zip(range(0, 70, 10), [50, 300] * 4)]
             for fs in found]
    torch.cuda.set_sync_debug_mode("error")  # any host wait for the device raises
    try:
        pending = worker.queue_restore(frames, faces)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert [r.faces for r in pending.result()] == [7, 7, 7]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_queuing_a_detection_never_waits_for_the_gpu(small_gpen):
    """Detections are queued while restorations run; a host wait inside (for the count of boxes
    over the threshold, say) would stall the worker until the GPU had run all that came before."""
    worker = _worker(small_gpen, "cuda")
    expected, expected_thumbnails = worker.detect(list(read_frames(SAMPLE, limit=3)))  # cuDNN picks its kernels
    frames = list(read_frames(SAMPLE, limit=3))
    torch.cuda.set_sync_debug_mode("error")  # any host wait for the device raises
    try:
        pending = worker.queue_detect(frames)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    found, thumbnails = pending.result()
    assert [len(fs) for fs in found] == [len(fs) for fs in expected] and all(found)
    for faces, reference in zip(found, expected):
        np.testing.assert_array_equal([f.box for f in faces], [f.box for f in reference])
    np.testing.assert_array_equal(thumbnails, expected_thumbnails)
    assert all(f.buffers.device == torch.device("cuda", 0) for f in frames)  # kept for their restoration


@pytest.mark.parametrize("pix_fmt", ["yuv420p", "yuv422p10le", "yuv444p"])
def test_staged_planes_unpack_to_the_decoded_planes(pix_fmt):
    """The decoder packs a frame's planes into one buffer for the upload; unpacked they are the
    decoded samples, whatever the subsampling and depth (odd sizes pad FFmpeg's lines)."""
    rng = np.random.default_rng(0)
    frames = []
    for _ in range(2):
        frame = av.VideoFrame(37, 22, pix_fmt)
        for plane in frame.planes:
            plane.update(rng.integers(0, 256, plane.buffer_size, dtype=np.uint8).tobytes())
        frames.append(frame)
    batch = torch.stack([device_module.stage_planes(f, pinned=False) for f in frames])
    for i, frame in enumerate(frames):
        unpacked = [p[i].numpy() for p in unpack_planes(batch, frame)]
        assert [u.shape for u in unpacked] == [p.shape for p in frame_planes(frame)]
        assert all(np.array_equal(u, p) for u, p in zip(unpacked, frame_planes(frame)))


@pytest.mark.parametrize(("width", "pix_fmt", "in_place"), [(1920, "yuv420p", True), (1922, "yuv420p", False),
                                                            (1920, "yuv422p10le", False)])
def test_a_packed_restored_frame_becomes_an_encoder_frame_with_the_same_samples(width, pix_fmt, in_place):
    """Restored frames come back packed; 1080p 8-bit 4:2:0 is handed to the encoder as that very
    buffer, other layouts as a copy. Either way the encoder sees the samples and the colour tags."""
    rng = np.random.default_rng(1)
    source = av.VideoFrame(width, 1080, pix_fmt)
    for plane in source.planes:
        plane.update(rng.integers(0, 256, plane.buffer_size, dtype=np.uint8).tobytes())
    source.colorspace, source.color_range = 1, 2
    packed = device_module.stage_planes(source, pinned=False).numpy()
    frame = packed_to_frame(packed, source)
    assert (frame.format.name, frame.width, frame.height) == (pix_fmt, width, 1080)
    assert (frame.colorspace, frame.color_range) == (1, 2)
    assert all(np.array_equal(a, b) for a, b in zip(frame_planes(frame), frame_planes(source)))
    assert np.shares_memory(frame_planes(frame)[2], packed) == in_place


def test_restoration_batches_are_cut_where_the_last_gpen_batch_is_fullest():
    assert restore_cut([1] * 16, 16) == 16  # one face a frame: 16 faces fill one GPEN batch
    crowd = [5, 6, 5, 5, 4, 6, 5, 5, 6, 5, 5, 5, 2, 5, 5, 5]  # all 16 frames: 79 faces, 1 place left empty
    cut = restore_cut(crowd, 16)
    assert cut == 13 and sum(crowd[:cut]) == 64
    assert restore_cut([6] * 16, 16) == 16  # 48 faces after 8 frames fit too: the later cut wins
    assert restore_cut([16] + [1] * 15, 16) == 16  # a perfect fit after one frame is too small a batch


def test_larger_frames_travel_in_smaller_batches_so_memory_is_bounded_in_bytes():
    """Frames per batch, and so the frames in flight, fall with the frame size: at 4K a quarter of
    1080p's, and the bytes in flight stay within 1.5x of 1080p's (the tracker's look-ahead is
    counted in frames whatever their size)."""
    hd, uhd = 1920 * 1080, 3840 * 2160
    assert [frames_per_batch(16, p) for p in (640 * 480, hd, 2560 * 1440, uhd, 7680 * 4320)] == [16, 16, 9, 4, 1]
    lookahead = 8  # smoothing sigma 1
    hd_bytes = frames_in_flight(1, frames_per_batch(16, hd), lookahead) * hd
    uhd_bytes = frames_in_flight(1, frames_per_batch(16, uhd), lookahead) * uhd
    assert uhd_bytes <= 1.5 * hd_bytes


def test_a_failing_worker_stops_everything_with_its_own_error(small_gpen, tmp_path, monkeypatch):
    calls = []

    def broken(self, images, faces, clip=0, paste=None):
        calls.append(len(images))
        raise RuntimeError("injected GPU fault")

    monkeypatch.setattr(device_module.DeviceWorker, "queue_restore", broken)
    out = tmp_path / "out.mp4"
    before = set(threading.enumerate())
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="injected GPU fault"):
        restore_video(SAMPLE, out, batch_size=4, **_options(small_gpen))
    assert time.perf_counter() - start < 60
    assert calls
    assert not out.exists() and list(tmp_path.iterdir()) == []
    stages = {"decode", "track", "encode"}
    assert not [t for t in set(threading.enumerate()) - before if t.name in stages or t.name.startswith("worker-")]


# A Ctrl-C (KeyboardInterrupt in the main thread) landing while the pipeline starts its stage
# threads: just before the encoder's OS thread exists, or just after.
_INTERRUPTED_START = textwrap.dedent("""
    import sys, threading
    from gpen_video.api import restore_video
    start = threading.Thread.start
    def start_then_interrupt(thread):
        if thread.name == "encode":
            if sys.argv[5] == "after":
                start(thread)
            raise KeyboardInterrupt
        start(thread)
    threading.Thread.start = start_then_interrupt
    try:
        restore_video(sys.argv[1], sys.argv[2], device="cpu", weights=sys.argv[3], detector="retinaface-mobile",
                      detector_weights=sys.argv[4], progress=False)
    except KeyboardInterrupt:
        print("interrupted")
""")


@pytest.mark.parametrize("when", ["before", "after"])
def test_ctrl_c_while_the_stages_start_stops_at_once_and_leaves_nothing(small_gpen, tmp_path, when):
    out = tmp_path / "out.mp4"
    args = [SAMPLE, out, small_gpen, shared_file("weights/retinaface_mobilenet0.25.pth"), when]
    run = subprocess.run([sys.executable, "-c", _INTERRUPTED_START, *map(str, args)], capture_output=True,
                         text=True, timeout=90)  # a stage counted but never started would hang it
    assert run.stdout.strip() == "interrupted", run.stderr
    assert list(tmp_path.iterdir()) == []


def _looped_clip(path: Path, loops: int) -> None:
    """The sample clip played ``loops`` times (re-encoded, audio dropped), as one longer video."""
    with av.open(str(SAMPLE)) as src:
        frames = [f.to_ndarray(format="rgb24") for f in src.decode(video=0)]
    write_clip(path, frames * loops, options={"crf": "23"})


# Peak RSS from VmHWM: getrusage's ru_maxrss survives exec, so a child would report at least
# the pytest process's own peak, whatever the run used.
_PEAK_RSS = textwrap.dedent("""
    import re, sys
    from pathlib import Path
    from gpen_video.api import restore_video
    restore_video(sys.argv[1], sys.argv[2], device="cpu", weights=sys.argv[3], detector="retinaface-mobile",
                  detector_weights=sys.argv[4], progress=False, preset="ultrafast", batch_size=8)
    print(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
""")


def test_peak_memory_does_not_grow_with_video_length(small_gpen, tmp_path):
    """Growth is in what the pipeline holds, not in where the allocator puts it. With glibc's
    defaults, a freed frame may stay in its malloc arena, and which arenas hold frames at the peak
    follows the threads' timing: one run's peak differed from the next by up to 15 %, same code,
    same clip, so a CI run once read 11 % of growth that was not there. A fixed mmap threshold
    gives every buffer of 128 KiB or more (every frame) pages of its own, returned when it is
    freed, so the peak counts the frames that are alive: three runs of each length spread by under
    1 % (1215-1217 MB for the short clip, 1219-1228 MB for one four times as long, on a
    developer's machine). Holding every frame of the three-times clip would add about 180 MB."""
    peaks = {}
    for loops in (1, 3):
        clip = tmp_path / f"loop{loops}.mp4"
        _looped_clip(clip, loops)
        run = subprocess.run([sys.executable, "-c", _PEAK_RSS, clip, tmp_path / f"out{loops}.mp4", small_gpen,
                              shared_file("weights/retinaface_mobilenet0.25.pth")],
                             capture_output=True, text=True, check=True, timeout=900,
                             env={**os.environ, "MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072"})
        peaks[loops] = int(run.stdout.split()[-1])
    assert peaks[3] < 1.1 * peaks[1], peaks


def test_out_of_memory_halves_the_batch_and_loses_no_face(small_gpen, tmp_path, monkeypatch):
    """After the halving (GPEN batch 8, then 2) no face or frame is lost or repeated: the same
    faces are restored at the same timestamps, every sample outside their paste regions is the
    reference's, and inside them within one level: four batches of 2 need not sum in the order
    one batch of 8 does (see :func:`assert_same_restoration`)."""
    reference = tmp_path / "reference.mkv"
    restore_video(SAMPLE, reference, codec="ffv1", batch_size=8, tracks_out=tmp_path / "reference.json",
                  **_options(small_gpen))

    real_gpen = restorer_module.FaceRestorer._gpen

    def tight_memory(self, crops):
        model = self.model

        def limited(x):
            if len(x) > 2:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
            return model(x)

        self.model = limited
        try:
            return real_gpen(self, crops)
        finally:
            self.model = model

    monkeypatch.setattr(restorer_module.FaceRestorer, "_gpen", tight_memory)
    out = tmp_path / "out.mkv"
    summary = restore_video(SAMPLE, out, codec="ffv1", batch_size=8, tracks_out=tmp_path / "out.json",
                            **_options(small_gpen))
    assert summary.faces == 100
    assert summary.warnings == ["cpu: out of memory 2 time(s), GPEN batch lowered to 2"]
    assert_same_restoration(reference, tmp_path / "reference.json", out, tmp_path / "out.json",
                            crop_size=SMALL_GPEN_SIZE)


def _gpu_options(weights: Path) -> dict:
    """The long-job GPU path: compiled (``--compile auto`` would run these short clips eager)."""
    return {**{k: v for k, v in _options(weights).items() if k != "device"}, "compile": "on"}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_pipeline_restores_every_face_and_only_faces(small_gpen, tmp_path):
    """The default GPU path (fp16, compiled GPEN, YUV converted on the device) end to end."""
    out = tmp_path / "out.mkv"
    summary = restore_video(SAMPLE, out, codec="ffv1", gpus=[0], **_gpu_options(small_gpen))
    assert summary.faces == 100 and summary.frames == 100
    source, restored = _frames(SAMPLE), _frames(out)
    changed = [np.abs(a.astype(int) - b).max() for a, b in zip(source, restored, strict=True)]
    assert min(changed) > 0  # every frame has a face, and it was restored
    # Luma rows 400-479 lie below every face's paste footprint (it ends at row 360 on the CPU).
    assert all(np.array_equal(a[400:480], b[400:480]) for a, b in zip(source, restored))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_compile_auto_follows_what_this_gpu_measured(small_gpen, tmp_path, monkeypatch):
    """Each GPU run keeps GPEN's speed on this GPU, eager and compiled, and the compile's time; the
    next ``--compile auto`` decides from them: a compile measured slower is never chosen, and one
    measured faster is chosen as soon as its saving pays for its cost."""
    from gpen_video.pipeline.engine import Engine
    from gpen_video.worker import speeds

    monkeypatch.setenv("GPEN_VIDEO_HOME", str(tmp_path / "home"))
    options = {**_gpu_options(small_gpen), "codec": "ffv1", "batch_size": 4, "gpus": [0]}
    for setting in ("off", "on"):
        restore_video(SAMPLE, tmp_path / f"{setting}.mkv", **{**options, "compile": setting})
    auto = RestoreOptions(**{**{k: v for k, v in options.items() if k != "progress"}, "compile": "auto"})
    key = speeds.setup_key(auto, "cuda:0")
    figures = speeds.measured(key)
    assert figures.eager > 0 and figures.compiled > 0 and (figures.compile_warm or figures.compile_cold) > 0
    workers = Engine(auto, progress=False).workers
    speeds.record(key, eager=2e-3, compiled=1e-3, compile_warm=0.05, compile_cold=0.05)
    assert [workers.compiles(n) for n in (49, 50, None)] == [False, True, True]
    speeds.record(key, compiled=3e-3)
    assert not any(workers.compiles(n) for n in (50, 10**7, None))


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_gpus_give_the_frames_of_one_gpu(small_gpen, tmp_path):
    """In fp32 the split across GPUs changes nothing but the batches: the same frames, in the same
    order, with the same faces. The restoration batches are cut where the frames change device,
    so GPEN sees other batches than on one GPU (see :func:`assert_same_restoration`)."""
    one, two = tmp_path / "one.mkv", tmp_path / "two.mkv"
    options = {**_gpu_options(small_gpen), "precision": "fp32", "codec": "ffv1", "batch_size": 4}
    restore_video(SAMPLE, one, gpus=[0], tracks_out=tmp_path / "one.json", **options)
    summary = restore_video(SAMPLE, two, gpus=[0, 1], tracks_out=tmp_path / "two.json", **options)
    assert {"restore[cuda:0]", "restore[cuda:1]"} <= set(summary.busy)  # both GPUs restored faces
    assert_same_restoration(one, tmp_path / "one.json", two, tmp_path / "two.json", crop_size=SMALL_GPEN_SIZE)
