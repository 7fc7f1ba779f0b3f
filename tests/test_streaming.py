"""StreamingEngine: one result per line in order (empty, whitespace-only and over-long lines), batching, streaming."""

from __future__ import annotations

import logging

import pytest
import tiny_checkpoint
import torch

from transformer.checkpoint import load_for_inference
from transformer.decoding import streaming as streaming
from transformer.decoding.streaming import StreamingEngine
from transformer.devices import pick_device
from transformer.errors import UserError

LONG = " ".join(["cat dog house"] * 20)  # far more than MAX_POSITIONS source tokens


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    paths = tiny_checkpoint.build(tmp_path_factory.mktemp("tiny"))
    model, tokenizer, config = load_for_inference(paths["checkpoint"])
    return model, tokenizer, config, paths["src"].read_text(encoding="utf-8").splitlines()


def test_one_result_per_line_in_order(loaded, caplog):
    model, tokenizer, config, lines = loaded
    inputs = [lines[0], "", "   \t ", lines[1], LONG, lines[2]]
    alone = [StreamingEngine(model, tokenizer, config.decode).translate_texts([line])[0] for line in inputs]
    small_batches = config.replace("decode", max_tokens=10).decode  # several length-sorted batches per chunk
    with caplog.at_level(logging.WARNING):
        results = list(StreamingEngine(model, tokenizer, small_batches).translate(inputs, chunk_lines=4))
    assert [r[0].text for r in results] == alone
    assert results[1][0].text == results[2][0].text == "" and results[1][0].score == 0.0
    assert all(r[0].text for i, r in enumerate(results) if i not in (1, 2)), "real lines get real output"
    assert "line 5: " in caplog.text and "truncated to 24" in caplog.text


def test_a_line_in_capitals_is_translated_folded_and_upper_cased(loaded):
    """With decode.fold_capitals (the default) a line in ALL CAPS gives its sentence-cased translation, n-best and
    alignments included, upper-cased; other lines, in the same chunks, are translated as they are; off: as it is."""
    model, tokenizer, config, lines = loaded
    plain = StreamingEngine(model, tokenizer, config.replace("decode", beam_size=2, nbest=2).decode)
    capitals = [line.upper() for line in lines[:3]]
    folded = [line[:1].upper() + line[1:].lower() for line in capitals]  # sentence case: the lines start with a letter
    inputs = [capitals[0], lines[3], capitals[1], capitals[2], lines[4]]
    expected = list(plain.translate([folded[0], lines[3], folded[1], folded[2], lines[4]], alignment=True))
    results = list(plain.translate(inputs, chunk_lines=2, alignment=True))
    for i, (got, want) in enumerate(zip(results, expected)):
        case = str.upper if i in (0, 2, 3) else str
        assert [(t.text, t.tokens, t.alignment) for t in got] == [(case(t.text), t.tokens, t.alignment) for t in want]
    off = StreamingEngine(model, tokenizer, config.replace("decode", beam_size=2, fold_capitals=False).decode)
    assert off.translate_texts(capitals) != [results[i][0].text for i in (0, 2, 3)]  # the capitals themselves


def test_truncated_line_keeps_eos_last(loaded):
    model, tokenizer, config, _ = loaded
    ids = streaming.truncate_source(tokenizer.encode_src([LONG])[0], model.max_positions, 1)
    assert len(ids) == model.max_positions and ids[-1] == 3


def test_translate_streams(loaded):
    """The first result arrives after reading one chunk, not the whole input."""
    model, tokenizer, config, lines = loaded
    consumed = []

    def source():
        for line in lines:
            consumed.append(line)
            yield line

    results = StreamingEngine(model, tokenizer, config.decode).translate(source(), chunk_lines=3)
    next(results)
    assert len(consumed) == 3
    assert len(list(results)) == len(lines) - 1


def test_nbest_sorted(loaded):
    model, tokenizer, config, lines = loaded
    decode = config.replace("decode", beam_size=3, nbest=3).decode
    for results in StreamingEngine(model, tokenizer, decode).translate(lines[:3]):
        assert len(results) == 3
        assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)


@pytest.mark.parametrize(
    "precision, dtype", [("fp32", torch.float32), ("auto", torch.float32), ("bf16", torch.bfloat16)]
)
def test_precision_follows_the_one_rule_on_cpu(loaded, precision, dtype):
    """bf16 on the CPU runs under bf16 autocast (as training does), not silently fp32: seen in the output layer."""
    model, tokenizer, config, lines = loaded
    seen = []
    decode = config.replace("decode", precision=precision).decode
    translator = StreamingEngine(model, tokenizer, decode)  # its model: fp32 on the CPU has packed Linear layers
    hook = translator.model.output_proj.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    try:
        assert translator.translate_texts(lines[:1])[0]
    finally:
        hook.remove()
    assert set(seen) == {dtype}
    with pytest.raises(UserError, match="fp16 needs a CUDA device"):
        StreamingEngine(model, tokenizer, decode, precision="fp16")


def test_device_choices():
    cpu = torch.device("cpu")
    assert pick_device("cpu") == cpu
    if not torch.cuda.is_available():
        assert pick_device(None) == cpu
        with pytest.raises(UserError, match="CUDA is not available"):
            pick_device("cuda")


@pytest.mark.gpu
def test_bf16_on_cuda_matches_fp32_mostly(loaded):
    model, tokenizer, config, lines = loaded
    try:
        fp32 = StreamingEngine(model, tokenizer, config.decode, device="cuda").translate_texts(lines)
        bf16 = StreamingEngine(model, tokenizer, config.decode, device="cuda", precision="bf16").translate_texts(lines)
    finally:
        model.cpu()
    assert len(bf16) == len(fp32) and sum(a == b for a, b in zip(fp32, bf16)) >= len(lines) // 2
