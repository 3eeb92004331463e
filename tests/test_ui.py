"""The editor's desk's HTTP API, served by a real uvicorn on this machine and asked over real
sockets: the library of a folder of real videos and photos, thumbnails, paths that try to leave
the folders, and the token a desk bound beyond the loopback address asks for."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

uvicorn = pytest.importorskip("uvicorn", reason="the desk is an extra: pip install -e '.[ui]'")
from PIL import Image  # noqa: E402

from gpen_video import cli  # noqa: E402
from gpen_video.errors import UsageError  # noqa: E402
from gpen_video.flags import options_of, parse_with_settings  # noqa: E402
from gpen_video.options import JobOptions, RestoreOptions  # noqa: E402
from gpen_video.pipeline.engine import Engine  # noqa: E402
from gpen_video.ui import queue as render_queue  # noqa: E402
from gpen_video.ui import watch as watch_folder  # noqa: E402
from gpen_video.ui.app import create_app  # noqa: E402
from gpen_video.ui.desk import Desk  # noqa: E402
from gpen_video.ui.folders import Folders  # noqa: E402

from .conftest import SMALL_GPEN_SIZE, decoded_planes, paste_region, plane_region, shared_file  # noqa: E402
from .made_by_tools import ffmpeg  # noqa: E402
from .test_pipeline import _frame_times, _packets  # noqa: E402

VIDEO = "media/videos/talking_head_speech_liveportrait_d20.mp4"  # 480x480, 25 fps, 7 s
PHOTO = "media/images/whole_two_people.jpg"
HIKERS = "media/videos/multi_face_hikers_video_02.mp4"  # 640x480, five people walking


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _options(weights: Path) -> RestoreOptions:
    """The CPU, the small GPEN and the real mobile detector; FFV1, so that outputs compare sample for sample."""
    return RestoreOptions(device="cpu", weights=weights, detector="retinaface-mobile",
                          detector_weights=shared_file("weights/retinaface_mobilenet0.25.pth"), batch_size=4,
                          codec="ffv1")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch) -> Path:
    """The desk's queue lives under GPEN_VIDEO_HOME: one of the test's own."""
    path = tmp_path / "home"
    monkeypatch.setenv("GPEN_VIDEO_HOME", str(path))
    return path


class Served:
    """A desk served on a thread of this process, as ``gpen-video ui`` serves it."""

    def __init__(self, folders: list[Path], weights: Path, host: str = "127.0.0.1", token: str | None = None,
                 watch: tuple[Path, Path, dict] | None = None) -> None:
        self.port = _free_port()
        desk = Desk(Folders.of([*folders, *(watch[:2] if watch else ())]), _options(weights), watch)
        config = uvicorn.Config(create_app(desk, host, token), host=host, port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the desk did not start"
            time.sleep(0.05)

    def get(self, path: str, method: str = "GET", **query: str) -> tuple[int, bytes, dict]:
        url = f"http://127.0.0.1:{self.port}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=120) as response:
                return response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read(), dict(refused.headers)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder as an editor keeps one: a clip, a photo in a subfolder, a broken file, and a
    hidden work folder."""
    root = tmp_path / "clips"
    (root / "stills").mkdir(parents=True)
    (root / ".work").mkdir()
    shutil.copy(shared_file(VIDEO), root / "talk.mp4")
    ffmpeg("-i", shared_file(HIKERS), "-t", "2", "-c", "copy", root / "hikers.mkv")
    shutil.copy(shared_file(PHOTO), root / "stills" / "two.jpg")
    (root / "broken.mov").write_bytes(b"not a video at all")
    shutil.copy(shared_file(VIDEO), root / ".work" / "partial.mp4")
    return root


@pytest.fixture
def desk(folder: Path, small_gpen: Path) -> Iterator[Served]:
    served = Served([folder], small_gpen)
    yield served
    served.close()


def test_the_library_lists_each_video_and_photo_with_what_an_editor_needs(desk):
    status, body, headers = desk.get("/api/library")
    assert status == 200 and headers["content-type"] == "application/json"
    files = {f["name"]: f for f in json.loads(body)["files"]}
    assert sorted(files) == ["0/broken.mov", "0/hikers.mkv", "0/stills/two.jpg", "0/talk.mp4"]  # not hidden ones
    talk = files["0/talk.mp4"]
    assert (talk["kind"], talk["width"], talk["height"]) == ("video", 480, 480)
    assert talk["frames"] == 175 and abs(talk["seconds"] - 7.0) < 0.1
    assert talk["bytes"] == os.path.getsize(shared_file(VIDEO)) and talk["problem"] is None
    with Image.open(shared_file(PHOTO)) as photo:
        assert (files["0/stills/two.jpg"]["width"], files["0/stills/two.jpg"]["height"]) == photo.size
    assert files["0/broken.mov"]["problem"]  # one line, as the command line would say it
    assert "\n" not in files["0/broken.mov"]["problem"]


def test_thumbnails_are_jpegs_of_the_picture_as_shown(desk):
    for name, shape in (("0/talk.mp4", (320, 320)), ("0/stills/two.jpg", None)):
        status, body, headers = desk.get("/api/thumbnail", file=name)
        assert status == 200 and headers["content-type"] == "image/jpeg"
        with Image.open(io.BytesIO(body)) as thumbnail:
            assert thumbnail.format == "JPEG" and thumbnail.width == 320
            if shape:
                assert thumbnail.size == shape
            assert max(thumbnail.convert("L").getextrema()) > 100  # a picture, not a black frame


@pytest.mark.parametrize("name", ["0/../clips/talk.mp4", "0/../../etc/passwd", "0//etc/passwd", "1/talk.mp4",
                                  "../talk.mp4", "0/stills/../../outside.mp4", "0/link.mp4"])
def test_paths_that_leave_the_folders_are_refused(desk, folder, name):
    outside = folder.parent / "outside.mp4"
    shutil.copy(shared_file(VIDEO), outside)
    (folder / "link.mp4").symlink_to(outside)
    status, body, _ = desk.get("/api/thumbnail", file=name)
    if name == "0/../clips/talk.mp4":  # leaves and comes back: the same file, inside
        assert status == 200
        return
    error = json.loads(body)["error"]
    assert status == 404 and ("outside" in error or "no such file" in error), error
    assert "0/link.mp4" not in [f["name"] for f in json.loads(desk.get("/api/library")[1])["files"]]


def test_a_desk_beyond_loopback_asks_every_request_for_its_token(folder, small_gpen):
    served = Served([folder], small_gpen, host="0.0.0.0", token="secret-token")
    try:
        for path in ("/", "/api/library", "/static/desk.js"):
            status, body, _ = served.get(path)
            assert status == 401 and "token" in json.loads(body)["error"]
        assert served.get("/api/library", token="wrong")[0] == 401
        status, body, headers = served.get("/api/library", token="secret-token")
        assert status == 200 and "gpen_video_token=secret-token" in headers.get("set-cookie", "")
    finally:
        served.close()
    with pytest.raises(ValueError, match="token"):
        create_app(Desk(Folders.of([folder]), _options(small_gpen)), "0.0.0.0")


def test_the_page_and_its_files_are_served_without_anything_from_the_internet(desk):
    status, page, _ = desk.get("/")
    assert status == 200 and b"/static/desk.js" in page and b"/static/queue.js" in page
    for asset in ("/static/desk.js", "/static/queue.js", "/static/desk.css"):
        status, body, _ = desk.get(asset)
        assert status == 200 and b"http://" not in body and b"https://" not in body
    assert b"https://" not in page and b"http://" not in page


def test_a_folder_that_does_not_exist_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="not a folder"):
        Folders.of([tmp_path / "missing"])
    run = subprocess.run([sys.executable, "-m", "gpen_video.cli", "ui", str(tmp_path / "missing")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.strip() == f"gpen-video: error: not a folder: {tmp_path / 'missing'}"


def _surveyed(desk: Served, name: str) -> dict:
    """The clip's survey, started and followed to its end as the page follows it."""
    status, body, _ = desk.get("/api/survey", method="POST", file=name)
    assert status == 200, body
    deadline = time.monotonic() + 300
    while (survey := json.loads(desk.get("/api/survey", file=name)[1]))["state"] == "running":
        assert time.monotonic() < deadline, "the survey did not end"
        time.sleep(0.2)
    return survey


def _rgb(desk: Served, url: str) -> np.ndarray:
    status, body, headers = desk.get(url.split("?")[0], **dict(urllib.parse.parse_qsl(url.split("?")[1])))
    assert status == 200 and headers["content-type"] == "image/png"
    with Image.open(io.BytesIO(body)) as picture:
        return np.asarray(picture.convert("RGB"))


def test_the_survey_shows_every_track_the_command_line_finds_as_a_card(desk, folder, small_gpen):
    survey = _surveyed(desk, "0/hikers.mkv")
    assert survey["state"] == "done" and survey["done"] == survey["total"] and survey["error"] is None
    with Engine(_options(small_gpen), progress=False) as engine:
        found = engine.find_faces(folder / "hikers.mkv").tracks_found
    cards = {card["track"]: card for card in survey["tracks"]}
    assert {track: card["frames"] for track, card in cards.items()} == dict(found.frames)  # the CLI's ids
    assert len(cards) >= 3
    for track, card in cards.items():
        assert (card["first"], card["last"]) == pytest.approx(found.seen[track], abs=1e-6)
        assert card["first"] <= card["best_time"] <= card["last"]
        status, body, headers = desk.get("/api/face", file="0/hikers.mkv", track=str(track))
        assert status == 200 and headers["content-type"] == "image/jpeg"
        with Image.open(io.BytesIO(body)) as face:
            assert face.size == (224, 224)
    assert set(survey["picks"]["all"]) == set(cards)
    assert survey["picks"]["largest"] and set(survey["picks"]["largest"]) <= set(cards)
    assert desk.get("/api/face", file="0/hikers.mkv", track="999")[0] == 404
    status, body, _ = desk.get("/api/survey", method="POST", file="0/stills/two.jpg")
    assert status == 400 and "photo" in json.loads(body)["error"]


def test_a_preview_restores_only_the_chosen_track_as_the_editor_sets_it(desk):
    survey = _surveyed(desk, "0/hikers.mkv")
    track = max(survey["tracks"], key=lambda card: card["frames"])
    at = (track["first"] + track["last"]) / 2

    def preview(**settings: str) -> tuple[dict, np.ndarray, np.ndarray]:
        status, body, _ = desk.get("/api/still", file="0/hikers.mkv", time=str(at), **settings)
        assert status == 200, body
        shown = json.loads(body)
        return shown, _rgb(desk, shown["decoded"]), _rgb(desk, shown["restored"])

    shown, decoded, restored = preview(tracks=str(track["track"]))
    assert shown["time"] >= at - 1e-6 and (shown["width"], shown["height"]) == (640, 480)
    faces = {face["track"]: face for face in shown["faces"]}
    assert faces[str(track["track"])]["restored"] and not any(
        face["restored"] for name, face in faces.items() if name != str(track["track"]))
    changed = (decoded != restored).any(axis=2)
    x0, y0, x1, y1 = faces[str(track["track"])]["box"]
    reach = np.zeros_like(changed)
    grow = max(x1 - x0, y1 - y0)  # the aligned crop reaches about twice the box around it
    reach[max(0, int(y0 - grow)):int(y1 + grow), max(0, int(x0 - grow)):int(x1 + grow)] = True
    assert changed.sum() > 100 and not (changed & ~reach).any()
    _, decoded_again, unchanged = preview(tracks=str(track["track"]), strength="0")
    assert (decoded_again == decoded).all() and (unchanged == decoded).all()
    _, _, half = preview(tracks=str(track["track"]), strength="0.5")
    luma = np.array([0.299, 0.587, 0.114])  # per pixel: the frames' chroma is shared by pixel pairs
    assert np.abs(half @ luma - (decoded @ luma + restored @ luma) / 2).max() <= 3  # each step rounds
    _, _, unsmoothed = preview(tracks=str(track["track"]), smooth="0")
    assert (unsmoothed != restored).any()  # the landmarks as detected: another crop
    _, _, everyone = preview(tracks="all")
    assert (everyone != decoded).any(axis=2).sum() > changed.sum()


def test_a_preview_with_a_wrong_setting_is_one_line(desk):
    for settings, expected in (({"strength": "3"}, "--strength"), ({"mask": "oval"}, "--mask"),
                               ({"tracks": "a,b"}, "tracks"), ({"time": "soon"}, "seconds")):
        status, body, _ = desk.get("/api/still", file="0/hikers.mkv", **settings)
        error = json.loads(body)["error"]
        assert status == 400 and expected in error and "\n" not in error, error
    assert desk.get("/api/still", file="0/../../x.mp4")[0] == 404
    assert desk.get("/api/picture", key="999", view="restored")[0] == 404


def _rendered(desk: Served, number: int) -> dict:
    """The render ``number`` followed to its end, as the page follows the queue."""
    deadline = time.monotonic() + 300
    while True:
        render = next(r for r in json.loads(desk.get("/api/renders")[1])["renders"] if r["id"] == number)
        if render["state"] not in ("queued", "running"):
            return render
        assert time.monotonic() < deadline, "the render did not end"
        time.sleep(0.2)


def test_a_render_from_the_desk_keeps_the_clip_and_restores_only_the_chosen_track_in_the_range(
        desk, folder, small_gpen, tmp_path):
    survey = _surveyed(desk, "0/hikers.mkv")
    track = max(survey["tracks"], key=lambda card: card["frames"])["track"]
    start, end = 0.5, 1.5
    status, body, _ = desk.get("/api/render", method="POST", file="0/hikers.mkv", tracks=str(track),
                               start=str(start), end=str(end))
    assert status == 200, body
    render = _rendered(desk, json.loads(body)["id"])
    assert render["state"] == "done" and render["error"] is None, render
    assert render["output"] == "0/hikers.restored.mkv" and render["plays"] is False  # Matroska: no browser plays it
    clip, output = folder / "hikers.mkv", folder / "hikers.restored.mkv"
    assert _frame_times(output) == _frame_times(clip) and render["frames"] == len(_frame_times(clip))
    assert _packets(output, "audio") == _packets(clip, "audio") and _packets(clip, "audio")
    listed = tmp_path / "tracks.json"  # where the command line says each face is
    with Engine(_options(small_gpen), progress=False) as engine:
        engine.find_faces(clip, tracks_out=listed)
    records = json.loads(listed.read_text())["frames"]
    changed_frames = 0
    for record, before, after in zip(records, decoded_planes(clip), decoded_planes(output), strict=True):
        inside = start + 0.05 < record["time"] < end - 0.05
        faces = [face for face in record["faces"] if face["track"] == track] if inside else []
        if not inside and start - 0.05 < record["time"] < end + 0.05:
            continue  # at the range's edges
        region = paste_region(faces, SMALL_GPEN_SIZE, *before[0].shape)
        for plane_in, plane_out in zip(before, after):
            outside = ~plane_region(region, plane_in)
            np.testing.assert_array_equal(plane_out[outside], plane_in[outside], f"frame {record['index']}")
        changed_frames += bool(faces)
    assert changed_frames >= 15
    status, body, headers = desk.get("/api/media", file="0/hikers.restored.mkv")
    assert status == 200 and body == output.read_bytes()
    files = {f["name"]: f for f in json.loads(desk.get("/api/library")[1])["files"]}
    assert files["0/hikers.mkv"]["render"] == "done" and files["0/talk.mp4"]["render"] is None


def test_a_photo_previews_and_renders_whole(desk, folder):
    shown = json.loads(desk.get("/api/still", file="0/stills/two.jpg")[1])
    decoded, restored = _rgb(desk, shown["decoded"]), _rgb(desk, shown["restored"])
    with Image.open(shared_file(PHOTO)) as photo:
        assert decoded.shape[:2] == (photo.height, photo.width)
    assert len(shown["faces"]) == 2 and all(face["restored"] for face in shown["faces"])
    assert (decoded != restored).any(axis=2).sum() > 1000
    shown = json.loads(desk.get("/api/still", file="0/stills/two.jpg", strength="0")[1])
    assert (_rgb(desk, shown["restored"]) == decoded).all()
    number = json.loads(desk.get("/api/render", method="POST", file="0/stills/two.jpg", start="1")[1])["id"]
    render = _rendered(desk, number)  # a time range applies to videos: a photo is restored whole
    assert render["state"] == "done" and render["output"] == "0/stills/two.restored.jpg" and render["plays"], render
    with Image.open(folder / "stills" / "two.restored.jpg") as output:
        assert (output.width, output.height) == decoded.shape[1::-1]


def test_the_queue_outlives_the_desk_and_a_cut_off_render_goes_on_from_its_last_segment(
        folder, small_gpen, monkeypatch):
    monkeypatch.setattr(render_queue, "RESUMABLE", JobOptions(resume=True, segment_frames=30))
    ffmpeg("-i", folder / "talk.mp4", "-t", "4", "-c", "copy", folder / "short.mp4")
    first = Served([folder], small_gpen)
    try:
        failing = json.loads(first.get("/api/render", method="POST", file="0/broken.mov")[1])
        assert "error" in failing  # refused at once: it cannot be read
        number = json.loads(first.get("/api/render", method="POST", file="0/short.mp4", strength="0.5")[1])["id"]
        deadline = time.monotonic() + 300
        while next(r for r in json.loads(first.get("/api/renders")[1])["renders"])["done"] < 45:
            assert time.monotonic() < deadline, "the render did not start"
            time.sleep(0.05)
    finally:
        first.close()  # as Ctrl-C stops the desk: the render is cut off
    assert not (folder / "short.restored.mp4").exists()
    second = Served([folder], small_gpen)
    try:
        render = _rendered(second, number)
    finally:
        second.close()
    assert render["state"] == "done" and render["settings"]["strength"] == 0.5, render
    assert render["resumed_at"] >= 30  # the finished segments were kept
    assert _frame_times(folder / "short.restored.mp4") == _frame_times(folder / "short.mp4")


def test_settings_saved_from_the_page_are_the_command_lines_too(desk, tmp_path):
    status, body, _ = desk.get("/api/settings", method="POST", name="soft skin", strength="0.5", mask="box",
                               smooth="2")
    assert status == 200 and json.loads(body)["saved"] == {"soft skin": {"strength": 0.5, "mask": "box", "smooth": 2.0}}
    for name, strength, expected in (("../escape", "1", "settings names"), ("bad", "7", "--strength")):
        status, body, _ = desk.get("/api/settings", method="POST", name=name, strength=strength)
        assert status == 400 and expected in json.loads(body)["error"]
    parser = cli.build_parser()
    options, _, _ = options_of(parse_with_settings(parser, ["in.mp4", "out.mp4", "--settings", "soft skin"]))
    assert (options.strength, options.mask, options.smooth) == (0.5, "box", 2.0)
    options, _, _ = options_of(parse_with_settings(cli.build_parser(), ["in.mp4", "out.mp4", "--settings",
                                                                       "soft skin", "--strength", "0.8"]))
    assert (options.strength, options.smooth) == (0.8, 2.0)  # a flag given wins
    run = subprocess.run([sys.executable, "-m", "gpen_video", "in.mp4", "out.mp4", "--settings", "harsh"],
                         capture_output=True, text=True, timeout=60, env=os.environ)
    assert run.returncode == 2
    assert run.stderr.strip() == "gpen-video: error: no settings are saved as 'harsh' (saved: soft skin)"


def test_a_watch_folder_takes_each_file_once_whole_and_a_broken_one_costs_only_itself(tmp_path, small_gpen,
                                                                                       monkeypatch):
    monkeypatch.setattr(watch_folder, "STEADY", 1.0)
    inbox, outbox = tmp_path / "in", tmp_path / "out"
    inbox.mkdir()
    outbox.mkdir()
    clip = tmp_path / "short.mp4"
    ffmpeg("-i", shared_file(VIDEO), "-t", "1", "-c", "copy", clip)
    served = Served([], small_gpen, watch=(inbox, outbox, {"strength": 0.5}))
    try:
        (inbox / "broken.mov").write_bytes(b"not a video at all")
        data = clip.read_bytes()
        with open(inbox / "slow.mp4", "wb") as copy:  # copied slowly, as over a network
            for start in range(0, len(data), len(data) // 4 + 1):
                copy.write(data[start : start + len(data) // 4 + 1])
                copy.flush()
                time.sleep(0.6)
        deadline = time.monotonic() + 300
        while True:
            renders = json.loads(served.get("/api/renders")[1])["renders"]
            if len(renders) == 2 and all(r["state"] in ("done", "failed") for r in renders):
                break
            assert time.monotonic() < deadline, renders
            time.sleep(0.2)
        time.sleep(2.5)  # more looks at the folder: nothing is taken twice
        renders = {r["file"].split("/", 1)[1]: r for r in json.loads(served.get("/api/renders")[1])["renders"]}
    finally:
        served.close()
    assert sorted(renders) == ["broken.mov", "slow.mp4"]
    assert renders["broken.mov"]["state"] == "failed" and "\n" not in renders["broken.mov"]["error"]
    slow = renders["slow.mp4"]
    assert slow["state"] == "done" and slow["settings"] == {"strength": 0.5}, slow
    assert _frame_times(outbox / "slow.mp4") == _frame_times(clip)
    assert _packets(outbox / "slow.mp4", "audio") == _packets(clip, "audio")
    assert sorted(p.name for p in outbox.iterdir() if not p.name.startswith(".")) == ["slow.mp4"]


@pytest.mark.parametrize("flag", ["--start", "--end", "--tracks"])
def test_a_clips_own_range_and_tracks_are_not_desk_wide_options(tmp_path, flag):
    """Each clip's range and tracks are chosen on the page: the desk refuses them as defaults for every clip."""
    run = subprocess.run([sys.executable, "-m", "gpen_video.cli", "ui", str(tmp_path), flag, "1"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip() == (f"gpen-video: error: {flag} is set for each clip on the desk's page, "
                                  f"not for the whole desk")
