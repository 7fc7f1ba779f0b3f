"""The one precision rule (precision.py) that training, translation and evaluation share."""

from __future__ import annotations

import argparse

import pytest
import torch

from transformer.config import PRECISIONS, DecodeConfig, TrainConfig, choices
from transformer.errors import UserError
from transformer.precision import DTYPES, autocast, resolve_precision

CPU = torch.device("cpu")


def test_one_list_of_values_for_every_command():
    """Training, decoding and the CLI accept the same values; each resolved value has an autocast dtype."""
    from transformer.commands.flags import decoding_args

    assert choices(TrainConfig, "precision") == choices(DecodeConfig, "precision") == PRECISIONS
    parser = argparse.ArgumentParser()
    decoding_args(parser)
    action = next(a for a in parser._actions if a.dest == "precision")
    assert tuple(action.choices) == PRECISIONS
    assert {resolve_precision(p, CPU) for p in PRECISIONS if p != "fp16"} <= set(DTYPES)


@pytest.mark.parametrize("precision, resolved", [("fp32", "fp32"), ("bf16", "bf16"), ("auto", "fp32")])
def test_resolution_on_cpu(precision, resolved):
    assert resolve_precision(precision, CPU) == resolved


@pytest.mark.parametrize(
    "precision, message", [("fp16", "--precision fp16 needs a CUDA device"), ("int8", "unknown --precision 'int8'")]
)
def test_refusals_name_the_setting(precision, message):
    with pytest.raises(UserError, match=message):
        resolve_precision(precision, CPU, setting="--precision")


def test_autocast_runs_a_linear_layer_in_the_resolved_dtype():
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    with autocast("bf16", CPU):
        assert layer(x).dtype == torch.bfloat16
    with autocast("fp32", CPU):
        assert layer(x).dtype == torch.float32
