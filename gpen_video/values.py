"""The values options take: how the command line's text becomes one, and the checks on it, with
the words ``--help`` shows for each range. Plain Python, so that ``--help`` loads nothing heavy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Check = Callable[[Any], str | None]  # a value -> what is wrong with it, or None


@dataclass(frozen=True)
class Range:
    """A number's allowed range, as a check and as the words ``--help`` shows for it."""

    low: float
    high: float | None = None
    low_open: bool = False  # the low end itself is not allowed
    what: str = ""  # how a message names the range, where its numbers alone say it badly

    def __call__(self, value: float | None) -> str | None:
        if value is None:
            return None
        if value < self.low or (self.low_open and value == self.low) or (self.high is not None and value > self.high):
            return f"must be {self.what or self.describe()}, got {value}"
        return None

    def describe(self) -> str:
        if self.high is None:
            return f"at least {self.low:g}" if not self.low_open else f"more than {self.low:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"


def at_least(low: float, what: str = "") -> Range:
    return Range(low, what=what)


def between(low: float, high: float) -> Range:
    return Range(low, high)


def numbers(flag: str, example: str) -> Callable[[str], tuple[int, ...]]:
    """A flag's comma-separated whole numbers: ``--gpus 0,1`` -> (0, 1)."""

    def parse(text: str) -> tuple[int, ...]:
        import argparse

        try:
            return tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes numbers like {example}; got {text!r}") from None

    return parse


def track_ids(ids: tuple[int, ...] | None) -> str | None:
    if ids is None:
        return None
    if not ids:
        return "needs at least one track id"
    negative = [i for i in ids if i < 0]
    return f"takes track ids from 0 up, got {negative[0]}" if negative else None


def parse_time(text: str) -> float:
    """``--start 75.5``, ``--start 1:15.5`` or ``--start 00:01:15.500`` -> 75.5 seconds."""
    import argparse

    try:
        parts = [float(part) for part in text.strip().split(":")]
        if len(parts) > 3 or any(part < 0 for part in parts) or any(part >= 60 for part in parts[1:]):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes seconds (75.5) or [HH:]MM:SS.mmm (1:15.5); got {text!r}") from None
    return sum(part * 60 ** power for power, part in enumerate(reversed(parts)))


def parse_rate(text: str) -> int:
    """``--bitrate 8M``, ``8000k`` or ``8000000`` -> bits per second."""
    import argparse

    scale = {"k": 1000, "m": 1000**2, "g": 1000**3}.get(text.strip()[-1:].lower(), 1)
    try:
        return round(float(text.strip()[:-1] if scale > 1 else text) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes bits per second, as 8M, 8000k or 8000000; got {text!r}") from None


def encoder_option_pairs(text: str) -> dict[str, str]:
    """``tune=film,x264-params=aq-mode=3:ref=4`` -> {"tune": "film", "x264-params": "aq-mode=3:ref=4"}."""
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    return {key.strip(): value.strip() for key, value in pairs}


def encoder_option_list(text: str | None) -> str | None:
    if text is None:
        return None
    bad = [item for item in text.split(",") if "=" not in item or not item.split("=", 1)[0].strip()]
    return f"takes KEY=VALUE items separated by commas, got {bad[0]!r}" if bad or not text.strip() else None


def ray_address(value: str | None) -> str | None:
    if value is None or value in ("local", "auto") or value.startswith("ray://") or ":" in value:
        return None
    return f"must be local, auto, ray://HOST:PORT or HOST:PORT, got {value!r}"
