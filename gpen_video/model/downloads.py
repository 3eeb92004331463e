"""Checkpoint files a run needs and does not have: the cache they live in, where they come from
(the official URLs, or a studio's mirror), and their download, one file or all of a run's at once.

Torch is not imported here: ``--fetch-weights`` and the errors about missing files answer fast.
"""

from __future__ import annotations

import http.client
import logging
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ..errors import WeightsError
from .choices import OfficialModel

log = logging.getLogger(__name__)
#: A studio's own mirror: every file is fetched from ``$GPEN_VIDEO_WEIGHTS_URL/<file name>`` instead.
MIRROR_VARIABLE = "GPEN_VIDEO_WEIGHTS_URL"
#: Said before the official GPEN weights first download: the terms are their authors', not this tool's.
LICENCE_NOTICE = ("{name}: GPEN's authors release their models \"for academic and non-commercial use only\" "
                  "(the licence of github.com/yangxy/GPEN); for other use, pass --weights with GPEN-architecture "
                  "weights you may use so")


def cache_dir() -> Path:
    """Where downloaded checkpoints live: ``$GPEN_VIDEO_HOME`` or ``~/.cache/gpen-video``."""
    return Path(os.environ.get("GPEN_VIDEO_HOME") or Path.home() / ".cache" / "gpen-video")


@dataclass(frozen=True)
class WeightsFile:
    """One checkpoint a run needs from the cache: what it is, where it comes from, its file name
    in the cache, the option that takes a file of one's own instead, and the terms to say before
    it first downloads (if any)."""

    what: str
    official_url: str
    filename: str
    flag: str
    approx_bytes: int | None = None
    licence: str = ""

    @property
    def url(self) -> str:
        """The official URL, or the mirror's where ``$GPEN_VIDEO_WEIGHTS_URL`` names one."""
        mirror = os.environ.get(MIRROR_VARIABLE)
        return f"{mirror.rstrip('/')}/{self.filename}" if mirror else self.official_url

    @property
    def path(self) -> Path:
        return cache_dir() / self.filename


def official_file(model: OfficialModel) -> WeightsFile:
    """An official GPEN checkpoint as a file of the cache, with its licence said before it downloads."""
    return WeightsFile(model.name, model.url, model.filename, "--weights", model.approx_bytes,
                       LICENCE_NOTICE.format(name=model.name))


def helper_file(what: str, url: str, flag: str) -> WeightsFile:
    """A helper network's official checkpoint (a detector, the face parser), named as its URL names it."""
    return WeightsFile(what, url, url.rsplit("/", 1)[1], flag)


def download(url: str, dest: Path, expected_bytes: int | None = None, progress: bool = True) -> Path:
    """Download ``url`` to ``dest`` atomically: a temp file beside it, renamed only once complete.

    A failed or short transfer leaves nothing at ``dest`` and no temp file behind.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as resp:
            total = int(resp.headers.get("Content-Length") or 0) or expected_bytes
            with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=dest.name,
                      disable=not progress, leave=False) as bar:
                received = 0
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
        declared = int(resp.headers.get("Content-Length") or 0)
        if declared and received != declared:
            raise WeightsError(f"download of {url} was cut short: {received} of {declared} bytes")
        os.replace(tmp, dest)
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        raise WeightsError(f"cannot download {url}: {getattr(exc, 'reason', exc)}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _fetched(file: WeightsFile, progress: bool) -> Path:
    """``file`` in the cache, downloaded if missing (its terms said first)."""
    if file.path.is_file():
        return file.path
    if file.licence:
        log.warning(file.licence)
    return download(file.url, file.path, file.approx_bytes, progress)


def fetch_all(files: list[WeightsFile], progress: bool = True) -> list[Path]:
    """Every file of ``files`` in the cache, the missing ones downloaded. Where any cannot be,
    one error names every file still missing, with its URL and where to save it."""
    paths: list[Path] = []
    failure = ""
    for file in files:
        try:
            paths.append(_fetched(file, progress))
        except WeightsError as exc:
            failure = failure or str(exc)
    missing = [f for f in files if not f.path.is_file()]
    if missing:
        listed = "; ".join(f"{f.what}: {f.url} saved as {f.path} (or {f.flag} PATH)" for f in missing)
        raise WeightsError(f"{len(missing)} weight file(s) are not in the cache and could not be downloaded "
                           f"({failure}). Download them by hand, or set {MIRROR_VARIABLE} to a mirror of them: "
                           f"{listed}")
    return paths


def fetch(file: WeightsFile, progress: bool = True) -> Path:
    """One file in the cache, downloaded on first use (see :func:`fetch_all`)."""
    return fetch_all([file], progress)[0]
