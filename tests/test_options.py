"""The options object is the one place options live: every flag is a field and every field a flag,
the API takes the same names, and the --resume fingerprint follows every field."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import typing
from pathlib import Path

import pytest

from gpen_video import api, cli, flags
from gpen_video.errors import UsageError
from gpen_video.options import BatchOptions, JobOptions, RestoreOptions, flag_of, value_type

#: Options the command line has for itself: they change how it reports, not what is done.
CLI_ONLY = {"-h", "--help", "--version", "--quiet", "--verbose", "--debug", "--report", "--fetch-weights", "--settings"}
OWNERS = (RestoreOptions, JobOptions, BatchOptions)
#: Options that only work with another, and the value the other gets in the tests.
NEEDS = {"ray_actors": {"ray": "local"}}


def _other_value(owner: type, spec: dataclasses.Field):
    """A valid value of the field other than its default, and how to write it on the command line."""
    default, kind = spec.default, value_type(owner, spec)
    choices = spec.metadata["choices"]
    if kind is bool:
        return not default, []
    if choices:
        value = next(c for c in choices if c != default)
    elif typing.get_origin(kind) is tuple:
        value = (1, 2)
        return value, ["1,2"]
    elif kind is Path:
        value = Path("some/file")
    elif spec.name in ("bitrate", "maxrate"):
        value = 2_000_000
    elif kind is int:
        value = (default or 0) + 2
    elif kind is float:
        value = default - 0.25 if default and default >= 0.5 else (default or 0) + 0.25
    else:
        value = {"codec": "libx265", "name": "{stem}_gpen.{ext}", "ray": "local",
                 "encoder_options": "tune=film"}.get(spec.name, "x")
    return value, [str(value)]


@pytest.mark.parametrize("owner", OWNERS, ids=lambda o: o.__name__)
def test_every_field_is_a_flag_that_sets_it_and_nothing_else(owner):
    for spec in dataclasses.fields(owner):
        value, words = _other_value(owner, spec)
        needed = NEEDS.get(spec.name, {})  # the option it only works with, set too
        extra = [w for name, v in needed.items() for w in (f"--{name.replace('_', '-')}", v)]
        args = cli.build_parser().parse_args(["in.mp4", "out.mp4", flag_of(spec), *words, *extra])
        options = dict(zip(OWNERS, flags.options_of(args)))
        assert getattr(options[owner], spec.name) == value, spec.name
        assert options[owner] == dataclasses.replace(owner(), **{spec.name: value, **needed}), spec.name
        for other in OWNERS:
            if other is not owner:
                assert options[other] == other(), spec.name


def test_every_flag_is_a_field():
    flags = {s for a in cli.build_parser()._actions for s in a.option_strings}
    fields = {flag_of(spec) for owner in OWNERS for spec in dataclasses.fields(owner)}
    assert flags - CLI_ONLY == fields


def _keywords(function) -> set[str]:
    return {name for name, p in inspect.signature(function).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY} - {"progress"}


def test_the_api_takes_every_field_by_its_name():
    # --detect-only and --preview are functions of their own in the API: find_faces and preview.
    job_fields = {spec.name for spec in dataclasses.fields(JobOptions)} - {"detect_only", "preview"}
    assert _keywords(api.restore_video) == job_fields
    assert _keywords(api.restore_many) == job_fields | {spec.name for spec in dataclasses.fields(BatchOptions)}
    assert _keywords(api.find_faces) == {"tracks_out"}
    assert _keywords(api.preview) == {"overwrite"}
    for spec in dataclasses.fields(RestoreOptions):
        value, _ = _other_value(RestoreOptions, spec)
        assert getattr(api._options(None, {spec.name: value}), spec.name) == value
    with pytest.raises(UsageError, match="unknown option 'threshhold'"):
        api._options(None, {"threshhold": 0.5})


def test_changing_any_option_changes_the_resume_fingerprint():
    base = RestoreOptions().fingerprint()
    for spec in dataclasses.fields(RestoreOptions):
        value, _ = _other_value(RestoreOptions, spec)
        changed = dataclasses.replace(RestoreOptions(), **{spec.name: value}).fingerprint()
        assert changed != base, spec.name
        assert [k for k in base if base[k] != changed[k]] == [spec.name]


@pytest.mark.parametrize(("changes", "message"), [
    ({"batch_size": 0}, "--batch-size must be a positive integer, got 0"),
    ({"strength": 1.5}, r"--strength must be in \[0, 1\], got 1.5"),
    ({"threshold": 0.0}, r"--threshold must be in \(0, 1\], got 0.0"),
    ({"detector": "yolo"}, "--detector must be one of retinaface-r50, retinaface-mobile, got 'yolo'"),
    ({"max_faces": 0}, "--max-faces must be a positive integer, got 0"),
    ({"encoder_threads": -1}, "--encoder-threads must be at least 0, got -1"),
    ({"smooth": -1.0}, "--smooth must be at least 0, got -1.0"),
])
def test_a_bad_value_is_refused_with_its_flag(changes, message):
    with pytest.raises(UsageError, match=f"^{message}$"):
        RestoreOptions(**changes)


def test_options_are_frozen_and_picklable():
    options = RestoreOptions(gpus=[0, 1], strength=0.5)  # a list, as API users write it
    assert options.gpus == (0, 1)
    assert pickle.loads(pickle.dumps(options)) == options
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.strength = 1.0  # type: ignore[misc]
    with pytest.raises(UsageError, match="--tracks-out cannot be combined with --resume"):
        JobOptions(resume=True, tracks_out=Path("t.json"))


def test_the_readme_lists_every_flag():
    """The README's options table is where users look first: every flag has its row."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows = {line.split("|")[1].strip() for line in readme.splitlines() if line.startswith("| `--")}
    flags = {f for action in cli.build_parser()._actions for f in action.option_strings if f.startswith("--")}
    missing = [f for f in sorted(flags - {"--help"}) if not any(row.startswith((f"`{f}`", f"`{f} ")) for row in rows)]
    assert missing == []
