"""What a job did, as its caller and the user see it: frames, faces, time, where the start-up
went, the warnings, and the closing report the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..faces.select import TrackSurvey
from .flicker import FLICKER_LIMIT, TrackFlicker
from .runtime import MILESTONES


@dataclass
class Summary:
    """One job's outcome; :meth:`describe` is the report printed after it."""

    output: Path
    frames: int
    faces: int
    frames_with_faces: int
    seconds: float
    busy: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    damaged: int = 0  # input frames decoded with errors or repeated in place of undecodable ones
    resumed_at: int = 0  # the first frame this run encoded (--resume)
    truncated: str = ""  # why the input ended early (--allow-truncated), or ""
    #: Seconds the engine's start took in this job (weights, workers: building and compiling), if it started here.
    startup: dict[str, float] = field(default_factory=dict)
    #: time.perf_counter() when the job started and when its first picture left each stage (runtime.MILESTONES).
    milestones: dict[str, float] = field(default_factory=dict)
    choice: str = ""  # which tracks were restored, where --faces or --tracks chose
    chosen: list[int] | None = None  # their ids (None: every face)
    tracks_found: TrackSurvey | None = None  # --detect-only: the tracks found (nothing restored)
    panels: int | None = None  # --preview: the sheet's frames (``frames`` then counts the frames decoded)
    decoder: str = ""  # which decoder ran (a video's), and why the CPU where NVDEC was allowed
    flicker: dict[int, TrackFlicker] | None = None  # --qc: each restored track's figures

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    def first_picture(self) -> dict[str, float]:
        """Seconds from the job's start to each stage its first picture left, in the pipeline's order."""
        begun = self.milestones["started"]
        return {m: self.milestones[m] - begun for m in MILESTONES[1:] if m in self.milestones}

    def describe(self, started: float | None = None, verbose: bool = False) -> str:
        """The closing report: frames, faces, time, the tracks chosen and the warnings; with
        ``verbose`` also the decoder, where the start-up went (the first frame's time counted from
        ``started``, a ``time.perf_counter()``) and each stage's busy share of the wall time."""
        if self.panels is not None:
            lines = [f"{self.output}: {self.panels} frames from {self.frames} decoded, {self.faces} faces restored, "
                     f"{self.seconds:.1f} s"]
        elif self.tracks_found is not None:
            lines = [f"{self.output}: {self.frames} frames, {self.tracks_found.faces} faces found in "
                     f"{len(self.tracks_found.frames)} tracks, {self.seconds:.1f} s ({self.fps:.1f} fps)"]
        else:
            lines = [f"{self.output}: {self.frames} frames, {self.faces} faces restored on {self.frames_with_faces} "
                     f"frames, {self.seconds:.1f} s ({self.fps:.1f} fps)"]
        if self.decoder and verbose:
            lines.append(self.decoder)
        if self.choice:
            lines.append(self.choice)
        if verbose and started is not None and "written" in self.milestones and self.tracks_found is None:
            parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.startup.items())
            lines.append(f"first frame written {self.milestones['written'] - started:.1f} s after the start"
                         + (f" (of which {parts})" if parts else ""))
            stages = ", ".join(f"{m} {seconds:.2f} s" for m, seconds in self.first_picture().items())
            lines.append(f"the job's first picture: {stages} into the job")
        if self.flicker is not None:
            lines += self._flicker_lines()
        if self.resumed_at:
            lines.append(f"resumed at frame {self.resumed_at}: the frames before it came from the work directory")
        if self.truncated:
            lines.append(f"warning: {self.truncated}; every frame that decodes was restored")
        if self.damaged:
            lines.append(f"warning: {self.damaged} frame(s) of the input were damaged: decoded with errors, "
                         f"or the previous frame repeated where one could not be decoded")
        if self.busy and verbose:
            busy = ", ".join(f"{k} {v / self.seconds:.0%}" for k, v in sorted(self.busy.items()))
            lines.append(f"stage busy time: {busy}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def _flicker_lines(self) -> list[str]:
        """--qc's figures, and the tracks whose restored face changes over FLICKER_LIMIT times as
        much as the input between frames, for an editor to check."""
        if not self.flicker:
            return ["flicker: no track had its face restored on two frames in a row to measure"]
        figures = ", ".join(f"track {track} {f.ratio:.2f}" for track, f in sorted(self.flicker.items()))
        lines = [f"flicker, the output's change between frames over the input's (1.0: none added): {figures}"]
        lines += [f"check track {track} ({f.first:.2f}-{f.last:.2f} s): its restored face changes "
                  f"{f.ratio:.1f} times as much as the input from frame to frame"
                  for track, f in sorted(self.flicker.items()) if f.ratio > FLICKER_LIMIT]
        return lines
