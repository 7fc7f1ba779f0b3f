"""typecheck.build / coerce on a small dataclass of their own: each annotation kind accepts what YAML gives for it
and names a wrong value by its dotted path (the shipped configs' fields are covered in test_config.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from transformer.errors import ConfigError
from transformer.typecheck import build, coerce


@dataclass(frozen=True, kw_only=True)
class Inner:
    rate: float = 1.0
    kind: Literal["a", "b"] = "a"


@dataclass(frozen=True, kw_only=True)
class Outer:
    inner: Inner = field(default_factory=Inner)
    pair: tuple[int, int] = (0, 1)
    names: list[str] | None = None
    either: int | str = 0


def test_build_converts_only_losslessly():
    built = build(Outer, {"inner": {"rate": 2, "kind": "b"}, "pair": [3, 4], "names": ["x"], "either": "y"}, "")
    assert built == Outer(inner=Inner(rate=2.0, kind="b"), pair=(3, 4), names=["x"], either="y")
    assert isinstance(built.inner.rate, float) and isinstance(built.pair, tuple)
    assert coerce("5e-4", float, "rate") == 5e-4  # PyYAML reads 5e-4 (no dot) as a string
    assert coerce(None, int | None, "n") is None


@pytest.mark.parametrize(
    "values, message",
    [
        ({"inner": {"rat": 1}}, "unknown config key 'inner.rat' (did you mean 'rate'?); valid keys: rate, kind"),
        ({"inner": {"rate": True}}, "inner.rate must be a number, got True"),
        ({"inner": {"kind": "c"}}, "inner.kind must be one of 'a', 'b', got 'c'"),
        ({"pair": [1]}, "pair must be a list of 2 values, got [1]"),
        ({"pair": [1, "2"]}, "pair[1] must be an integer, got '2'"),
        ({"names": "x"}, "names must be a list, got 'x'"),  # Optional[X]: X's own message
        ({"either": 1.5}, "either must be int | str, got 1.5"),
        ({"inner": 3}, "inner must be a mapping, got 3"),
    ],
)
def test_wrong_values_are_named(values, message):
    with pytest.raises(ConfigError) as info:
        build(Outer, values, "")
    assert str(info.value) == message
