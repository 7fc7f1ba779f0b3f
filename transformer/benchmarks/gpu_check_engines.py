"""The export paths of `make gpu-check`, each in a process of its own, so that an optional engine that crashes
while loading its libraries (CTranslate2's CUDA libraries, another major version of `transformers`) takes only its
own line with it:

- export-hf, export-ctranslate2: the decoding model's checkpoint exported, loaded by Hugging Face / CTranslate2 on
  the device, and their greedy output equal to ours (fp32) on at least `AGREEMENT` of `EXPORT_SENTENCES` test
  sentences. Where CTranslate2 cannot run on this CUDA, it is compared on the CPU and the line says why.

An engine that is not installed, cannot be loaded or crashes is SKIP with the reason; an export that raises or an
engine whose output differs from ours is FAIL (our export is wrong). The child prints its verdict as its last line,
`PASS|FAIL|SKIP detail`:

    python -m transformer.benchmarks.gpu_check_engines hf|ctranslate2 CHECKPOINT DEVICE WORK
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from transformer.benchmarks.gpu_check_runs import CheckFailedError, CheckSkippedError, Context, tail
from transformer.benchmarks.stamps import ROOT

AGREEMENT = 0.95  # share of sentences with the same tokens, fp32 against fp32 (another engine)
EXPORT_SENTENCES = 40  # test sentences decoded by the exported models: 2 may differ
PACKAGES = {"hf": "transformers", "ctranslate2": "ctranslate2"}


# ------------------------------------------------------------------------------------------------ the parent


def _check_engine(ctx: Context, fmt: str) -> str:
    from transformer.benchmarks.gpu_check_decoding import _checkpoint

    command = [
        sys.executable,
        "-m",
        "transformer.benchmarks.gpu_check_engines",
        fmt,
        str(_checkpoint(ctx)),
        ctx.device.type,
        str(ctx.work / f"export-{fmt}"),
    ]
    try:
        done = subprocess.run(command, cwd=ROOT, env=ctx.env(), capture_output=True, text=True, timeout=ctx.timeout)
    except subprocess.TimeoutExpired:
        raise CheckSkippedError(f"{PACKAGES[fmt]} gave no verdict in {ctx.timeout:.0f} s") from None
    last = (done.stdout.strip().splitlines() or [""])[-1]
    verdict, _, detail = last.partition(" ")
    if verdict == "PASS" and done.returncode == 0:
        return detail
    if verdict == "FAIL":
        raise CheckFailedError(detail)
    if verdict == "SKIP":
        raise CheckSkippedError(detail)
    raise CheckSkippedError(f"its process crashed (exit code {done.returncode}): {tail(done.stdout + done.stderr)}")


def check_export_hf(ctx: Context) -> str:
    return _check_engine(ctx, "hf")


def check_export_ctranslate2(ctx: Context) -> str:
    return _check_engine(ctx, "ctranslate2")


# ------------------------------------------------------------------------------------------------ the child


def _decode_all(engine, rows, batches, settings) -> list[list[int]]:
    """Outputs in source order from a `decode.build_engine` run function."""
    outputs: list = [None] * len(rows)
    for batch in batches:
        for i, hyp in zip(batch, engine([rows[i] for i in batch], settings)):
            outputs[i] = hyp
    return outputs


def _export(fmt: str, checkpoint: Path, work: Path) -> Path:
    from transformer.interop.export import export_checkpoint

    export_log = logging.getLogger("transformer.interop.export")
    export_log.setLevel(logging.ERROR)  # its note on the settings an engine leaves out: the comparison sets its own
    try:
        return export_checkpoint(checkpoint, fmt, work)
    except Exception as exc:  # our export is wrong for this engine's version: a failure, said in one line
        raise CheckFailedError(f"the export raised {type(exc).__name__}: {_first(exc)}") from None


def _first(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]


def _engine(fmt: str, folder: Path, device: str, tokenizer):
    """The exported model loaded as an engine on `device`: (engine, the device it runs on, a note)."""
    import torch

    from transformer.benchmarks.decode import build_engine

    threads = torch.get_num_threads()
    if fmt == "hf":
        return build_engine("hf", "fp32", threads, folder, device=device), device, ""
    pieces = dict(
        src_pieces=[tokenizer.src_piece(i) for i in range(tokenizer.src_vocab_size)],
        tgt_pieces=[tokenizer.tgt_piece(i) for i in range(tokenizer.tgt_vocab_size)],
        suppress=True,
    )
    if device == "cuda":
        import ctranslate2

        try:
            if ctranslate2.get_cuda_device_count() < 1:
                raise RuntimeError("CTranslate2 sees no CUDA device")
            return build_engine("ctranslate2", "fp32", threads, folder, device="cuda", **pieces), "cuda", ""
        except Exception as exc:  # its CUDA libraries missing or another CUDA version: say so, check on the CPU
            note = f"; CTranslate2 cannot run on this CUDA ({_first(exc)[:160]})"
            return build_engine("ctranslate2", "fp32", threads, folder, device="cpu", **pieces), "cpu", note
    return build_engine("ctranslate2", "fp32", threads, folder, device="cpu", **pieces), "cpu", ""


def verdict(fmt: str, checkpoint: Path, device: str, work: Path) -> str:
    """The child's work: the detail of a PASS, else CheckFailedError or CheckSkippedError."""
    import torch

    from transformer.benchmarks.decode import DecodeSettings, batches_of, ours_engine
    from transformer.checkpoint import build_model, load_checkpoint
    from transformer.data.corpus import load_pairs

    try:
        __import__(PACKAGES[fmt])
    except ImportError:
        raise CheckSkippedError(f"{PACKAGES[fmt]} is not installed: pip install 'transformer[export]'") from None
    folder = _export(fmt, checkpoint, work)
    model, tokenizer, config = build_model(load_checkpoint(checkpoint), torch.device(device))
    sources, _ = load_pairs(config.data.test, config.data)
    try:
        theirs, where, note = _engine(fmt, folder, device, tokenizer)
    except Exception as exc:  # the engine cannot load what it was given here: not our figures' concern
        why = f"{PACKAGES[fmt]} could not load the export: {type(exc).__name__}: {_first(exc)}"
        raise CheckSkippedError(why) from None
    rows = tokenizer.encode_src(sources[:EXPORT_SENTENCES])
    batches, settings = batches_of(rows, 8), DecodeSettings(beam=1, alpha=1.0, max_len_a=1.2, max_len_b=10)
    ours = ours_engine(model.to(where))
    outputs = _decode_all(theirs, rows, batches, settings), _decode_all(ours, rows, batches, settings)
    same = sum(a == b for a, b in zip(*outputs)) / len(rows)
    if same < AGREEMENT:
        raise CheckFailedError(f"greedy output equal to ours on {same:.0%} of {len(rows)} sentences")
    return f"exported, loaded on {where}: greedy output equal to ours (fp32) on {same:.0%} of {len(rows)}{note}"


def main(argv: list[str]) -> int:
    fmt, checkpoint, device, work = argv
    try:
        print(f"PASS {verdict(fmt, Path(checkpoint), device, Path(work))}", flush=True)
    except CheckFailedError as exc:
        print(f"FAIL {exc}", flush=True)
    except CheckSkippedError as exc:
        print(f"SKIP {exc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
