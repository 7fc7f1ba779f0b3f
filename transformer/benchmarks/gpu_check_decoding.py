"""The decoding paths of `make gpu-check` (gpu_check.py runs them), on the checkpoint of the decoding model
(gpu_check_runs.py: on a GPU a model that translates, trained there; in the CPU smoke mode the tiny model,
pre-LN as that one is):

- decode: greedy and beam 4 under bf16 and fp16 autocast (CPU smoke mode: bf16 only; fp16 is CUDA only) against
  fp32 on the same test sentences, judged by how close the outputs are to fp32's, not by a BLEU margin (which on
  200 sentences of a small model moves by a point by chance): the same tokens on at least `SAME_FLOOR` of the
  sentences and chrF against fp32's outputs of at least `CHRF_FLOOR`. Not the same tokens on 95%: one flipped
  near-tie changes the rest of a sentence, and bf16 keeps 8 bits of mantissa: bf16 autocast against fp32 on
  this decoding model, trained on a CPU, gave the same tokens on 81.5% and 80% of the sentences (docs/gpu.md, "Why
  token agreement"). A broken half-precision path (a mask overflowing in fp16, a wrong cast) shares almost no
  sentence, and its chrF against fp32 falls far below the floor. The line shows both figures, and each output's
  BLEU against the references for information.
- graphs: the fixed-shape search of graph_search.py (on CUDA one captured graph replayed per step; in the CPU smoke
  mode the same steps without capture) against the eager search, greedy and beam 4: in fp32 the same tokens on at
  least `AGREEMENT` of the sentences (kernels of other shapes round differently, so a near-tie may fall the other
  way), in fp16 within the half-precision floors of the eager fp16 outputs; the line times both and counts the
  searches captured.
- evaluate: `transformer-evaluate --precision auto` on the device exits 0, writes its scores, and its translations
  are the library's under the same precision on at least `AGREEMENT` of the sentences (another process).
- inspect: `transformer-translate` with an ensemble (the checkpoint twice: the same probabilities as the model
  alone), then with `--alignment` and `--attention-maps` (on `MAPPED` sentences: a figure per line, layer and
  kind), and `transformer-score`, each on the device: the ensemble's translations are the library's on at least
  `AGREEMENT` of 40 sentences, the aligned ones equal it and each has its alignment, the maps are drawn (where
  matplotlib is installed), and each pair's log-probability is the library's on the CPU within 1e-3 (relative).
- export-hf, export-ctranslate2: gpu_check_engines.py, each in a process of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from transformer.benchmarks.gpu_check_runs import (
    Context,
    decoder_run,
    require,
    tail,
)
from transformer.benchmarks.stamps import ROOT, read_json

AGREEMENT = 0.95  # share of sentences with the same tokens, fp32 against fp32 (another process, another engine)
SAME_FLOOR = 0.5  # the same for half precision against fp32 (see above)
CHRF_FLOOR = 70.0  # chrF of half precision's outputs against fp32's (100: the same text)
SCORE_TOLERANCE = 1e-3  # relative, a pair's log-probability on the device against the library's on the CPU
MAPPED = 2  # sentences translated with alignments and attention maps (a figure per line, layer and kind)


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
    from transformer.decoding.streaming import StreamingEngine

    translator = StreamingEngine(model, tokenizer, decode, device=device, precision=precision)
    return [results[0] for results in translator.translate(sources)]


def _judge(half, full, references, label: str, against: str = "fp32") -> tuple[str, bool]:
    """One search and precision against fp32: (its part of the line, whether it is within the floors). The same
    tokens on `AGREEMENT` of the sentences pass alone: chrF means little where most outputs are near empty (the CPU
    smoke mode's model of 6 updates: 98% the same tokens and chrF 18 on a Zen 5)."""
    from sacrebleu.metrics import CHRF

    from transformer.evaluation import corpus_scores

    same = agreement([t.tokens for t in half], [t.tokens for t in full])
    chrf = CHRF().corpus_score([t.text for t in half], [[t.text for t in full]]).score
    bleu = lambda outputs: corpus_scores([t.text for t in outputs], references)["bleu"]  # noqa: E731
    part = f"{label}: same {same:.0%}, chrF vs {against} {chrf:.1f} (BLEU {bleu(half):.2f}, {against} {bleu(full):.2f})"
    return part, same >= AGREEMENT or (same >= SAME_FLOOR and chrf >= CHRF_FLOOR)


def check_decode(ctx: Context) -> str:
    """Greedy and beam 4, each half precision against fp32 on the same checkpoint and sentences."""
    model, tokenizer, config, sources, references = _loaded(ctx)
    parts, bad = [], []
    for beam in (1, 4):
        decode = dataclasses.replace(config.decode, beam_size=beam, nbest=1)
        full = _translations(model, tokenizer, decode, ctx.device, "fp32", sources)
        for precision in ["bf16", "fp16"] if ctx.device.type == "cuda" else ["bf16"]:
            half = _translations(model, tokenizer, decode, ctx.device, precision, sources)
            part, good = _judge(half, full, references, f"{'greedy' if beam == 1 else 'beam 4'} {precision}")
            parts.append(part)
            bad += [] if good else [part]
    require(
        not bad,
        f"half precision strays from fp32 (floors: same {SAME_FLOOR:.0%}, chrF {CHRF_FLOOR:g}): {'; '.join(bad)}",
    )
    note = "" if ctx.device.type == "cuda" else " (CPU smoke: the tiny model, pre-LN; fp16 autocast is CUDA only)"
    return f"{len(sources)} test sentences against fp32: {'; '.join(parts)}{note}"


@contextlib.contextmanager
def _graphs_everywhere(ctx: Context):
    """On the CPU (smoke mode), let `decode.cuda_graphs` choose graph_search.py's path too (without capture)."""
    from transformer.decoding import search
    from transformer.decoding.interface import CachingModel

    if ctx.device.type == "cuda":
        yield
        return
    original = search._graphed
    search._graphed = lambda model, src, decode, steer: (
        decode.cuda_graphs and not isinstance(model, CachingModel) and steer.graphable
    )
    try:
        yield
    finally:
        search._graphed = original


def _timed_translations(model, tokenizer, decode, ctx: Context, precision: str, sources: list[str]):
    start = time.perf_counter()
    found = _translations(model, tokenizer, decode, ctx.device, precision, sources)
    return found, time.perf_counter() - start


def check_graphs(ctx: Context) -> str:
    """Greedy and beam 4, the graphed search against the eager one (see the module docstring)."""
    from transformer.decoding import graph_search

    model, tokenizer, config, sources, references = _loaded(ctx)
    parts, bad = [], []
    with _graphs_everywhere(ctx):
        for beam in (1, 4):
            eager_settings = dataclasses.replace(config.decode, beam_size=beam, nbest=1, cuda_graphs=False)
            graphed_settings = dataclasses.replace(eager_settings, cuda_graphs=True)
            for precision in ["fp32", "fp16"] if ctx.device.type == "cuda" else ["fp32"]:
                eager, eager_s = _timed_translations(model, tokenizer, eager_settings, ctx, precision, sources)
                graphed, graphed_s = _timed_translations(model, tokenizer, graphed_settings, ctx, precision, sources)
                label = f"{'greedy' if beam == 1 else 'beam 4'} {precision}"
                same = agreement([t.tokens for t in graphed], [t.tokens for t in eager])
                if precision == "fp32":
                    part, good = f"{label}: same {same:.0%}", same >= AGREEMENT
                else:
                    part, good = _judge(graphed, eager, references, label, against="eager")
                parts.append(f"{part} ({eager_s:.1f} s eager, {graphed_s:.1f} s graphed)")
                bad += [] if good else [part]
    require(not bad, f"the graphed search strays from the eager one: {'; '.join(bad)}")
    captured = len(graph_search._GRAPHS[model].entries) if model in graph_search._GRAPHS else 0
    how = f"{captured} searches captured" if ctx.device.type == "cuda" else "CPU smoke: the same steps, no capture"
    return f"{len(sources)} test sentences against the eager search: {'; '.join(parts)}; {how}"


def _cli(ctx: Context, *arguments: str) -> subprocess.CompletedProcess:
    """`python -m transformer ARGUMENTS` on the check's device; fails the check unless it exits 0."""
    threads = ["--threads", "1"] if ctx.smoke else []
    command = [sys.executable, "-m", "transformer", *arguments, "--device", ctx.device.type, "--quiet", *threads]
    done = subprocess.run(command, cwd=ROOT, env=ctx.env(), capture_output=True, text=True, timeout=ctx.timeout)
    require(done.returncode == 0, f"{arguments[0]}: exit code {done.returncode}: {tail(done.stdout + done.stderr)}")
    return done


def check_evaluate(ctx: Context) -> str:
    """`transformer-evaluate --precision auto` on the device: exit 0, its scores, the library's translations."""
    from transformer.decoding.streaming import StreamingEngine
    from transformer.precision import resolve_precision

    folder = ctx.work / "evaluate"
    folder.mkdir(parents=True, exist_ok=True)
    _cli(
        ctx,
        "evaluate",
        "--checkpoint",
        str(_checkpoint(ctx)),
        "--precision",
        "auto",
        "--json",
        str(folder / "scores.json"),
        "--output",
        str(folder / "test.hyp"),
    )
    scores = read_json(folder / "scores.json") or {}
    require(str(scores.get("device", "")).startswith(ctx.device.type), f"it decoded on {scores.get('device')}")
    model, tokenizer, config, sources, _ = _loaded(ctx)
    precision = resolve_precision("auto", ctx.device)
    library = StreamingEngine(model, tokenizer, config.decode, device=ctx.device, precision=precision)
    same = agreement((folder / "test.hyp").read_text(encoding="utf-8").splitlines(), library.translate_texts(sources))
    require(same >= AGREEMENT, f"its translations equal the library's on {same:.0%} of {len(sources)} sentences")
    return (
        f"precision auto ({precision}): BLEU {scores['bleu']:.1f} on {len(sources)} test sentences "
        f"({scores['device']}); the library's translations on {same:.0%}"
    )


def _maps_wanted() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _translate(ctx: Context, folder: Path, sources: list[str], name: str, *arguments: str) -> list[str]:
    """`transformer-translate ARGUMENTS` of `sources` on the device, fp32: its output lines."""
    (folder / f"{name}.src").write_text("".join(f"{s}\n" for s in sources), encoding="utf-8")
    _cli(
        ctx,
        "translate",
        *arguments,
        "--precision",
        "fp32",
        "--input",
        str(folder / f"{name}.src"),
        "--output",
        str(folder / f"{name}.out"),
    )
    return (folder / f"{name}.out").read_text(encoding="utf-8").splitlines()


def check_inspect(ctx: Context) -> str:
    """An ensemble, alignments and attention maps, and `transformer-score`, on the device (see above)."""
    from transformer.decoding.scoring import score_texts
    from transformer.decoding.streaming import StreamingEngine

    model, tokenizer, config, sources, _ = _loaded(ctx)
    folder, checkpoint, maps, sources = ctx.work / "inspect", str(_checkpoint(ctx)), _maps_wanted(), sources[:40]
    folder.mkdir(parents=True, exist_ok=True)
    library = StreamingEngine(model, tokenizer, config.decode, device=ctx.device).translate_texts(sources)
    ensemble = agreement(_translate(ctx, folder, sources, "ensemble", "--checkpoint", checkpoint, checkpoint), library)
    drawn = ["--attention-maps", str(folder / "maps")] if maps else []  # a figure per line, layer and kind: 2 lines
    aligned = _translate(ctx, folder, sources[:MAPPED], "aligned", "--checkpoint", checkpoint, "--alignment", *drawn)
    same = agreement([line.split("\t")[0] for line in aligned], library[:MAPPED])
    require(
        ensemble >= AGREEMENT and same == 1.0,
        f"the model's translations: the ensemble's on {ensemble:.0%} of "
        f"{len(sources)}, with alignments on {same:.0%} of {MAPPED}",
    )
    require(all("\t" in line for line in aligned), "a line without its alignment")
    figures = len(list((folder / "maps").rglob("*.png"))) if maps else 0
    require(figures > 0 or not maps, "no attention map drawn")
    (folder / "tgt.txt").write_text("".join(f"{t}\n" for t in library), encoding="utf-8")
    done = _cli(
        ctx,
        "score",
        "--checkpoint",
        checkpoint,
        "--precision",
        "fp32",
        "--src",
        str(folder / "ensemble.src"),
        "--tgt",
        str(folder / "tgt.txt"),
        "--json",
    )
    theirs = [p["log_prob"] for p in json.loads(done.stdout)["pairs"]]
    ours = [
        s.log_prob
        for s in score_texts(
            model.cpu(), tokenizer, sources, library, max_tokens=4000, device=torch.device("cpu"), precision="fp32"
        )
    ]
    worst = max(abs(a - b) / max(abs(b), 1e-9) for a, b in zip(theirs, ours))
    require(len(theirs) == len(ours) and worst <= SCORE_TOLERANCE, f"transformer-score differs by {worst:.1e}")
    drew = f"{figures} attention maps" if maps else "no attention maps (matplotlib is not installed)"
    return (
        f"the model's translations: the ensemble of it twice on {ensemble:.0%} of {len(sources)}, with "
        f"alignments on {same:.0%} of {MAPPED}; {drew}; transformer-score within {worst:.1e} of the library on "
        "the CPU"
    )
