"""Shared fixtures: a tiny model whose dimensions all differ, so a swapped axis fails instead of broadcasting."""

from __future__ import annotations

import pytest
import torch
from bad_inputs import world  # noqa: F401 (a fixture: the inputs of tests/test_bad_inputs.py and test_real_faults.py)

from transformer.config import ModelConfig
from transformer.model.transformer import Transformer

# Tiny models run fastest on one thread, and two OpenMP pools spinning on a 2-core machine (pytest beside a
# subprocess, or beside a training run) slow each other down a hundredfold.
torch.set_num_threads(1)

TINY = dict(d_model=16, n_heads=2, d_ff=24, n_encoder_layers=2, n_decoder_layers=3, dropout=0.0, max_positions=64)
VOCAB = 23
PAD, BOS, EOS = 0, 2, 3


def tiny_model(*, src_vocab_size: int = VOCAB, tgt_vocab_size: int = VOCAB, **overrides) -> Transformer:
    """ModelConfig's defaults (config/sections.py) with the tiny dimensions above and `overrides`."""
    torch.manual_seed(0)
    config = ModelConfig(**{**TINY, **overrides})
    vocab = dict(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
    return Transformer.from_config(config, **vocab, pad_id=PAD).eval()


def random_tokens(batch: int, length: int, vocab: int = 23, seed: int = 0) -> torch.Tensor:
    """(batch, length) ids in [4, vocab): never pad, bos or eos."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (batch, length), generator=generator)


@pytest.fixture(autouse=True)
def _one_thread():
    """Every test starts on one thread, whatever the last one left: CTranslate2's OpenMP runtime raises torch's
    thread count in this process, and in-process runs are compared bit for bit with subprocess runs on one thread
    (a different thread count splits the sums differently)."""
    yield
    torch.set_num_threads(1)


@pytest.fixture
def model() -> Transformer:
    return tiny_model()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu"):  # the marker, not any keyword: a checkout in a folder named gpu runs
            item.add_marker(skip)
