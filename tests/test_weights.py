"""Checkpoints: registry, config inference, strict validation, and downloads over real HTTP on 127.0.0.1."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gpen_video.model.choices import OFFICIAL_MODELS, OfficialModel
from gpen_video.model.config import GPENConfig
from gpen_video.model.downloads import LICENCE_NOTICE, download, fetch, official_file
from gpen_video.model.weights import (
    WeightsError,
    check_layout,
    infer_config,
    load_gpen_weights,
    read_state_dict,
)


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``files`` by path; ``/short/<name>`` declares the full length but sends half and hangs up."""

    files: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        short = self.path.startswith("/short/")
        body = self.files.get(self.path.removeprefix("/short"))
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if short else body)
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server(golden, tmp_path) -> Iterator[str]:
    ckpt = tmp_path / "ckpt.pth"
    torch.save(golden["state_dict"], ckpt)
    _Handler.files = {"/GPEN-small.pth": ckpt.read_bytes()}
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    thread.join()


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "cache"
    monkeypatch.setenv("GPEN_VIDEO_HOME", str(home))
    return home


def _small_model(url: str) -> OfficialModel:
    return OfficialModel("GPEN-small", GPENConfig(64, 1, 0.125), url, "GPEN-small.pth", 0)


def _meta_state_dict(layout: dict) -> dict[str, torch.Tensor]:
    return {e["key"]: torch.empty(e["shape"], device="meta") for e in layout["state_dict"]}


@pytest.mark.parametrize("name", list(OFFICIAL_MODELS))
def test_infers_every_official_config_from_shapes(name, official_layouts):
    sd = _meta_state_dict(official_layouts[name])
    assert infer_config(sd) == OFFICIAL_MODELS[name].config
    check_layout(sd, OFFICIAL_MODELS[name].config)


def test_official_registry_points_at_the_official_files():
    assert OFFICIAL_MODELS["GPEN-BFR-512"].url.endswith("/robin/models/GPEN-BFR-512.pth")
    assert OFFICIAL_MODELS["GPEN-BFR-256"].url.endswith("/robin/models/GPEN-BFR-256.pth")
    assert "cv_gpen_image-portrait-enhancement-hires" in OFFICIAL_MODELS["GPEN-BFR-2048"].url


def test_layout_error_names_the_first_mismatch(official_layouts):
    sd = _meta_state_dict(official_layouts["GPEN-BFR-512"])
    sd["generator.convs.3.conv.weight"] = torch.empty(1, 2, 3, device="meta")
    with pytest.raises(WeightsError, match=r"generator\.convs\.3\.conv\.weight.*\[1, 2, 3\]"):
        check_layout(sd, OFFICIAL_MODELS["GPEN-BFR-512"].config)
    del sd["generator.convs.3.conv.weight"]
    with pytest.raises(WeightsError, match=r"missing key 'generator\.convs\.3\.conv\.weight'"):
        check_layout(sd, OFFICIAL_MODELS["GPEN-BFR-512"].config)


@pytest.mark.parametrize("wrap", ["bare", "g_ema", "params", "module."])
def test_loads_wrapped_checkpoints(golden, tmp_path, wrap):
    sd = golden["state_dict"]
    obj = {"bare": sd, "g_ema": {"g_ema": sd, "step": torch.tensor(3)}, "params": {"params": sd},
           "module.": {f"module.{k}": v for k, v in sd.items()}}[wrap]
    path = tmp_path / "w.pth"
    torch.save(obj, path)
    loaded, config = load_gpen_weights(weights=path)
    assert config == GPENConfig(64, 1, 0.125)
    assert list(loaded) == list(sd)
    assert all(torch.equal(loaded[k], sd[k]) for k in sd)


def test_rejects_files_that_are_not_gpen_checkpoints(golden, tmp_path):
    text = tmp_path / "notes.pth"
    text.write_text("not a checkpoint")
    with pytest.raises(WeightsError, match="not a readable PyTorch checkpoint"):
        read_state_dict(text)

    other = tmp_path / "other.pth"
    torch.save({"conv.weight": torch.zeros(3, 3)}, other)
    with pytest.raises(WeightsError, match="not a GPEN checkpoint"):
        load_gpen_weights(weights=other)

    truncated = tmp_path / "truncated.pth"
    torch.save(golden["state_dict"], truncated)
    truncated.write_bytes(truncated.read_bytes()[:100_000])
    with pytest.raises(WeightsError, match="truncated or corrupt"):
        load_gpen_weights(weights=truncated)

    with pytest.raises(WeightsError, match="weights file not found"):
        load_gpen_weights(weights=tmp_path / "missing.pth")


def test_downloads_into_the_cache_once(server, cache, caplog):
    model = _small_model(f"{server}/GPEN-small.pth")
    path = fetch(official_file(model), progress=False)
    assert path == cache / "GPEN-small.pth"
    assert infer_config(read_state_dict(path)) == model.config
    assert [p.name for p in cache.iterdir()] == ["GPEN-small.pth"]
    _Handler.files = {}  # a second call must not touch the network
    assert fetch(official_file(model), progress=False) == path
    # The official weights' terms are said once, as they download, not on every later start.
    notices = [r.getMessage() for r in caplog.records if "non-commercial" in r.getMessage()]
    assert notices == [LICENCE_NOTICE.format(name=model.name)]


def test_truncated_transfer_leaves_nothing_in_the_cache(server, cache):
    with pytest.raises(WeightsError, match="cut short|cannot download"):
        download(f"{server}/short/GPEN-small.pth", cache / "GPEN-small.pth", progress=False)
    assert list(cache.iterdir()) == []


def test_offline_error_says_what_to_download_and_where(cache):
    model = _small_model("http://127.0.0.1:9/GPEN-small.pth")  # the discard port: nothing listens
    with pytest.raises(WeightsError) as info:
        fetch(official_file(model), progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert "http://127.0.0.1:9/GPEN-small.pth" in message
    assert str(cache / "GPEN-small.pth") in message
    assert not (cache / "GPEN-small.pth").exists()


def test_unknown_model_name_lists_the_choices():
    with pytest.raises(WeightsError, match="GPEN-BFR-512"):
        load_gpen_weights("GPEN-BFR-999")


def _cli(*args: object, home: Path, mirror: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPEN_VIDEO_HOME": str(home), "GPEN_VIDEO_WEIGHTS_URL": mirror}
    return subprocess.run([sys.executable, "-m", "gpen_video", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120)


def test_fetch_weights_readies_a_machine_from_a_studio_mirror(server, tmp_path):
    """``--fetch-weights`` downloads every file a run with those options needs from
    ``GPEN_VIDEO_WEIGHTS_URL``, says where each went (the licence before GPEN's), and needs no
    network the second time."""
    files = {"/GPEN-BFR-512.pth": b"g" * 1000, "/detection_mobilenet0.25_Final.pth": b"d" * 100,
             "/parsing_parsenet.pth": b"p" * 10}
    _Handler.files = dict(files)
    home = tmp_path / "home"
    run = _cli("--fetch-weights", "--detector", "retinaface-mobile", "--mask", "parse", home=home, mirror=server)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [f"retinaface-mobile: {home / 'detection_mobilenet0.25_Final.pth'}",
                                       f"GPEN-BFR-512: {home / 'GPEN-BFR-512.pth'}",
                                       f"face parser: {home / 'parsing_parsenet.pth'}"]
    assert "non-commercial" in run.stderr
    assert {f"/{p.name}": p.read_bytes() for p in home.iterdir()} == files
    _Handler.files = {}
    again = _cli("--fetch-weights", "--detector", "retinaface-mobile", "--mask", "parse", home=home, mirror=server)
    assert again.returncode == 0 and again.stderr == "" and again.stdout == run.stdout


def test_an_offline_run_names_every_missing_file_at_once(tmp_path):
    """Not one file per attempt: the detector, GPEN and the face parser in one line, each with its
    URL, the path to save it as and the option that takes a file instead; nothing written."""
    home, mirror = tmp_path / "home", "http://127.0.0.1:9/weights"  # the discard port: nothing listens
    run = _cli(Path(__file__).resolve().parents[1] / "samples" / "portrait.mp4", tmp_path / "out.mp4", "--device",
               "cpu", "--mask", "parse", home=home, mirror=mirror)
    assert run.returncode == 1
    line, = run.stderr.strip().splitlines()[-1:]
    assert line.startswith("gpen-video: error: 3 weight file(s) are not in the cache and could not be downloaded")
    for name, flag in (("detection_Resnet50_Final.pth", "--detector-weights"), ("GPEN-BFR-512.pth", "--weights"),
                       ("parsing_parsenet.pth", "--parse-weights")):
        assert f"{mirror}/{name} saved as {home / name} (or {flag} PATH)" in line
    assert not (tmp_path / "out.mp4").exists() and not [p for p in home.rglob("*") if p.is_file()]
