"""What can be chosen in finding faces: the detectors and where their weights come from, the
detection threshold, the faces to restore, and how much to smooth their tracks.

Plain data, so that the options and ``--help`` can name the choices without loading torch.
"""

from __future__ import annotations

#: Detector name -> (facexlib network name, official facexlib download URL).
DETECTORS = {
    "retinaface-r50": ("resnet50",
                       "https://github.com/xinntao/facexlib/releases/download/v0.1.0/detection_Resnet50_Final.pth"),
    "retinaface-mobile": ("mobile0.25",
                          "https://github.com/xinntao/facexlib/releases/download/v0.1.0/"
                          "detection_mobilenet0.25_Final.pth"),
}
DEFAULT_DETECTOR = "retinaface-r50"
#: The face parser of ``--mask parse`` (facexlib's ParseNet, as the official GPEN uses).
PARSE_URL = "https://github.com/xinntao/facexlib/releases/download/v0.2.2/parsing_parsenet.pth"
DEFAULT_THRESHOLD = 0.9  # the official GPEN's detection confidence
#: Which faces ``--faces`` restores (how each is chosen: select.py).
FACE_CHOICES = ("all", "largest", "center")
#: The smoother's strength (what 1.0 means: smooth.py).
DEFAULT_SMOOTH = 1.0
