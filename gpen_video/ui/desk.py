"""The desk's work on one warm engine: surveys of the clips' faces, previews of single frames
restored with the options the editor is trying (strength, mask, smoothing, tracks), and the
queue of renders."""

from __future__ import annotations

import dataclasses
import io
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path

from PIL import Image

from ..errors import UsageError
from ..media.images import IMAGE_EXTENSIONS
from ..media.probe import probe
from ..media.sheet import Panel
from ..model.downloads import cache_dir
from ..options import JobOptions, RestoreOptions
from ..pipeline.engine import Engine
from ..pipeline.summary import Summary
from .folders import Folders
from .library import estimated_frames
from .queue import RenderQueue
from .surveys import Survey
from .watch import WatchFolder

#: Previews kept for the page to fetch both pictures of (and to go back to).
KEPT_STILLS = 8
#: The render queue's database, under GPEN_VIDEO_HOME.
QUEUE_FILE = "desk-queue.sqlite"
#: A watch folder: files appearing in the first folder are restored into the second with the settings.
Watch = tuple[Path, Path, dict]


def _version(path: Path) -> tuple[Path, int, int]:
    """A file as it is now: a survey or preview of it holds until it changes."""
    stat = path.stat()
    return path, stat.st_size, stat.st_mtime_ns


def parse_tracks(text: str) -> frozenset[int] | None:
    """The page's choice of tracks: ``all`` (None), or ids separated by commas (none: nothing restored)."""
    if text == "all":
        return None
    try:
        return frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"tracks are ids separated by commas, or all: {text!r}") from None


class Desk:
    """One engine of ``options`` (the command's), serving every page that reaches the desk."""

    def __init__(self, folders: Folders, options: RestoreOptions, watch: Watch | None = None) -> None:
        self.folders = folders
        self.options = options
        self.engine = Engine(options, progress=False)
        self._surveys: dict[tuple[Path, int, int], Survey] = {}
        self._stills: OrderedDict[str, Panel] = OrderedDict()
        self._lock = threading.Lock()
        self._serial = 0
        self.queue = RenderQueue(cache_dir() / QUEUE_FILE, options, folders.holds, self._render)
        self.watching = WatchFolder(*watch, self.queue) if watch is not None else None

    def _render(self, input: Path, output: Path, options: RestoreOptions, job: JobOptions,
                on_frame: Callable[[int, int], None]) -> Summary:
        """One render of the queue: a photo is restored whole whatever the time range."""
        return self.engine.restore(input, output, job, on_frame, whole_photos=True, options=options)

    def close(self) -> None:
        """Stop the queue; a render still running is cut off and resumes when a desk starts again."""
        if self.watching is not None:
            self.watching.close()
        self.queue.close(self.engine.interrupt)
        self.engine.close()

    def survey(self, path: Path, start: bool = False) -> Survey | None:
        """The survey of the file as it is now: started on a thread of its own if ``start`` and none was."""
        version = _version(path)
        with self._lock:
            survey = self._surveys.get(version)
            if survey is not None or not start:
                return survey
            if path.suffix.lower() in IMAGE_EXTENSIONS:
                raise UsageError(f"the survey follows a video's faces over time; {path.name} is a photo")
            height, width = probe(path).shown
            survey = self._surveys[version] = Survey(path, estimated_frames(path), height, width)
        threading.Thread(target=survey.run, args=(self.engine, self.options), name=f"survey {path.name}",
                         daemon=True).start()
        return survey

    def options_for(self, given: Mapping[str, str]) -> RestoreOptions:
        """The command's options with the page's strength, mask and smoothing where ``given``,
        checked as the CLI checks them."""
        try:
            numbers = {name: float(given[name]) for name in ("strength", "smooth") if name in given}
        except ValueError:
            raise UsageError(f"strength and smoothing are numbers: {given.get('strength')!r}, "
                             f"{given.get('smooth')!r}") from None
        return dataclasses.replace(self.options, **numbers, mask=given.get("mask", self.options.mask))

    def still(self, path: Path, time: float, tracks: frozenset[int] | None,
              options: RestoreOptions) -> tuple[str, Panel]:
        """The frame at ``time`` (or a photo) decoded beside restored with ``options``, restoring ``tracks``
        (None: all), kept under the returned key for :meth:`picture`. Where the clip's survey is
        done, its faces are those a render tracks and smooths, under the survey's track ids;
        before, they are detected on the frame alone."""
        survey = self.survey(path)
        tracked = survey.tracked(options.smooth) if survey is not None and survey.state == "done" else None
        panel = self.engine.still(path, time, tracked, tracks, options)
        with self._lock:
            self._serial += 1
            key = str(self._serial)
            self._stills[key] = panel
            while len(self._stills) > KEPT_STILLS:
                self._stills.popitem(last=False)
        return key, panel

    def picture(self, key: str, view: str) -> bytes:
        """A kept preview's frame as decoded or as restored, a PNG at full resolution."""
        with self._lock:
            panel = self._stills.get(key)
        if panel is None or view not in ("decoded", "restored"):
            raise KeyError(key)
        out = io.BytesIO()
        Image.fromarray(panel.original if view == "decoded" else panel.restored).save(out, "PNG", compress_level=1)
        return out.getvalue()
