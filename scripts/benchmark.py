"""Training throughput of our Transformer against peers of the same shape, in the same run.

    python scripts/benchmark.py --config configs/base.yaml --vocab 37000 --tokens 25000 --steps 20
    python scripts/benchmark.py decode --checkpoint runs/demo/checkpoint_last.pt     # decoding: see decode_main

Peers: PyTorch's `nn.Transformer` (with our embeddings and output layer around it), when `transformers` is
installed Hugging Face's `MarianMTModel`, with `--peers reference` our model with the full-logits loss (the
training step before the chunked pad-free loss), with `--peers compiled` ours under torch.compile (dynamic shapes, as
`train.compile`), and on a GPU `graphed` (ours, the whole step captured as a CUDA graph per batch shape and replayed;
give `--shapes` so that the warm-up captures every shape) and `compiled_graphed` (the same over torch.compile with
static shapes); the measuring is transformer/benchmarks/training.py's. `--profile N` then profiles N steps of each
(host operators, GPU kernels and how busy they kept it: a launch-bound step shows a GPU idle much of the time).
Each model trains on the same random batches of WMT-like lengths
(forward, label-smoothed loss, backward, Adam step) under the same precision, in interleaved rounds (`--rounds`, median
reported, and the median of the per-round ratios) so that a shared machine slows all alike; ours runs
`optim.batch_loss`, the trainer's step.
The script prints target tokens/s and, on a GPU, the model FLOPs utilisation (6 x parameters + attention: the
encoder's per source token, the decoder's per target token; the GPU's peak read from its name) and peak memory;
`--json` writes the record that docs/results/ holds (`make bench-gpu` runs it per shape).
A benchmark, not a test: run it on the machine you want to know about and record the output in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import warnings
from pathlib import Path

import torch

from transformer.benchmarks.training import (
    build_engines,
    flops_per_token,
    gpu_peak,
    make_batches,
    measure,
    profile_line,
    round_ratios,
)
from transformer.commands.cli import user_errors_exit_2
from transformer.config import load_config
from transformer.data.tokenizer import PAD_ID
from transformer.devices import avoid_cudnn_attention, cpu_model
from transformer.errors import UserError
from transformer.model.transformer import count_parameters
from transformer.precision import resolve_precision


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/base.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--tokens", type=int, default=8192, help="target tokens per batch")
    parser.add_argument("--mean-len", type=int, default=27, help="mean sentence length in tokens")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved timed rounds; the median is reported")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0 = torch's default)")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=0.0,
        help="dense bf16 peak of the GPU in TFLOP/s "
        "(default: from the GPU's name, transformer/benchmarks/gpu_peaks.py)",
    )
    parser.add_argument(
        "--cudnn-attention", action="store_true", help="let SDPA pick cuDNN's kernel, as torch does by default"
    )
    parser.add_argument(
        "--peers",
        default="torch,marian",
        help="comma-separated: torch, marian, reference (ours "
        "with the full-logits loss, the step before the chunked pad-free loss), compiled (ours under torch.compile), "
        "graphed and compiled_graphed (ours, the whole step a CUDA graph: GPU only)",
    )
    parser.add_argument(
        "--shapes", type=int, default=0, help="batch shapes to cycle through (0: a new length each batch)"
    )
    parser.add_argument(
        "--profile", type=int, default=0, help="then profile each engine over this many steps (host ops, GPU busy)"
    )
    parser.add_argument("--shape", default=None, help="a name for the shape, written to the JSON")
    parser.add_argument("--json", default=None, help="write the result here (docs/results/ fields)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="enable_nested_tensor")  # nn.Transformer's pre-LN notice
    if args.threads:
        torch.set_num_threads(args.threads)
    result = run(args)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", "utf-8")
        print(f"wrote {args.json}")


def run(args) -> dict:
    """Measure every engine on the same batches; print a table and return the docs/results/ record."""
    cfg = load_config(args.config, args.overrides).model
    device = args.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    precision = resolve_precision(args.precision, device)
    torch.backends.cuda.matmul.allow_tf32 = True
    if device.type == "cuda" and not args.cudnn_attention:
        avoid_cudnn_attention()  # for every model: all of them call F.scaled_dot_product_attention
    batches = make_batches(args.steps + args.warmup, args.tokens, args.vocab, args.mean_len, device, shapes=args.shapes)
    engines = build_engines(args, cfg, set(args.peers.split(",")))
    ours = engines["ours"].model
    params = count_parameters(ours)
    src_per_tgt = sum(int(b.src.ne(PAD_ID).sum()) for b in batches) / sum(b.n_tgt_tokens for b in batches)
    per_token = flops_per_token(ours, cfg, args.mean_len, src_per_tgt)
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"cpu ({cpu_model()})"
    peak_tf, peak_name = gpu_peak(args.peak_tflops, name) if device.type == "cuda" else (None, None)
    print(
        f"device {name}, {precision}, {params / 1e6:.1f}M params, ~{args.tokens} target tokens/batch, "
        f"torch {torch.__version__}, threads {torch.get_num_threads()}"
    )
    results = measure(engines, batches, precision, device, args.warmup, args.rounds, min(args.profile, args.steps))
    on_gpu = device.type == "cuda"
    print(f"{'model':<20}{'tokens/s':>12}{'vs ours':>9}{'MFU':>8}{'peak GB':>9}  rounds")
    for engine, r in results.items():
        mfu = f"{r['tokens_per_s'] * per_token / (peak_tf * 1e12):.1%}" if peak_tf else "-"
        ratio = results["ours"]["tokens_per_s"] / r["tokens_per_s"]
        peak = f"{r['peak_mem_gb']:.2f}" if r["peak_mem_gb"] is not None else "-"
        print(f"{engine:<20}{r['tokens_per_s']:>12,.0f}{ratio:>8.2f}x{mfu:>8}{peak:>9}  {r['rounds']}")
    print("median of the per-round ratios:", ", ".join(f"{k} {v:.2f}x" for k, v in round_ratios(results).items()))
    for engine, r in results.items():
        if "profile" in r:
            print(f"profile {engine}: {profile_line(r['profile'])}")
    ours_tok = results["ours"]["tokens_per_s"]
    return {
        "kind": "train_throughput",
        "shape": args.shape or Path(args.config).stem,
        "device": name,
        "device_type": device.type,
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "precision": precision,
        "threads": torch.get_num_threads() if not on_gpu else None,
        "parameters": params,
        "tokens_per_update": round(sum(b.n_tgt_tokens for b in batches) / len(batches)),
        "flops_per_token": per_token,
        "source_tokens_per_target_token": round(src_per_tgt, 4),
        "engines": results,
        "mfu": round(ours_tok * per_token / (peak_tf * 1e12), 4) if peak_tf else None,
        "peak_tflops": peak_tf,
        "peak_tflops_name": peak_name,
        "ratios": {f"ours/{k}": round(ours_tok / v["tokens_per_s"], 3) for k, v in results.items() if k != "ours"},
        "round_ratios": round_ratios(results),
    }


def _decode_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmark.py decode", description=decode_main.__doc__)
    parser.add_argument("--checkpoint", help="a trained model: decode its config's data.test split")
    parser.add_argument("--config", default="configs/base.yaml", help="without --checkpoint: a random model's shape")
    parser.add_argument("--vocab", type=int, default=8000, help="without --checkpoint: vocabulary size")
    parser.add_argument("--sentences", type=int, default=256, help="without --checkpoint: random sources")
    parser.add_argument("--src-len", type=int, default=24, help="without --checkpoint: mean source length")
    parser.add_argument("--forced", type=int, default=0, help="force every output to this many tokens")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    parser.add_argument("--beams", default="1,4")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--computes", help="comma-separated (default: fp32,int8 on the CPU, fp16,bf16 on CUDA)")
    parser.add_argument("--engines", default="ours,ctranslate2,hf")
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--max-len-a", type=float, default=1.2)
    parser.add_argument("--max-len-b", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs per engine, taking turns every few batches; the fastest counts"
    )
    parser.add_argument("--shape", help="name of the shape in the JSON (default: from the model)")
    parser.add_argument("--out", default="docs/results")
    parser.add_argument("--note", help="a remark for the records, e.g. why an engine is missing")
    return parser


def decode_main(argv: list[str] | None = None) -> None:
    """python scripts/benchmark.py decode --checkpoint CKPT | --config configs/base.yaml --forced 32 [--device cuda]

    Ours against CTranslate2 and HF generate on the same weights (transformer/benchmarks/decode.py has the rules);
    one JSON per search and compute type in --out.
    """
    import tempfile

    from transformer.benchmarks import decode as db

    args = _decode_parser().parse_args(argv)
    computes = _computes(args, db.DEVICE_COMPUTES[args.device])
    torch.set_num_threads(args.threads)
    model, tokenizer, config, sources, references = db.decode_inputs(
        args.checkpoint, config_path=args.config, vocab=args.vocab, sentences=args.sentences, src_len=args.src_len
    )
    c = config.model
    shape = (
        args.shape
        or f"{c.n_encoder_layers}+{c.n_decoder_layers}, d{c.d_model}, ff{c.d_ff}, V{model.output_proj.out_features}"
    )
    batches, left_out = db.batches_of(sources, args.batch_size), {}
    engines_by_compute = db.decode_engines(
        model,
        tokenizer,
        config,
        args.engines.split(","),
        computes,
        threads=args.threads,
        random_weights=not args.checkpoint,
        tmp=Path(tempfile.mkdtemp(prefix="decode_bench_")),
        device=args.device,
        left_out=left_out,
    )
    common = _decode_common(args, argv, shape)
    for compute, factories in engines_by_compute.items():
        with db.EngineProcesses(factories) as engines:  # one process per engine, kept for every search
            for beam in map(int, args.beams.split(",")):
                settings = db.DecodeSettings(
                    beam=beam, alpha=args.alpha, max_len_a=args.max_len_a, max_len_b=args.max_len_b, forced=args.forced
                )
                result = db.time_engines(engines, sources, batches, settings, args.repeats)
                engine_results = db.compare_engines(result, tokenizer, references)
                left_out.update(engines.left_out)
                record = {
                    **common,
                    **({"left_out": dict(left_out)} if left_out else {}),
                    "beam": beam,
                    "compute": compute,
                    "sentences": len(sources),
                    "batch_size": args.batch_size,
                    "forced_length": args.forced or None,
                    "settings": vars(settings),
                    "engines": engine_results,
                }
                _write_decode_record(record, Path(args.out))


def _computes(args: argparse.Namespace, offered: tuple[str, ...]) -> list[str]:
    """--computes (default: the device's first two) checked against what the device offers."""
    computes = (args.computes or ",".join(offered[:2])).split(",")
    if unknown := [c for c in computes if c not in offered]:
        raise UserError(
            f"--computes {','.join(unknown)} is not offered on --device {args.device}: use {', '.join(offered)}"
        )
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: this machine has no CUDA device (torch.cuda.is_available() is False)")
    return computes


def _decode_common(args: argparse.Namespace, argv: list[str] | None, shape: str) -> dict:
    """The fields every decode record of this run shares: the device, the date, the command, the shape."""
    if args.device == "cuda":
        device = f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    else:
        device = f"{cpu_model()} ({os.cpu_count()} cores), torch {torch.__version__}, {args.threads} thread(s)"
    return {
        "kind": "decode",
        "device": device,
        "device_type": args.device,
        "date": datetime.date.today().isoformat(),
        "command": "python scripts/benchmark.py decode " + " ".join(argv or sys.argv[2:]),
        "shape": shape,
        "processes": "one per engine, timed inside it",
        **({"note": args.note} if args.note else {}),
    }


def _write_decode_record(record: dict, out: Path) -> None:
    """Print one line of tokens/s (BLEU, agreement with ours) and write
    decode_<device>_<shape>_<search>_<compute>[_b<batch size, when not 32>].json."""
    search = "greedy" if record["beam"] == 1 else f"beam{record['beam']}"
    line = ", ".join(
        f"{n} {e['tokens_per_s']:,.0f} tok/s"
        + (f" BLEU {e['bleu']:.2f}" if "bleu" in e else "")
        + (f" same {e['same_as_ours']:.3f}" if "same_as_ours" in e else "")
        for n, e in record["engines"].items()
    )
    label = "greedy" if record["beam"] == 1 else f"beam {record['beam']}"
    print(f"{record['shape']} | {label} | {record['compute']}: {line}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    slug = "".join(ch if ch.isalnum() else "_" for ch in record["shape"].split()[0])  # "base (6+6, ...)" -> base
    batch = "" if record["batch_size"] == 32 else f"_b{record['batch_size']}"  # 32: the records' first name
    (out / f"decode_{record['device_type']}_{slug}_{search}_{record['compute']}{batch}.json").write_text(
        json.dumps(record, indent=2) + "\n"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["decode"]:
        sys.exit(user_errors_exit_2(decode_main)(sys.argv[2:]))
    sys.exit(user_errors_exit_2(main)(sys.argv[1:]))
