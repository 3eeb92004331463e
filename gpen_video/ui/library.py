"""What the desk shows of each file in its folders: its kind, picture size, length and a
thumbnail, read once per version of the file (its size and modification time)."""

from __future__ import annotations

import io
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from PIL import Image

from ..errors import GpenVideoError, error_line
from ..media.images import IMAGE_EXTENSIONS, read_image
from ..media.probe import probe
from ..media.seek import frames_at
from .folders import Folders

#: A thumbnail's width in pixels (its height follows the picture's shape).
THUMBNAIL_WIDTH = 320
#: Where in a video its thumbnail is taken: a tenth of the way in, past black openings and fades,
#: and at most this many seconds in, so that a long file seeks little.
THUMBNAIL_AT = 0.1
THUMBNAIL_LATEST = 5.0


@dataclass(frozen=True)
class Entry:
    """One file as the page lists it. ``problem`` is the one line a file that cannot be read gets."""

    name: str
    kind: str  # "video" or "photo"
    bytes: int
    width: int | None = None
    height: int | None = None
    seconds: float | None = None
    frames: int | None = None
    problem: str | None = None

    def as_json(self) -> dict:
        return asdict(self)


class Library:
    """The folders' files, each read when first listed and again only once it changes."""

    def __init__(self, folders: Folders) -> None:
        self.folders = folders
        self._entries: dict[tuple[Path, int, int], Entry] = {}
        self._thumbnails: dict[tuple[Path, int, int], bytes] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _version(path: Path) -> tuple[Path, int, int]:
        stat = path.stat()
        return path, stat.st_size, stat.st_mtime_ns

    def entries(self) -> list[Entry]:
        return [self.entry(path) for path in self.folders.media()]

    def entry(self, path: Path) -> Entry:
        version = self._version(path)
        with self._lock:
            known = self._entries.get(version)
        if known is None:
            known = self._read(path, version[1])
            with self._lock:
                self._entries[version] = known
        return known

    def _read(self, path: Path, size: int) -> Entry:
        name = self.folders.name_of(path)
        try:
            if path.suffix.lower() in IMAGE_EXTENSIONS:
                with Image.open(path) as image:
                    upright = image.size if image.getexif().get(0x0112, 1) < 5 else image.size[::-1]
                return Entry(name, "photo", size, *upright)
            info = probe(path)
            height, width = info.shown
            return Entry(name, "video", size, width, height, info.duration, info.frames)
        except (GpenVideoError, OSError) as exc:
            return Entry(name, "photo" if path.suffix.lower() in IMAGE_EXTENSIONS else "video", size,
                         problem=error_line(exc))

    def thumbnail(self, path: Path) -> bytes:
        """A JPEG of the file's picture (a video's a tenth of the way in), upright, as players show it."""
        version = self._version(path)
        with self._lock:
            known = self._thumbnails.get(version)
        if known is not None:
            return known
        if path.suffix.lower() in IMAGE_EXTENSIONS:
            photo = read_image(path)
            rgb = photo.frame.to_ndarray(format="rgb24")
        else:
            info = probe(path)
            into = min(THUMBNAIL_AT * (info.duration or 0.0), THUMBNAIL_LATEST)
            rgb = frames_at(path, [info.first_time + into])[0].rgb()
        image = Image.fromarray(rgb)
        image.thumbnail((THUMBNAIL_WIDTH, THUMBNAIL_WIDTH * 4))
        out = io.BytesIO()
        image.save(out, "JPEG", quality=85)
        with self._lock:
            self._thumbnails[version] = out.getvalue()
        return out.getvalue()


def estimated_frames(path: Path) -> int | None:
    """A video's frames for a progress bar: its header's count, else its duration times its rate
    (Matroska headers count none); None for a photo."""
    if path.suffix.lower() in IMAGE_EXTENSIONS:
        return None
    info = probe(path)
    return info.frames or (round(info.duration * info.fps) if info.duration else None)
