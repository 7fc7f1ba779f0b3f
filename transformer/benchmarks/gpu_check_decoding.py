"""The decoding paths of `make gpu-check` (gpu_check.py runs them), on the checkpoint of the decoding model
(gpu_check_runs.py: on a GPU a model that translates, trained there; in the CPU smoke mode the tiny reference):

- decode: greedy and beam 4 under bf16 and fp16 autocast (CPU smoke mode: bf16 only; fp16 is CUDA only) against
  fp32 on the same test sentences: corpus BLEU within `BLEU_MARGIN` of fp32's, and the same tokens on at least
  `SAME_FLOOR` of the sentences. Not the same tokens on 95%: one flipped near-tie changes the rest of a sentence,
  and bf16 keeps 8 bits of mantissa. Measured on a 2-core CPU, bf16 autocast against fp32 on this decoding model
  (trained there, 1,000 updates, BLEU 9.4 greedy and 11.6 beam 4 on the 200 sentences): the same tokens on 81.5%
  and 80% of the sentences, BLEU 9.34 against 9.44 and 11.79 against 11.59. A broken half-precision path (a mask
  overflowing in fp16, a wrong cast) shares almost no sentence and loses its BLEU. The line shows both figures.
- evaluate: `transformer-evaluate` on the device exits 0, writes its scores, and its translations are the
  library's on at least `AGREEMENT` of the sentences (the same fp32 arithmetic in another process);
- export-hf, export-ctranslate2: the checkpoint exported, loaded by Hugging Face / CTranslate2 on the device, and
  their greedy output equal to ours (fp32) on at least `AGREEMENT` of the sentences; skipped with a note when the
  package is not installed. Where CTranslate2 cannot run on this CUDA, it is compared on the CPU and the line says
  why.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import torch

from transformer.benchmarks.gpu_check_runs import (
    CheckFailedError,
    CheckSkippedError,
    Context,
    decoder_run,
    require,
    tail,
)
from transformer.benchmarks.stamps import ROOT, read_json

AGREEMENT = 0.95  # share of sentences with the same tokens, fp32 against fp32 (another process, another engine)
SAME_FLOOR = 0.5  # the same for half precision against fp32 (see above)
BLEU_MARGIN = 1.0  # largest BLEU difference, half precision against fp32
EXPORT_SENTENCES = 40  # test sentences decoded by the exported models: 2 may differ


def agreement(a: list, b: list) -> float:
    """The share of positions where the two lists hold equal items (token lists or texts)."""
    require(len(a) == len(b) and len(a) > 0, f"{len(a)} outputs against {len(b)}")
    return sum(x == y for x, y in zip(a, b)) / len(a)


def _loaded(ctx: Context):
    """(model on the device, tokenizer, config, test sources, references) of the decoding model's checkpoint. TF32 goes
    back off: training turned it on in this process (training/setup.py), and a decoding command starts without it,
    so fp32 here means what it means to transformer-translate."""
    from transformer.checkpoint import build_model, load_checkpoint
    from transformer.data.corpus import load_pairs

    torch.backends.cuda.matmul.allow_tf32 = False
    model, tokenizer, config = build_model(load_checkpoint(_checkpoint(ctx)), ctx.device)
    sources, references = load_pairs(config.data.test, config.data)
    return model, tokenizer, config, sources, references


def _checkpoint(ctx: Context) -> Path:
    return decoder_run(ctx).out_dir / "checkpoint_last.pt"


def _translations(model, tokenizer, decode, device, precision: str, sources: list[str]):
    from transformer.decoding.translator import Translator

    translator = Translator(model, tokenizer, decode, device=device, precision=precision)
    return [results[0] for results in translator.translate(sources)]


def check_decode(ctx: Context) -> str:
    """Greedy and beam 4, each half precision against fp32 on the same checkpoint and sentences."""
    from transformer.evaluation import corpus_scores

    model, tokenizer, config, sources, references = _loaded(ctx)
    bleu = lambda outputs: corpus_scores([t.text for t in outputs], references)["bleu"]  # noqa: E731
    parts, bad = [], []
    for beam in (1, 4):
        decode = dataclasses.replace(config.decode, beam_size=beam, nbest=1)
        full = _translations(model, tokenizer, decode, ctx.device, "fp32", sources)
        for precision in ["bf16", "fp16"] if ctx.device.type == "cuda" else ["bf16"]:
            half = _translations(model, tokenizer, decode, ctx.device, precision, sources)
            same = agreement([t.tokens for t in half], [t.tokens for t in full])
            parts.append(f"{'greedy' if beam == 1 else 'beam 4'} {precision}: same {same:.0%}, BLEU {bleu(half):.2f} "
                         f"(fp32 {bleu(full):.2f})")  # fmt: skip
            if same < SAME_FLOOR or abs(bleu(half) - bleu(full)) > BLEU_MARGIN:
                bad.append(parts[-1])
    require(
        not bad, f"half precision strays from fp32 (floor {SAME_FLOOR:.0%}, BLEU +-{BLEU_MARGIN}): {'; '.join(bad)}"
    )
    note = "" if ctx.device.type == "cuda" else " (CPU smoke: the tiny reference; fp16 autocast is CUDA only)"
    return f"{len(sources)} test sentences against fp32: {'; '.join(parts)}{note}"


def check_evaluate(ctx: Context) -> str:
    """`transformer-evaluate` on the device: exit 0, its scores, and the library's translations line for line."""
    from transformer.decoding.translator import Translator

    folder = ctx.work / "evaluate"
    command = [sys.executable, "-m", "transformer", "evaluate", "--checkpoint", str(_checkpoint(ctx)), "--device",
               ctx.device.type, "--json", str(folder / "scores.json"), "--output", str(folder / "test.hyp"),
               "--quiet", *(["--threads", "1"] if ctx.smoke else [])]  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, cwd=ROOT, env=ctx.env(), capture_output=True, text=True, timeout=ctx.timeout)
    require(done.returncode == 0, f"exit code {done.returncode}: {tail(done.stdout + done.stderr)}")
    scores = read_json(folder / "scores.json") or {}
    require(str(scores.get("device", "")).startswith(ctx.device.type), f"it decoded on {scores.get('device')}")
    model, tokenizer, config, sources, _ = _loaded(ctx)
    library = Translator(model, tokenizer, config.decode, device=ctx.device).translate_texts(sources)
    written = (folder / "test.hyp").read_text(encoding="utf-8").splitlines()
    same = agreement(written, library)
    require(same >= AGREEMENT, f"its translations equal the library's on {same:.0%} of {len(sources)} sentences")
    return (f"BLEU {scores['bleu']:.1f} on {len(sources)} test sentences ({scores['device']}); the library's "
            f"translations on {same:.0%}")  # fmt: skip


def _greedy_rows(tokenizer, sources: list[str]):
    from transformer.benchmarks.decode import DecodeSettings, batches_of

    rows = tokenizer.encode_src(sources[:EXPORT_SENTENCES])
    return rows, batches_of(rows, 8), DecodeSettings(beam=1, alpha=1.0, max_len_a=1.2, max_len_b=10)


def _decode_all(engine, rows, batches, settings) -> list[list[int]]:
    """Outputs in source order from a `decode.build_engine` run function."""
    outputs: list = [None] * len(rows)
    for batch in batches:
        for i, hyp in zip(batch, engine([rows[i] for i in batch], settings)):
            outputs[i] = hyp
    return outputs


def _export_agrees(ctx: Context, fmt: str, name: str, device: str, **options) -> str:
    """Export the checkpoint in `fmt`, load it as engine `name` on `device`, compare its greedy output with ours."""
    import logging

    from transformer.benchmarks.decode import build_engine, ours_engine
    from transformer.decoding.export import export_checkpoint

    export_log = logging.getLogger("transformer.decoding.export")
    level = export_log.level
    export_log.setLevel(logging.ERROR)  # its note on generate's length penalty: the comparison here is greedy
    try:
        folder = export_checkpoint(_checkpoint(ctx), fmt, ctx.work / f"export-{fmt}")
    finally:
        export_log.setLevel(level)
    model, tokenizer, _, sources, _ = _loaded(ctx)
    rows, batches, settings = _greedy_rows(tokenizer, sources)
    threads = torch.get_num_threads()
    theirs = build_engine(name, "fp32", threads, folder, device=device, **options)
    ours = ours_engine(model.to(device))
    same = agreement(_decode_all(theirs, rows, batches, settings), _decode_all(ours, rows, batches, settings))
    require(same >= AGREEMENT, f"greedy output equal to ours on {same:.0%} of {len(rows)} sentences")
    return f"exported, loaded on {device}: greedy output equal to ours (fp32) on {same:.0%} of {len(rows)} sentences"


def check_export_hf(ctx: Context) -> str:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise CheckSkippedError("transformers is not installed: pip install 'transformer[export]'") from None
    return _export_agrees(ctx, "hf", "hf", ctx.device.type)


def check_export_ctranslate2(ctx: Context) -> str:
    try:
        import ctranslate2
    except ImportError:
        raise CheckSkippedError("ctranslate2 is not installed: pip install 'transformer[export]'") from None
    _, tokenizer, _, _, _ = _loaded(ctx)
    pieces = dict(src_pieces=[tokenizer.src_piece(i) for i in range(tokenizer.src_vocab_size)],
                  tgt_pieces=[tokenizer.tgt_piece(i) for i in range(tokenizer.tgt_vocab_size)],
                  suppress=True)  # fmt: skip
    if ctx.device.type != "cuda":
        return _export_agrees(ctx, "ctranslate2", "ctranslate2", "cpu", **pieces)
    try:
        if ctranslate2.get_cuda_device_count() < 1:
            raise RuntimeError("CTranslate2 sees no CUDA device")
        return _export_agrees(ctx, "ctranslate2", "ctranslate2", "cuda", **pieces)
    except CheckFailedError:
        raise
    except Exception as exc:  # its CUDA libraries missing or another CUDA version: say so, check on the CPU
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        detail = _export_agrees(ctx, "ctranslate2", "ctranslate2", "cpu", **pieces)
        return f"{detail}; CTranslate2 cannot run on this CUDA ({reason})"
