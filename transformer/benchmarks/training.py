"""Training throughput of our Transformer against peers of the same shape (scripts/benchmark.py runs it): the random
batches, the peers (`nn.Transformer` around our embeddings and output layer; Hugging Face's Marian; ours under
`torch.compile`), one training step each, the interleaved timing, the FLOPs a target token costs (for MFU), and a
profile of where a step's time goes (the host's operators against the GPU's kernels).

Legend: B batch (sentences), S source length, T target length, D d_model, V vocabulary.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass

import torch
from torch import nn

from transformer.data.batching import Batch
from transformer.data.tokenizer import PAD_ID
from transformer.model.transformer import Transformer
from transformer.precision import autocast
from transformer.training.loss import label_smoothed_loss
from transformer.training.optim import batch_loss


def make_batches(
    n: int, max_tokens: int, vocab: int, mean_len: int, device: torch.device, seed: int = 0, shapes: int = 0
):
    """Batches of sentences with a common length (as length bucketing gives), each holding ~max_tokens tokens;
    `shapes` > 0: the lengths cycle through that many values (what a graphed step needs, one capture per shape)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(mean_len // 2, mean_len * 3 // 2, (max(shapes, 1),), generator=g).tolist()
    batches = []
    for i in range(n):
        S = lengths[i % shapes] if shapes else int(torch.randint(mean_len // 2, mean_len * 3 // 2, (1,), generator=g))
        T = S + 2
        B = max(max_tokens // T, 1)
        src = torch.randint(4, vocab, (B, S), generator=g)
        tgt = torch.randint(4, vocab, (B, T + 1), generator=g)
        batch = Batch(src, tgt[:, :-1], tgt[:, 1:], indices=list(range(B)))  # tgt_index made here, on the host
        batches.append(batch.to(device))
    return batches


class TorchPeer(nn.Module):
    """nn.Transformer with the same embeddings (x sqrt(d_model), sinusoids) and tied output as ours."""

    def __init__(self, ours: Transformer, cfg) -> None:
        super().__init__()
        self.ours = ours  # embeddings and output projection only
        self.core = nn.Transformer(
            d_model=cfg.d_model,
            nhead=cfg.n_heads,
            num_encoder_layers=cfg.n_encoder_layers,
            num_decoder_layers=cfg.n_decoder_layers,
            dim_feedforward=cfg.d_ff,
            dropout=cfg.dropout,
            batch_first=True,
            norm_first=cfg.norm_first,
        )

    def forward(self, src, tgt_in):
        enc, dec = self.ours.encoder, self.ours.decoder
        x = enc.embed(src)
        y = dec.embed(tgt_in)
        T = tgt_in.size(1)
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=src.device)
        h = self.core(
            x,
            y,
            tgt_mask=mask,
            src_key_padding_mask=src == PAD_ID,
            memory_key_padding_mask=src == PAD_ID,
            tgt_is_causal=True,
        )
        return self.ours.output_proj(h)


def marian_peer(cfg, vocab: int):
    from transformers import MarianConfig, MarianMTModel

    from transformer.interop.marian import marian_fields

    fields = marian_fields(cfg, vocab, training=True)
    config = MarianConfig(decoder_vocab_size=vocab, share_encoder_decoder_embeddings=True, **fields)
    model = MarianMTModel(config)

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, src, tgt_in):
            return self.m(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt_in).logits

    return Wrapped()


def _resident_bytes(model: nn.Module, optimizer) -> int:
    """Bytes of the model's parameters and the optimizer's state tensors."""
    tensors = [*model.parameters(), *(t for st in optimizer.state.values() for t in st.values() if torch.is_tensor(t))]
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class Engine:
    """A model to train and how: `fused` True/False for our model's loss paths (`optim.batch_loss`: the chunked
    pad-free loss, or full logits), None for a peer's logits through `label_smoothed_loss`; `graphed`: the whole
    step captured as a CUDA graph per batch shape and replayed (`GraphedSteps`)."""

    model: nn.Module
    fused: bool | None
    graphed: GraphedSteps | None = None


class GraphedSteps:
    """Our training step (forward, the chunked loss, backward, a capturable fused Adam) captured once per batch
    shape and replayed: the measurement that decides whether the trainer's step earns a CUDA-graph switch (the
    house rule: a speed trick that gains < 10% end to end earns none). Bench batches have no padding, so one shape
    has one number of target positions. Autocast runs without its weight-cast cache, as a captured region needs."""

    def __init__(self) -> None:
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, Batch]] = {}
        self.pool = None  # one memory pool for every shape's graph: they never run at once
        self.bytes = 0  # what the warm-ups and captures left allocated: static batches and the graphs' pool

    def __call__(self, engine: Engine, optimizer, batch: Batch, precision: str) -> None:
        key = (*batch.src.shape, *batch.tgt_in.shape)
        if key not in self.graphs:
            before = torch.cuda.memory_allocated()
            static = Batch(batch.src.clone(), batch.tgt_in.clone(), batch.tgt_out.clone(), indices=batch.indices)
            static.tgt_index = batch.tgt_index.clone()
            step = lambda: self._step(engine, optimizer, static, precision)  # noqa: E731
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):  # warm-up: library handles, the optimizer's state, gradients allocated
                    step()
            torch.cuda.current_stream().wait_stream(stream)
            graph, self.pool = torch.cuda.CUDAGraph(), self.pool or torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph, pool=self.pool):
                step()
            self.graphs[key] = graph, static
            self.bytes += torch.cuda.memory_allocated() - before
        graph, static = self.graphs[key]
        for name in ("src", "tgt_in", "tgt_out", "tgt_index"):
            getattr(static, name).copy_(getattr(batch, name))
        graph.replay()

    @staticmethod
    def _step(engine: Engine, optimizer, batch: Batch, precision: str) -> None:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None, cache_enabled=False):
            loss, _ = batch_loss(engine.model, batch, precision="fp32", epsilon=0.1, pad_id=PAD_ID, fused=True)
        (loss / batch.n_tgt_tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)


def train_step(engine: Engine, optimizer, batch: Batch, precision: str) -> None:
    """Forward, label-smoothed loss, backward, Adam step."""
    if engine.graphed is not None:
        return engine.graphed(engine, optimizer, batch, precision)
    model = engine.model
    if engine.fused is None:
        with autocast(precision, batch.src.device):
            logits = model(batch.src, batch.tgt_in)
        loss, _ = label_smoothed_loss(logits, batch.tgt_out, epsilon=0.1, pad_id=PAD_ID)
    else:
        loss, _ = batch_loss(model, batch, precision=precision, epsilon=0.1, pad_id=PAD_ID, fused=engine.fused)
    (loss / batch.n_tgt_tokens).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure(
    engines: dict, batches, precision: str, device: torch.device, warmup: int, rounds: int, profile: int = 0
) -> dict:
    """Target tokens/s per engine: after `warmup` untimed steps each, `rounds` interleaved rounds over all the
    batches (engine A, B, C, A, B, C, ...), so that a machine shared with other jobs slows all of them alike.
    Returns {name: {"tokens_per_s": median over rounds, "rounds": [...], "peak_mem_gb": CUDA peak or None,
    "warmup_s": the warm-up's seconds, a compilation's or capture's included; a graphed engine's "graphs_gb", what
    its captures hold, counted in its peak}}, and
    with `profile` > 0 each engine's `profile_steps` over that many batches after the rounds ("profile")."""
    state, warmed = {}, {}  # warmed: seconds of each engine's warm-up (compilation, graph captures included)
    for name, engine in engines.items():
        kwargs = {"fused": True} if device.type == "cuda" else {}
        if engine.graphed is not None:  # a captured step reads the learning rate and the step count on the device
            kwargs |= {"capturable": True, "lr": torch.tensor(1e-4, device=device)}
        kwargs = {"lr": 1e-4} | kwargs
        optimizer = torch.optim.Adam(engine.model.parameters(), betas=(0.9, 0.98), eps=1e-9, **kwargs)
        engine.model.train()
        start = time.perf_counter()
        for batch in batches[:warmup]:
            train_step(engine, optimizer, batch, precision)
        if device.type == "cuda":
            torch.cuda.synchronize()
        state[name], warmed[name] = optimizer, round(time.perf_counter() - start, 1)
    results = {name: {"rounds": [], "peak_mem_gb": None, "warmup_s": warmed[name]} for name in engines}
    for _ in range(rounds):
        for name, engine in engines.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            start = time.perf_counter()
            for batch in batches[warmup:]:
                train_step(engine, state[name], batch, precision)
            if device.type == "cuda":  # this engine's weights and Adam state + its steps' peak (the others idle)
                torch.cuda.synchronize()
                peak = (torch.cuda.max_memory_allocated() - before + _resident_bytes(engine.model, state[name])) / 1e9
                results[name]["peak_mem_gb"] = round(max(peak, results[name]["peak_mem_gb"] or 0.0), 2)
            tokens = sum(b.n_tgt_tokens for b in batches[warmup:])
            results[name]["rounds"].append(round(tokens / (time.perf_counter() - start), 1))
    tokens_per_step = sum(b.n_tgt_tokens for b in batches[warmup:]) / len(batches[warmup:])
    for name, result in results.items():
        result["tokens_per_s"] = statistics.median(result["rounds"])
        if engines[name].graphed is not None:  # held since the warm-up, so not in the rounds' peak: added here
            result["graphs_gb"] = round(engines[name].graphed.bytes / 1e9, 2)
            result["peak_mem_gb"] = round((result["peak_mem_gb"] or 0.0) + result["graphs_gb"], 2)
        if profile:
            step_ms = 1e3 * tokens_per_step / result["tokens_per_s"]  # timed, not profiled
            profiled = batches[warmup : warmup + profile]
            try:  # a profiler that fails on some device or version must not cost the figures above
                result["profile"] = profile_steps(engines[name], state[name], profiled, precision, step_ms)
            except Exception as exc:
                result["profile"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return results


def profile_steps(engine: Engine, optimizer, batches, precision: str, step_ms: float) -> dict:
    """Where a training step's time goes, from torch.profiler over `batches` (after the timed rounds): the operators
    the host dispatched per step (every `aten::` call, nested ones too: each costs the host some microseconds), and
    on a GPU its kernels per step, the time they kept it busy per step, that time's share of `step_ms` (the step's
    wall time in the timed rounds: the profiler slows the host, not the kernels) and the kernels that took most of
    it. A GPU busy for much less than the step waits on the host (launch-bound: fewer, larger kernels help,
    torch.compile or larger batches); a GPU busy all along is limited by the kernels listed."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = batches[0].src.is_cuda
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])]
    with profile(activities=activities) as prof:
        for batch in batches:
            train_step(engine, optimizer, batch, precision)
        if on_gpu:
            torch.cuda.synchronize()
    events = prof.events()
    n = len(batches)
    ops = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CPU and e.name.startswith("aten::"))
    result = {"steps": n, "step_ms": round(step_ms, 2), "host_ops_per_step": round(ops / n)}
    if on_gpu:
        gpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]  # kernels, copies, fills
        kernels = Counter()
        for e in gpu:
            kernels[e.name] += e.time_range.elapsed_us()
        busy = sum(kernels.values()) / 1e3 / n
        result |= {
            "kernels_per_step": round(len(gpu) / n),
            "gpu_busy_ms": round(busy, 2),
            "gpu_busy_share": round(busy / result["step_ms"], 3),
            "top_kernels": [
                {"name": name[:80], "ms_per_step": round(us / 1e3 / n, 2)} for name, us in kernels.most_common(8)
            ],
        }
    return result


def profile_line(profile: dict) -> str:
    """One line of `profile_steps`' result, for the benchmark's output."""
    if "error" in profile:
        return f"failed ({profile['error']})"
    line = f"{profile['step_ms']:.1f} ms a step, {profile['host_ops_per_step']:,} host ops a step"
    if "gpu_busy_ms" not in profile:
        return line
    top = ", ".join(f"{k['name'][:40]} {k['ms_per_step']:.1f}" for k in profile["top_kernels"][:3])
    return (
        f"{line}, {profile['kernels_per_step']:,} kernels a step keeping the GPU busy {profile['gpu_busy_ms']:.1f} ms "
        f"({profile['gpu_busy_share']:.0%}); top kernels (ms a step): {top}"
    )


def flops_per_token(model: Transformer, cfg, mean_len: int, src_per_tgt: float) -> float:
    """Training FLOPs per target token: the encoder's work is per source token (`src_per_tgt` of them per target
    token), the decoder's and the output layer's per target token. Each: 6 x its parameters (forward and backward)
    + 6 x 2 x length x d_model per layer for the attention scores and values (self-attention over its own length,
    the decoder's cross-attention over the source's). Embedding lookups cost nothing; a tied output matrix counts
    once, as the output layer's matrix product."""
    layers = lambda stack: sum(p.numel() for layer in stack.layers for p in layer.parameters())  # noqa: E731
    encoder, decoder = layers(model.encoder), layers(model.decoder)
    output = model.output_proj.weight.numel()
    attention = 6 * 2 * mean_len * cfg.d_model
    per_source = 6 * encoder + attention * cfg.n_encoder_layers
    per_target = 6 * (decoder + output) + attention * 2 * cfg.n_decoder_layers
    return src_per_tgt * per_source + per_target


def build_engines(args, cfg, peers: set[str]) -> dict[str, Engine]:
    """{JSON name: Engine}: ours with the trainer's settings, then the peers asked for."""
    new = lambda: Transformer.from_config(cfg, src_vocab_size=args.vocab, tgt_vocab_size=args.vocab, pad_id=PAD_ID)
    builders = {"ours": lambda: Engine(new(), True)}
    if "reference" in peers:
        builders["ours_reference_loss"] = lambda: Engine(new(), False)
    if "compiled" in peers:  # as train.compile, dynamic from the first batch: one graph for every batch shape
        builders["ours_compiled"] = lambda: Engine(torch.compile(new(), dynamic=True), True)
    if "graphed" in peers and args.device.type == "cuda":  # CUDA graphs need CUDA
        builders["ours_graphed"] = lambda: Engine(new(), True, GraphedSteps())
    if "compiled_graphed" in peers and args.device.type == "cuda":
        builders["ours_compiled_graphed"] = lambda: Engine(torch.compile(new(), dynamic=False), True, GraphedSteps())
    if "torch" in peers:
        builders["nn_transformer"] = lambda: Engine(TorchPeer(new(), cfg), None)
    if "marian" in peers:
        builders["hf_marian"] = lambda: Engine(marian_peer(cfg, args.vocab), None)
    engines = {}
    for name, build in builders.items():
        try:
            engine = build()
        except Exception as exc:  # a peer that is missing or breaks under this version: left out, ours stays
            if name == "ours":
                raise
            print(f"{name:<20} skipped ({type(exc).__name__}: {exc})")
            continue
        model = engine.model.to(args.device)
        engine.model = torch.compile(model) if args.compile and name != "ours_compiled" else model
        engines[name] = engine
    return engines


def gpu_peak(given: float, device: str) -> tuple[float | None, str | None]:
    """The GPU's dense bf16 peak: --peak-tflops, else from its name; (None, why) for a GPU we have no figure for."""
    from transformer.benchmarks.gpu_peaks import peak_tflops

    if given:
        return given, f"given with --peak-tflops for {device}"
    found = peak_tflops(device)
    return found if found else (None, f"no peak known for {device}: pass --peak-tflops")


def round_ratios(results: dict) -> dict:
    """Median over rounds of ours / engine within each round: on a shared machine a round's engines run back to
    back under much the same load, so this steadier figure goes beside the ratio of the medians."""
    ours = results["ours"]["rounds"]
    per_round = lambda k: [a / b for a, b in zip(ours, results[k]["rounds"])]
    return {f"ours/{k}": round(statistics.median(per_round(k)), 3) for k in results if k != "ours"}
