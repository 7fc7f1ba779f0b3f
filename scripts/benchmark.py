"""Training throughput of our Transformer against peers of the same shape, in the same run.

    python scripts/benchmark.py --config configs/base.yaml --vocab 37000 --tokens 25000 --steps 20
    python scripts/benchmark.py decode --checkpoint runs/demo/checkpoint_last.pt     # decoding: see decode_main

Peers: PyTorch's `nn.Transformer` (with our embeddings and output layer around it) and, when `transformers` is
installed, Hugging Face's `MarianMTModel`. Each model trains on the same random batches of WMT-like lengths
(forward, label-smoothed loss, backward, Adam step) under the same precision; the script prints target tokens/s,
sentences/s and, on a GPU, the model FLOPs utilisation (6 * non-embedding params + attention, per token).
A benchmark, not a test: run it on the machine you want to know about and record the output in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import torch
from torch import nn

from transformer.attention import avoid_cudnn_attention
from transformer.config import load_config
from transformer.model import Transformer, count_parameters
from transformer.training import autocast, label_smoothed_loss, resolve_precision

PAD, BOS, EOS = 0, 2, 3


def make_batches(n: int, max_tokens: int, vocab: int, mean_len: int, device: torch.device, seed: int = 0):
    """Batches of sentences with a common length (as length bucketing gives), each holding ~max_tokens tokens."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        S = int(torch.randint(mean_len // 2, mean_len * 3 // 2, (1,), generator=g))
        T = S + 2
        B = max(max_tokens // T, 1)
        src = torch.randint(4, vocab, (B, S), generator=g)
        tgt = torch.randint(4, vocab, (B, T + 1), generator=g)
        batches.append((src.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device)))
    return batches


class TorchPeer(nn.Module):
    """nn.Transformer with the same embeddings (x sqrt(d_model), sinusoids) and tied output as ours."""

    def __init__(self, ours: Transformer, cfg) -> None:
        super().__init__()
        self.ours = ours  # embeddings and output projection only
        self.core = nn.Transformer(
            d_model=cfg.d_model, nhead=cfg.n_heads, num_encoder_layers=cfg.n_encoder_layers,
            num_decoder_layers=cfg.n_decoder_layers, dim_feedforward=cfg.d_ff, dropout=cfg.dropout,
            batch_first=True, norm_first=cfg.norm_first,
        )  # fmt: skip

    def forward(self, src, tgt_in):
        enc, dec = self.ours.encoder, self.ours.decoder
        x = enc.embed(src)
        y = dec.embed(tgt_in)
        T = tgt_in.size(1)
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=src.device)
        h = self.core(x, y, tgt_mask=mask, src_key_padding_mask=src == PAD, memory_key_padding_mask=src == PAD,
                      tgt_is_causal=True)  # fmt: skip
        return self.ours.output_proj(h)


def marian_peer(cfg, vocab: int):
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=vocab, d_model=cfg.d_model, encoder_layers=cfg.n_encoder_layers,
        decoder_layers=cfg.n_decoder_layers, encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads, encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff,
        dropout=cfg.dropout, activation_function="relu", pad_token_id=PAD, eos_token_id=EOS,
        decoder_start_token_id=BOS, max_position_embeddings=1024, scale_embedding=True,
        share_encoder_decoder_embeddings=True,
    )  # fmt: skip
    model = MarianMTModel(config)

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, src, tgt_in):
            return self.m(input_ids=src, attention_mask=src != PAD, decoder_input_ids=tgt_in).logits

    return Wrapped()


def measure(model: nn.Module, batches, precision: str, device: torch.device, warmup: int) -> tuple[float, float]:
    """(target tokens/s, sentences/s) over the batches after `warmup` untimed steps."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    tokens = sentences = 0
    for i, (src, tgt_in, tgt_out) in enumerate(batches):
        if i == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start, tokens, sentences = time.perf_counter(), 0, 0
        with autocast(precision, device):
            logits = model(src, tgt_in)
        loss, _ = label_smoothed_loss(logits, tgt_out, epsilon=0.1, pad_id=PAD)
        (loss / tgt_out.numel()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens, sentences = tokens + tgt_out.numel(), sentences + tgt_out.size(0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return tokens / seconds, sentences / seconds


def flops_per_token(model: Transformer, cfg, vocab: int, mean_len: int) -> float:
    """6 x (non-embedding parameters + output layer) + attention score/value FLOPs, per target token."""
    dense = count_parameters(model)  # the tied matrix counts once: as the output matmul, not the lookup
    attention = 6 * 2 * mean_len * cfg.d_model * (cfg.n_encoder_layers + 2 * cfg.n_decoder_layers)
    return 6 * dense + attention


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/base.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--tokens", type=int, default=8192, help="target tokens per batch")
    parser.add_argument("--mean-len", type=int, default=27, help="mean sentence length in tokens")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the GPU (H100 SXM)")
    parser.add_argument(
        "--cudnn-attention", action="store_true", help="let SDPA pick cuDNN's kernel, as torch does by default"
    )
    parser.add_argument("--peers", default="torch,marian", help="comma-separated: torch, marian")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="enable_nested_tensor")  # nn.Transformer's pre-LN notice

    cfg = load_config(args.config, args.overrides).model
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    precision = resolve_precision(args.precision, device)
    torch.backends.cuda.matmul.allow_tf32 = True
    if device.type == "cuda" and not args.cudnn_attention:
        avoid_cudnn_attention()  # for every model: all of them call F.scaled_dot_product_attention
    batches = make_batches(args.steps + args.warmup, args.tokens, args.vocab, args.mean_len, device)
    ours = Transformer.from_config(cfg, src_vocab_size=args.vocab, tgt_vocab_size=args.vocab, pad_id=PAD)
    candidates = {"ours": lambda: ours}
    if "torch" in args.peers:
        candidates["nn.Transformer"] = lambda: TorchPeer(
            Transformer.from_config(cfg, src_vocab_size=args.vocab, tgt_vocab_size=args.vocab, pad_id=PAD), cfg
        )
    if "marian" in args.peers:
        candidates["HF Marian"] = lambda: marian_peer(cfg, args.vocab)
    per_token = flops_per_token(ours, cfg, args.vocab, args.mean_len)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"device {device} ({name}), {precision}, {count_parameters(ours) / 1e6:.1f}M params, "
          f"~{args.tokens} target tokens/batch, torch {torch.__version__}")  # fmt: skip
    print(f"{'model':<16}{'tokens/s':>12}{'sentences/s':>14}{'MFU':>8}")
    for name, build in candidates.items():
        try:
            model = build().to(device)
        except ImportError as exc:
            print(f"{name:<16} skipped ({exc})")
            continue
        if args.compile:
            model = torch.compile(model)
        tok_s, sent_s = measure(model, batches, precision, device, args.warmup)
        mfu = tok_s * per_token / (args.peak_tflops * 1e12) if device.type == "cuda" else float("nan")
        print(f"{name:<16}{tok_s:>12,.0f}{sent_s:>14,.1f}{mfu:>8.1%}")
        del model


# ---------------------------------------------------------------------------------------------- decode mode


def decode_main(argv: list[str] | None = None) -> None:
    """python scripts/benchmark.py decode --checkpoint CKPT | --config configs/base.yaml --forced 32 [...]

    Ours against CTranslate2 and HF generate on the same weights (transformer/decode_benchmark.py has the rules);
    one JSON per search and compute type in --out.
    """
    import json
    import tempfile
    from datetime import date
    from pathlib import Path

    from transformer import decode_benchmark as db

    parser = argparse.ArgumentParser(prog="benchmark.py decode", description=decode_main.__doc__)
    parser.add_argument("--checkpoint", help="a trained model: decode its config's data.test split")
    parser.add_argument("--config", default="configs/base.yaml", help="without --checkpoint: a random model's shape")
    parser.add_argument("--vocab", type=int, default=8000, help="without --checkpoint: vocabulary size")
    parser.add_argument("--sentences", type=int, default=256, help="without --checkpoint: random sources")
    parser.add_argument("--src-len", type=int, default=24, help="without --checkpoint: mean source length")
    parser.add_argument("--forced", type=int, default=0, help="force every output to this many tokens")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    parser.add_argument("--beams", default="1,4")
    parser.add_argument("--computes", default="fp32,int8")
    parser.add_argument("--engines", default="ours,ctranslate2,hf")
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--max-len-a", type=float, default=1.2)
    parser.add_argument("--max-len-b", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="interleaved runs per engine; the fastest counts")
    parser.add_argument("--shape", help="name of the shape in the JSON (default: from the model)")
    parser.add_argument("--out", default="docs/results")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer, config, sources, references = _decode_inputs(args)
    c = config.model
    shape = (
        args.shape
        or f"{c.n_encoder_layers}+{c.n_decoder_layers}, d{c.d_model}, ff{c.d_ff}, V{model.output_proj.out_features}"
    )
    batches = db.batches_of(sources, args.batch_size)
    names = args.engines.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="decode_bench_"))
    engines_by_compute = _decode_engines(model, tokenizer, config, names, args, tmp)
    import platform

    cpu = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").is_file():
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), cpu)
    device_name = f"{cpu} ({os.cpu_count()} cores), torch {torch.__version__}, {args.threads} thread(s)"
    for compute, engines in engines_by_compute.items():
        for beam in map(int, args.beams.split(",")):
            settings = db.DecodeSettings(beam=beam, alpha=args.alpha, max_len_a=args.max_len_a,
                                         max_len_b=args.max_len_b, forced=args.forced)  # fmt: skip
            result = db.time_engines(engines, sources, batches, settings, args.repeats)
            ours = result.get("ours", {}).get("outputs")
            record = {"kind": "decode", "device": device_name, "date": date.today().isoformat(),
                      "command": "python scripts/benchmark.py decode " + " ".join(argv or sys.argv[2:]),
                      "shape": shape, "beam": beam, "compute": compute, "sentences": len(sources),
                      "batch_size": args.batch_size, "forced_length": args.forced or None,
                      "settings": vars(settings), "engines": {}}  # fmt: skip
            for name, r in result.items():
                entry = {k: r[k] for k in ("tokens_per_s", "seconds", "tokens")}
                if ours is not None:
                    entry["same_as_ours"] = round(sum(a == b for a, b in zip(r["outputs"], ours)) / len(ours), 4)
                if references is not None:
                    from transformer.evaluation import corpus_scores

                    entry["bleu"] = corpus_scores(tokenizer.decode_tgt(r["outputs"]), references)["bleu"]
                record["engines"][name] = entry
            line = ", ".join(f"{n} {e['tokens_per_s']:,.0f} tok/s" + (f" BLEU {e['bleu']:.2f}" if "bleu" in e else "")
                             + (f" same {e['same_as_ours']:.3f}" if "same_as_ours" in e else "")
                             for n, e in record["engines"].items())  # fmt: skip
            print(f"{shape} | {'greedy' if beam == 1 else f'beam {beam}'} | {compute}: {line}", flush=True)
            Path(args.out).mkdir(parents=True, exist_ok=True)
            slug = "".join(ch if ch.isalnum() else "_" for ch in shape.split()[0])  # "base (6+6, ...)" -> base
            path = Path(args.out) / f"decode_cpu_{slug}_{'greedy' if beam == 1 else f'beam{beam}'}_{compute}.json"
            path.write_text(json.dumps(record, indent=2) + "\n")


def _decode_inputs(args):
    """(model, tokenizer, config, sources as id lists, references or None)."""
    from transformer.checkpoint import build_model, load_checkpoint
    from transformer.config import load_config

    if args.checkpoint:
        from transformer.corpus import load_pairs

        model, tokenizer, config = build_model(load_checkpoint(args.checkpoint))
        texts, references = load_pairs(config.data.test, config.data)
        ids = tokenizer.encode_src(texts)
        limit = model.max_positions
        ids = [row if len(row) <= limit else row[: limit - 1] + [EOS] for row in ids]
        return model, tokenizer, config, ids, references
    config = load_config(args.config, [])
    torch.manual_seed(0)
    model = Transformer.from_config(config.model, src_vocab_size=args.vocab, tgt_vocab_size=args.vocab, pad_id=PAD)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(args.src_len // 2, args.src_len * 3 // 2, (args.sentences,), generator=g).tolist()
    ids = [torch.randint(4, args.vocab, (n - 1,), generator=g).tolist() + [EOS] for n in lengths]
    return model.eval(), _Pieces(args.vocab), config, ids, None


class _Pieces:
    """A stand-in vocabulary for a random model: piece i is "t<i>" (CTranslate2 needs names, not a tokenizer)."""

    def __init__(self, size: int) -> None:
        self.src_vocab_size = self.tgt_vocab_size = size

    def src_piece(self, i: int) -> str:
        return ("<pad>", "<unk>", "<s>", "</s>")[i] if i < 4 else f"t{i}"

    tgt_piece = src_piece


def _decode_engines(model, tokenizer, config, names, args, tmp) -> dict:
    """{compute: {engine name: run function}} for fp32 and int8, on weights exported from `model`."""
    from transformer import decode_benchmark as db
    from transformer.api import quantize_int8

    computes = args.computes.split(",")
    out = {c: {} for c in computes}
    if "ours" in names:
        for c in computes:
            out[c]["ours"] = db.ours_engine(model if c == "fp32" else quantize_int8(model))
    if "ctranslate2" in names:
        import ctranslate2

        from transformer.export import export_ctranslate2

        export_ctranslate2(model, tokenizer, config, tmp / "ct2", spm=False)
        for c in computes:
            translator = ctranslate2.Translator(str(tmp / "ct2"), device="cpu", compute_type="float32" if c == "fp32"
                                                else "int8", intra_threads=args.threads, inter_threads=1)  # fmt: skip
            out[c]["ctranslate2"] = db.ct2_engine(translator, tokenizer, suppress=not args.checkpoint)
    if "hf" in names and "fp32" in computes:
        from transformer.export import hf_model_from_ours

        hf_dir = tmp / "hf"
        hf_model_from_ours(model, config).save_pretrained(hf_dir)
        from transformers import AutoModelForSeq2SeqLM
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()  # "both max_new_tokens and max_length set": ours are per batch

        out["fp32"]["hf"] = db.hf_engine(AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval())
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["decode"]:
        decode_main(sys.argv[2:])
    else:
        main()
