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

import pytest

uvicorn = pytest.importorskip("uvicorn", reason="the desk is an extra: pip install -e '.[ui]'")
from PIL import Image  # noqa: E402

from gpen_video.errors import UsageError  # noqa: E402
from gpen_video.ui.app import create_app  # noqa: E402
from gpen_video.ui.folders import Folders  # noqa: E402

from .conftest import shared_file  # noqa: E402

VIDEO = "media/videos/talking_head_speech_liveportrait_d20.mp4"  # 480x480, 25 fps, 7 s
PHOTO = "media/images/whole_two_people.jpg"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Desk:
    """A desk served on a thread of this process, as ``gpen-video ui`` serves it."""

    def __init__(self, folders: list[Path], host: str = "127.0.0.1", token: str | None = None) -> None:
        self.port = _free_port()
        config = uvicorn.Config(create_app(Folders.of(folders), host, token), host=host, port=self.port,
                                log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the desk did not start"
            time.sleep(0.05)

    def get(self, path: str, **query: str) -> tuple[int, bytes, dict]:
        url = f"http://127.0.0.1:{self.port}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
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
    shutil.copy(shared_file(PHOTO), root / "stills" / "two.jpg")
    (root / "broken.mov").write_bytes(b"not a video at all")
    shutil.copy(shared_file(VIDEO), root / ".work" / "partial.mp4")
    return root


@pytest.fixture
def desk(folder: Path) -> Iterator[Desk]:
    served = Desk([folder])
    yield served
    served.close()


def test_the_library_lists_each_video_and_photo_with_what_an_editor_needs(desk):
    status, body, headers = desk.get("/api/library")
    assert status == 200 and headers["content-type"] == "application/json"
    files = {f["name"]: f for f in json.loads(body)["files"]}
    assert sorted(files) == ["0/broken.mov", "0/stills/two.jpg", "0/talk.mp4"]  # hidden folders left out
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


def test_a_desk_beyond_loopback_asks_every_request_for_its_token(folder):
    served = Desk([folder], host="0.0.0.0", token="secret-token")
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
        create_app(Folders.of([folder]), "0.0.0.0")


def test_the_page_and_its_files_are_served_without_anything_from_the_internet(desk):
    status, page, _ = desk.get("/")
    assert status == 200 and b"/static/desk.js" in page
    for asset in ("/static/desk.js", "/static/desk.css"):
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
