"""Which tracks a job restores, where ``--faces`` or ``--tracks`` choose: a first pass (see
:meth:`~.runner.Runner.execute`) detects and tracks the whole clip without restoring, since
``largest`` and ``center`` need each track's whole life, and a ``--tracks`` id that does not
exist is an error before anything is restored."""

from __future__ import annotations

from ..errors import UsageError
from ..faces.select import TrackSurvey, describe_tracks
from ..options import RestoreOptions


def choose_tracks(options: RestoreOptions, name: str, survey: TrackSurvey, seconds: float
                  ) -> tuple[frozenset[int], str]:
    """The tracks to restore of those the first pass over ``name`` found in ``seconds``, and a
    line saying so."""
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
                    f"(found by a first pass over the clip, {seconds:.1f} s)")
