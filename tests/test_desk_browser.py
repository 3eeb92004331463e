"""The desk's page in a real browser (Debian's Chromium, headless, driven through its driver), as
an editor goes through it: open the library, open the multi-face clip, find its faces, choose one
track, preview a frame, set a range, queue the render and wait for it. The output is then checked
as the command line's is. A screenshot of each step is kept under ``test-artefacts/desk/`` (or
``$GPEN_VIDEO_ARTEFACTS/desk/``)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

webdriver = pytest.importorskip("selenium.webdriver", reason="the browser test drives Chromium with selenium")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from gpen_video.pipeline.engine import Engine  # noqa: E402

from .conftest import SMALL_GPEN_SIZE, decoded_planes, paste_region, plane_region, shared_file  # noqa: E402
from .made_by_tools import ffmpeg, tool  # noqa: E402
from .test_pipeline import _frame_times, _packets  # noqa: E402
from .test_ui import HIKERS, PHOTO, VIDEO, Served, _options  # noqa: E402

ARTEFACTS = Path(os.environ.get("GPEN_VIDEO_ARTEFACTS") or Path(__file__).parent.parent / "test-artefacts") / "desk"


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = tool("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1300"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(tool("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def folder(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("GPEN_VIDEO_HOME", str(tmp_path / "home"))
    root = tmp_path / "clips"
    (root / "stills").mkdir(parents=True)
    ffmpeg("-i", shared_file(HIKERS), "-t", "2", "-c", "copy", root / "hikers.mkv")
    shutil.copy(shared_file(VIDEO), root / "talk.mp4")
    shutil.copy(shared_file(PHOTO), root / "stills" / "two.jpg")
    return root


def test_an_editor_chooses_a_face_previews_sets_a_range_and_renders_in_the_browser(browser, folder, small_gpen,
                                                                                   tmp_path):
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    wait = WebDriverWait(browser, 300, poll_frequency=0.1)

    def shot(name: str) -> None:
        browser.save_screenshot(str(ARTEFACTS / f"{name}.png"))

    def element(selector: str):
        return browser.find_element(By.CSS_SELECTOR, selector)

    def previewed() -> None:
        """Wait for the preview asked last to be on the page."""
        wait.until(lambda _: browser.execute_script(
            "return document.getElementById('busy').hidden && document.getElementById('restored').complete "
            "&& document.getElementById('restored').naturalWidth > 0"))

    def scrub_to(seconds: float) -> None:
        browser.execute_script("const t = document.getElementById('time'); t.value = arguments[0]; "
                               "t.dispatchEvent(new Event('input'));", seconds)
        browser.execute_script("document.getElementById('busy').hidden = false")  # until the new one lands
        previewed()

    served = Served([folder], small_gpen)
    try:
        browser.get(f"http://127.0.0.1:{served.port}/")
        wait.until(lambda _: browser.find_elements(By.CSS_SELECTOR, '.file[data-file="0/hikers.mkv"]'))
        assert len(browser.find_elements(By.CSS_SELECTOR, ".file")) == 3
        shot("1-library")

        element('.file[data-file="0/hikers.mkv"]').click()
        previewed()
        element("#survey").click()
        wait.until(lambda _: browser.find_elements(By.CSS_SELECTOR, ".face"))
        cards = browser.find_elements(By.CSS_SELECTOR, ".face")
        assert len(cards) >= 3 and all("chosen" in card.get_attribute("class") for card in cards)
        shot("2-faces")

        element('[data-pick="none"]').click()
        assert element("#render").get_attribute("disabled") is not None  # nothing chosen: nothing to render
        track = max(cards, key=lambda card: int(card.text.split(" · ")[2].split()[0]))  # on the most frames
        chosen = int(track.get_attribute("data-track"))
        track.click()
        assert [int(c.get_attribute("data-track")) for c in browser.find_elements(By.CSS_SELECTOR, ".face.chosen")] \
            == [chosen]
        scrub_to(1.0)
        labels = [button.text for button in browser.find_elements(By.CSS_SELECTOR, "#zoom-faces button")]
        assert f"Face {chosen}" in labels
        browser.find_element(By.XPATH, f"//*[@id='zoom-faces']/button[text()='Face {chosen}']").click()
        shot("3-preview-zoomed")
        element("#zoom-out").click()
        Select(element("#view")).select_by_value("wipe")
        shot("4-preview-wipe")

        scrub_to(0.5)
        element("#set-start").click()
        scrub_to(1.5)
        element("#set-end").click()
        start, end = (float(x) for x in browser.execute_script("return [clip.start, clip.end]"))
        assert 0.5 <= start < 0.55 and 1.5 <= end < 1.55
        shot("5-range")

        element("#render").click()
        wait.until(lambda _: browser.find_elements(By.CSS_SELECTOR, ".render.done, .render.failed"))
        browser.execute_script("document.getElementById('queue').scrollIntoView()")
        shot("6-rendered")
        assert browser.find_elements(By.CSS_SELECTOR, ".render.done"), element("#renders").text
        assert "hikers.mkv → hikers.restored.mkv" in element("#renders").text
        assert not element("#clip-error").text
    finally:
        served.close()

    clip, output = folder / "hikers.mkv", folder / "hikers.restored.mkv"
    assert _frame_times(output) == _frame_times(clip)
    assert _packets(output, "audio") == _packets(clip, "audio") and _packets(clip, "audio")
    listed = tmp_path / "tracks.json"  # where the command line finds each face
    with Engine(_options(small_gpen), progress=False) as engine:
        engine.find_faces(clip, tracks_out=listed)
    restored = 0
    for record, before, after in zip(json.loads(listed.read_text())["frames"], decoded_planes(clip),
                                     decoded_planes(output), strict=True):
        if abs(record["time"] - start) < 0.05 or abs(record["time"] - end) < 0.05:
            continue  # at the range's edges
        inside = start < record["time"] < end
        faces = [face for face in record["faces"] if face["track"] == chosen] if inside else []
        region = paste_region(faces, SMALL_GPEN_SIZE, *before[0].shape)
        for plane_in, plane_out in zip(before, after):
            outside = ~plane_region(region, plane_in)
            np.testing.assert_array_equal(plane_out[outside], plane_in[outside], f"frame {record['index']}")
        restored += bool(faces) and bool((after[0] != before[0]).any())
    assert restored >= 15
