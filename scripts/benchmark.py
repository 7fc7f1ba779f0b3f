"""Training throughput of our Transformer against peers of the same shape, in the same run.

    python scripts/benchmark.py --config configs/base.yaml --vocab 37000 --tokens 25000 --steps 20

Peers: PyTorch's `nn.Transformer` (with our embeddings and output layer around it) and, when `transformers` is
installed, Hugging Face's `MarianMTModel`. Each model trains on the same random batches of WMT-like lengths
(forward, label-smoothed loss, backward, Adam step) under the same precision; the script prints target tokens/s,
sentences/s and, on a GPU, the model FLOPs utilisation (6 * non-embedding params + attention, per token).
A benchmark, not a test: run it on the machine you want to know about and record the output in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
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


if __name__ == "__main__":
    main()
