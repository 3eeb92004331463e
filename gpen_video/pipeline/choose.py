"""Which tracks a job restores, where ``--faces`` or ``--tracks`` choose: a first pass detects
and tracks the whole clip without restoring, since ``largest`` and ``center`` need each track's
whole life, and a ``--tracks`` id that does not exist is an error before anything is restored."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..faces.select import TrackSurvey, describe_tracks
from .batching import Pictures
from .interfaces import FrameSource, NoOutput
from .runner import FrameCallback, Pass, Runner


def choose_tracks(runner: Runner, name: str, source: FrameSource, pictures: Pictures,
                  on_frame: FrameCallback | None, keep_times: tuple[float, ...] = ()
                  ) -> tuple[frozenset[int] | None, str, TrackSurvey | None]:
    """The tracks to restore (None: every face), a line saying so, and the survey that found
    them (which keeps the frames at ``keep_times``). Without a choice in the options, no pass."""
    options = runner.options
    if not options.selects:
        return None, "", None
    survey = TrackSurvey(options.faces, pictures.height, pictures.width, keep_times)
    quiet = (lambda frames, faces: None) if on_frame is not None else None  # a batch's bar counts the render
    result = runner.run(Pass(source, NoOutput(Path(name)), pictures, (survey,), restore=False), quiet)
    if options.tracks is None:
        chosen = survey.chosen()
    else:
        missing = [t for t in options.tracks if t not in survey.frames]
        if missing:
            where = " between --start and --end" if options.time_range is not None else ""
            raise UsageError(f"--tracks {missing[0]}: {name} has no such track{where} (its tracks: "
                             f"{describe_tracks(survey.frames)}; --detect-only --tracks-out lists them)")
        chosen = frozenset(options.tracks)
    return chosen, (f"tracks restored: {describe_tracks(chosen)} of {describe_tracks(survey.frames)} "
                    f"(found by a first pass over the clip, {result.seconds:.1f} s)"), survey
