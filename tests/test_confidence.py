"""The confidence (decoding/confidence.py): each feature against values worked out by hand, the translator's
confidences against the model's teacher-forced log-probabilities and a hand-written map, the logistic fit against
a dataset whose answer is known, and the calibration's round trip through a weights_only load."""

from __future__ import annotations

import math

import pytest
import tiny_checkpoint
import torch

from transformer.checkpoint import load_for_inference
from transformer.decoding.confidence import FEATURES, Calibration, LineFeatures, confidences, fit_logistic
from transformer.decoding.scoring import score_ids
from transformer.decoding.streaming import StreamingEngine
from transformer.training.calibration import spearman

PIECES = ["<pad>", "<unk>", "<s>", "</s>", "\u2581casa", "s", "\u2581", "<0x31>", "\u2581de", "la"]


class Pieces:
    """A tokenizer's piece table, and nothing else: what `LineFeatures` reads."""

    def __init__(self, joint: bool = True, target: list[str] | None = None) -> None:
        self.joint, self.src_vocab_size = joint, len(PIECES)
        self.target = target or PIECES

    def src_piece(self, i: int) -> str:
        return PIECES[i]

    def tgt_piece(self, i: int) -> str:
        return self.target[i]


def test_features_worked_out_by_hand():
    # source: ▁casa s ▁ <unk> <0x31> ▁de </s>: 6 pieces, of which s, ▁, <unk>, <0x31> are short (one character or
    # none, unknown, a byte): 4/6. Output ▁casa la ▁de: 3 pieces + EOS, log P -2.0; ▁casa and ▁de are in the source.
    row = LineFeatures(Pieces()).row([4, 5, 6, 1, 7, 8, 3], [4, 9, 8], -2.0)
    assert row == pytest.approx([-2.0 / 4, abs(math.log(4 / 7)), 4 / 6, 2 / 3])
    assert LineFeatures(Pieces()).row([4, 3], [], -math.inf) == pytest.approx([-30.0, abs(math.log(1 / 2)), 0.0, 0.0])


def test_copied_pieces_compare_strings_with_two_vocabularies():
    target = ["<pad>", "<unk>", "<s>", "</s>", "la", "\u2581casa", "x", "y", "z", "\u2581de"]  # other ids, same pieces
    row = LineFeatures(Pieces(joint=False, target=target)).row([4, 8, 3], [5, 9, 6], -1.0)
    assert row[FEATURES.index("copied_share")] == pytest.approx(2 / 3)  # ▁casa, ▁de; x is not in the source


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model, tokenizer, config = load_for_inference(tiny_checkpoint.build(tmp_path_factory.mktemp("tiny"))["checkpoint"])
    with torch.no_grad():  # EOS likelier still, so that most hypotheses end before the length limit
        model.decoder.embedding.weight[3] *= 4
    return model, tokenizer, config.replace("decode", max_len_b=MAX_LEN)


MAX_LEN = 12  # output pieces at most: a hypothesis shorter than this finished with EOS
LINES = ["the red cat sat", "", "a small house and then home", "dog", "the the the the", "old new big", "mat"]


def _by_hand(tokenizer, model, line: str, tokens: list[int]) -> list[float]:
    """The four features from the pieces' strings and the model's teacher-forced log P (EOS included)."""
    source = tokenizer.encode_src([line])[0]
    pieces = [tokenizer.src_piece(i) for i in source[:-1]]
    (scored,) = score_ids(model, [source], [tokens], max_tokens=1000, device=torch.device("cpu"), precision="fp32")
    short = sum(1 for p in pieces if len(p.lstrip("\u2581")) <= 1 or p == "<unk>") / len(pieces)
    copied = sum(1 for t in tokens if tokenizer.tgt_piece(t) in pieces) / len(tokens) if tokens else 0.0
    return [scored.log_prob / (len(tokens) + 1), abs(math.log((len(tokens) + 1) / len(source))), short, copied]


def test_the_translators_confidence_is_its_features_through_the_map(tiny):
    model, tokenizer, config = tiny
    uncalibrated = list(StreamingEngine(model, tokenizer, config.decode).translate(LINES))
    weight = torch.tensor([1.0, -1.0, -2.0, -3.0], dtype=torch.float64)
    mean, std = torch.tensor([-1.0, 0.0, 0.5, 0.5], dtype=torch.float64), torch.full((4,), 2.0, dtype=torch.float64)
    calibration = Calibration(mean, std, weight, 0.5, threshold=0.3)
    calibrated = list(StreamingEngine(model, tokenizer, config.decode, calibration=calibration).translate(LINES))
    compared = 0
    for line, [plain], [mapped] in zip(LINES, uncalibrated, calibrated):
        assert plain.text == mapped.text and 0 <= plain.confidence <= 1 and 0 <= mapped.confidence <= 1
        if not line:
            assert plain.confidence == mapped.confidence == 1.0
            continue
        if len(plain.tokens) == MAX_LEN:
            continue  # cut at the limit: the search's log P has no EOS term, teacher forcing's has
        compared += 1
        x = _by_hand(tokenizer, model, line, plain.tokens)
        assert plain.confidence == pytest.approx(math.exp(x[0]), rel=1e-4)  # the geometric mean token probability
        z = sum(w * (v - m) / 2.0 for w, v, m in zip(weight.tolist(), x, mean.tolist())) + 0.5
        assert mapped.confidence == pytest.approx(1 / (1 + math.exp(-z)), rel=1e-4)
    assert compared >= 3


def test_confidences_without_a_calibration_are_the_geometric_mean_probability():
    assert confidences([[-0.5, 0.1, 0.0, 0.0], [-2.0, 1.0, 1.0, 1.0]], None) == pytest.approx(
        [math.exp(-0.5), math.exp(-2.0)]
    )
    assert confidences([], None) == []


def test_the_fit_recovers_a_known_logistic_map():
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)[:, None]  # (61, 1)
    y = torch.sigmoid(2 * x[:, 0] - 1)  # the targets lie on sigmoid(2x - 1): the fit's minimum is exactly there
    mean, std, weight, bias = fit_logistic(x, y, ridge=0.0)
    assert float(weight[0] / std[0]) == pytest.approx(2.0, abs=1e-6)  # back in x's units
    assert bias - float(weight[0] * mean[0] / std[0]) == pytest.approx(-1.0, abs=1e-6)


def test_the_fit_is_monotone_in_0_1_and_right_on_average():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(400, 2, generator=g, dtype=torch.float64) * 10  # (400, 2): the first drives y, the second noise
    y = (x[:, 0] / 10 + 0.1 * torch.randn(400, generator=g, dtype=torch.float64)).clamp(0, 1)  # (400,)
    mean, std, weight, bias = fit_logistic(x, y, ridge=0.0)
    calibration = Calibration(mean, std, weight, bias, threshold=0.5)
    grid = torch.stack([torch.linspace(-5, 15, 101, dtype=torch.float64), torch.full((101,), 5.0)], dim=1)
    mapped = calibration(grid)  # (101,)
    assert bool((mapped[1:] > mapped[:-1]).all()) and bool(((mapped > 0) & (mapped < 1)).all())
    assert float(calibration(x).mean()) == pytest.approx(float(y.mean()), abs=1e-8)  # the intercept's equation
    assert abs(float(weight[1])) < 0.2 * float(weight[0])
    assert fit_logistic(x, y)[2].tolist() == fit_logistic(x, y)[2].tolist()  # deterministic


def test_the_calibration_survives_a_weights_only_load(tmp_path):
    calibration = Calibration(
        torch.tensor([-1.0, 0.2, 0.3, 0.1]), torch.ones(4), torch.tensor([1.5, -0.7, -0.4, -0.3]), -0.2, 0.14, "test"
    )
    torch.save({"confidence": calibration.to_state()}, tmp_path / "c.pt")
    state = torch.load(tmp_path / "c.pt", weights_only=True)["confidence"]
    back = Calibration.from_state(state)
    rows = [[-0.5, 0.1, 0.2, 0.0], [-3.0, 1.0, 0.9, 0.8]]
    assert back is not None and back.threshold == 0.14 and back.about == "test"
    assert confidences(rows, back) == confidences(rows, calibration)
    assert Calibration.from_state(None) is None
    assert Calibration.from_state({**state, "features": ["mean_log_prob"]}) is None  # another version's features


def test_spearman_against_worked_examples():
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(1 - 6 * 2 / (4 * 15))  # no ties: 1 - 6 sum d^2 / ...
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(1.5 / math.sqrt(1.5 * 2))  # tied ranks 0.5, 0.5, 2
    assert spearman([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0
