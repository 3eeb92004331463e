"""The checkpoints a run needs from the cache, for its options: fetched all at once before any
network loads (``--fetch-weights`` fetches them and stops), so that an offline machine hears of
every missing file in one error, and a render node can be readied while it is online."""

from __future__ import annotations

from pathlib import Path

from ..faces.choices import DETECTORS, PARSE_URL
from ..model.choices import OFFICIAL_MODELS
from ..model.downloads import WeightsFile, fetch_all, helper_file, official_file
from ..options import RestoreOptions


def needed_files(options: RestoreOptions, restoring: bool = True) -> list[WeightsFile]:
    """The cached files a run with ``options`` loads: the detector's, and where it ``restoring``,
    GPEN's and (with ``--mask parse``) the face parser's; none that an option gives a path for."""
    files = []
    if options.detector_weights is None:
        files.append(helper_file(options.detector, DETECTORS[options.detector][1], "--detector-weights"))
    if restoring and options.weights is None:
        files.append(official_file(OFFICIAL_MODELS[options.model]))
    if restoring and options.mask == "parse" and options.parse_weights is None:
        files.append(helper_file("face parser", PARSE_URL, "--parse-weights"))
    return files


def fetch_needed(options: RestoreOptions, restoring: bool = True, progress: bool = True) -> list[tuple[str, Path]]:
    """Every file :func:`needed_files` names, in the cache: (what, where), downloaded where missing."""
    files = needed_files(options, restoring)
    return [(file.what, path) for file, path in zip(files, fetch_all(files, progress))]
