"""The confidence's calibration (training/calibration.py): the synthetic inputs, the fit on a tiny model's
translations against sentence chrF, the threshold as the validation lines' 5% quantile, and a calibrated checkpoint
written, read back with weights_only and used by the Python API."""

from __future__ import annotations

import pytest
import tiny_checkpoint
import torch

from transformer import Translator as ApiTranslator
from transformer.checkpoint import build_model, load_checkpoint, save_checkpoint
from transformer.config import from_dict
from transformer.decoding.confidence import Calibration
from transformer.decoding.streaming import StreamingEngine
from transformer.training.calibration import (
    FLAGGED_SHARE,
    KINDS,
    calibrate,
    calibrate_state,
    feature_rows,
    not_source_inputs,
)


def test_the_synthetic_inputs_are_seeded_and_of_their_kinds():
    sources, references = ["la casa roja", "el perro"], ["the red house", "the dog"]
    made = not_source_inputs(sources, references)
    assert made == not_source_inputs(sources, references) != not_source_inputs(sources, references, seed=2)
    assert list(made) == list(KINDS)
    assert [sorted(s) for s in made["shuffled"]] == [sorted(s) for s in sources] and made["shuffled"] != sources
    assert made["target_language"] == references
    assert all(d and set(d) <= set("0123456789 ") and d.strip() == d for d in made["digits"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    paths = tiny_checkpoint.build(folder)
    sources, references = tiny_checkpoint.sentences(30, seed=3), tiny_checkpoint.sentences(30, seed=4)
    (folder / "valid.src").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (folder / "valid.ref").write_text("\n".join(references) + "\n", encoding="utf-8")
    return paths["checkpoint"], folder, sources, references


def test_the_fit_maps_into_0_1_and_its_threshold_flags_5_percent_of_the_validation_lines(tiny):
    checkpoint, _, sources, references = tiny
    model, tokenizer, config = build_model(load_checkpoint(checkpoint))
    translator = StreamingEngine(model, tokenizer, config.decode)
    calibration = calibrate(translator, ["", *sources], ["", *references], lines=20, negatives=8)
    texts, rows = feature_rows(translator, sources[:20])  # the empty pair is left out; the first 20 others fitted
    x = torch.tensor(rows, dtype=torch.float64)
    real = calibration(x)
    assert bool(((real >= 0) & (real <= 1)).all())
    assert calibration.threshold == pytest.approx(float(torch.quantile(real, FLAGGED_SHARE)))
    assert "20 validation lines" in calibration.about and f"{3 * 8} inputs" in calibration.about
    again = calibrate(translator, sources, references, lines=20, negatives=8)  # the same fit: deterministic
    assert len(texts) == 20 and str(again.to_state()) == str(calibration.to_state())


def test_calibration_round_trips_through_a_weights_only_checkpoint(tiny, tmp_path):
    checkpoint, folder, _, _ = tiny
    state = load_checkpoint(checkpoint)
    valid = {"src": str(folder / "valid.src"), "tgt": str(folder / "valid.ref")}
    config = from_dict({**state["config"], "data": {**state["config"]["data"], "valid": valid}})
    save_checkpoint(calibrate_state(state, config, lines=30), tmp_path / "calibrated.pt")
    stored = torch.load(tmp_path / "calibrated.pt", weights_only=True)["confidence"]
    calibration = Calibration.from_state(stored)
    assert calibration is not None and set(stored) >= {"mean", "std", "weight", "bias", "threshold"}
    calibrated, plain = (
        ApiTranslator.from_checkpoint(tmp_path / "calibrated.pt"),
        ApiTranslator.from_checkpoint(checkpoint),
    )
    assert (
        calibrated.confidence_threshold == pytest.approx(calibration.threshold) and plain.confidence_threshold is None
    )
    lines = tiny_checkpoint.sentences(5, seed=9)
    got = [hyps[0] for hyps in calibrated.translate(lines, nbest=1)]
    old = [hyps[0] for hyps in plain.translate(lines, nbest=1)]
    assert [t.text for t in got] == [t.text for t in old]  # the calibration changes the confidence, not the output
    model, tokenizer, _ = build_model(state)
    _, rows = feature_rows(StreamingEngine(model, tokenizer, config.decode), lines)
    assert [t.confidence for t in got] == pytest.approx(calibration(torch.tensor(rows)).tolist())
    assert stored["about"].startswith("fitted on 30 validation lines")
