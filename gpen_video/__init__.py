"""gpen-video: restore the faces in a video with GPEN, keeping everything else intact."""

__version__ = "0.1.0"
