"""What a checkpoint holds, told from its keys: a file given to the wrong option is named for
what it is, with the option that takes it, instead of failing on a missing key."""

from __future__ import annotations

from collections.abc import Iterable

#: (a key only that kind has, what it is, the option that takes it)
KINDS = (("generator.style.1.weight", "a GPEN generator", "--weights"),
         ("body.stage1.0.0.weight", "the retinaface-mobile detector",
          "--detector retinaface-mobile --detector-weights"),
         ("body.conv1.weight", "the retinaface-r50 detector", "--detector retinaface-r50 --detector-weights"),
         ("out_mask_conv.conv2d.weight", "a ParseNet face parser", "--parse-weights"))


def misplaced(keys: Iterable[str], wanted: str) -> str:
    """Where ``keys`` (a state dict's, any ``module.`` prefix dropped) are another kind's than
    ``wanted`` (KINDS' middle column), the words for it ("it is ..., which --... takes"); else ""."""
    names = {key.removeprefix("module.") for key in keys}
    for marker, what, option in KINDS:
        if marker in names and what != wanted:
            return f"it is {what}, which {option} takes"
    return ""


def key_mismatch(expected: Iterable[str], keys: Iterable[str]) -> str:
    """How a state dict's ``keys`` differ from a network's ``expected`` ones, in a few words."""
    expected, keys = list(expected), {key.removeprefix("module.") for key in keys}
    missing = [k for k in expected if k not in keys]
    unexpected = sorted(keys - set(expected))
    parts = [f"{len(missing)} of its {len(expected)} keys missing ({missing[0]!r} first)"] if missing else []
    parts += [f"{len(unexpected)} keys it does not have ({unexpected[0]!r} first)"] if unexpected else []
    return "; ".join(parts) or "tensors of other shapes"
