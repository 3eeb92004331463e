"""``make demo``: restore the project's own sample clip and photo with the official GPEN-BFR-512.

The official weights (and the detector's) download into the cache on first use; offline, the
error says which files to fetch and where to put them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .api import restore_image, restore_video

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
OUT = ROOT / "out"


def main() -> int:
    OUT.mkdir(exist_ok=True)
    try:
        video = restore_video(SAMPLES / "portrait.mp4", OUT / "portrait_restored.mp4",
                              tracks_out=OUT / "portrait_tracks.json", overwrite=True)
        print(video.describe())
        photo = restore_image(SAMPLES / "portrait.jpg", OUT / "portrait_restored.jpg", overwrite=True)
        print(photo.describe())
    except Exception as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 1
    print(f"compare {SAMPLES / 'portrait.mp4'} with {OUT / 'portrait_restored.mp4'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
