"""Decoding speed of our search against CTranslate2 and Hugging Face `generate`, on the same exported weights.

Legend: B batch (sentences), S source length, K beam.

Every engine decodes the same pre-tokenized batches (sorted by source length, `batch_size` sentences each) with
the same settings, which is what makes their outputs comparable token for token:
- length penalty len^alpha with the EOS counted (ours `length_penalty: fairseq`; HF and CT2 `length_penalty`),
  stop a sentence at K finished hypotheses (ours always; HF `early_stopping=True`; CT2 `patience=1`);
- one maximum output length per batch, floor(max_len_a * S_max + max_len_b) with S_max the batch's longest source
  (HF and CT2 have no per-sentence limit); `forced` > 0 instead forces every output to exactly that many tokens
  (min = max length), the setting for random weights;
- PAD and BOS banned after the log-softmax in ours and HF (`bad_words_ids`). CT2 is told only for random weights
  (see `ct2_engine`): a trained model never picks them, and CT2's outputs then match ours token for token.
Tokenization and detokenization are outside the timings. Target tokens/s counts each engine's own output tokens
(EOS excluded), so identical outputs give identical counts. Each engine runs in a process of its own
(`EngineProcesses`): in a shared one they slow each other down. The engines take turns every few batches
(`time_engines`): the speed of a shared machine drifts by 10-20% within minutes, and whole passes one after the
other measured that drift as much as the engines.
Compute types (`COMPUTES`): on the CPU fp32 (ours with packed Linear weights) and int8 (ours: PyTorch's dynamic
quantization; CT2 int8; HF has none); on a GPU fp32, fp16 and bf16, every engine holding its weights in that type
(ours and HF cast, CT2 converts at load) and decoding with them, as CT2 does.

`decode_inputs` gives a trained checkpoint's test split or a random model with random sources, `decode_engines`
the engines on its exported weights, `time_engines` their timings, `compare_engines` each one's speed, agreement
with ours and BLEU;
`scripts/benchmark.py decode` parses the options and writes one JSON per search and compute type.
"""

from __future__ import annotations

import copy
import math
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial

import torch

from transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_PIECES
from transformer.decoding.graph_search import graphed_search
from transformer.decoding.search import beam_search, greedy_decode
from transformer.devices import avoid_cudnn_attention
from transformer.model.attention import make_pad_mask

COMPUTES = {  # compute type -> (torch dtype of ours and HF, CTranslate2's compute_type); int8: CPU only, not HF
    "fp32": (torch.float32, "float32"),
    "fp16": (torch.float16, "float16"),
    "bf16": (torch.bfloat16, "bfloat16"),
    "int8": (None, "int8"),
}
TURN_BATCHES = 4  # the engines take turns every this many batches (`time_engines`)
DEVICE_COMPUTES = {"cpu": ("fp32", "int8"), "cuda": ("fp16", "bf16", "fp32")}  # offered per device, defaults first


@dataclass(frozen=True)
class DecodeSettings:
    beam: int  # 1 = greedy
    alpha: float  # length penalty exponent, len^alpha
    max_len_a: float  # per-batch maximum output length a * S_max + b (ignored when forced > 0)
    max_len_b: int
    forced: int = 0  # > 0: every output exactly this many tokens

    def limits(self, longest: int) -> tuple[int, int]:
        """(min, max) output tokens for a batch whose longest source has `longest` tokens (EOS incl.)."""
        if self.forced:
            return self.forced, self.forced
        return 0, int(math.floor(self.max_len_a * longest + self.max_len_b + 1e-6))


def batches_of(sources: list[list[int]], batch_size: int) -> list[list[int]]:
    """Indices into `sources`, sorted by length (longest first), cut into batches of `batch_size`."""
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def pad(rows: list[list[int]]) -> torch.Tensor:
    """(B, S) long, PAD after each row."""
    out = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for b, row in enumerate(rows):
        out[b, : len(row)] = torch.tensor(row)
    return out


def ours_engine(model, graphs: bool = False) -> Callable:
    """Our eager searches (beam.py, search.py's greedy decoding), or with `graphs` graph_search.py's (on CUDA one
    captured graph replayed per step; the engine "ours_graphs")."""
    device = next(model.parameters()).device

    def run(rows: list[list[int]], s: DecodeSettings) -> list[list[int]]:
        src = pad(rows).to(device)
        low, high = s.limits(src.size(1))
        kw = dict(bos_id=BOS_ID, eos_id=EOS_ID, max_len_a=0.0, max_len_b=high, min_len=low)
        if graphs:
            search = dict(beam_size=s.beam, alpha=s.alpha, length_penalty="fairseq", nbest=1)
            return [h[0].tokens for h in graphed_search(model, src, make_pad_mask(src, PAD_ID), **search, **kw)]
        if s.beam == 1:
            return [h.tokens for h in greedy_decode(model, src, make_pad_mask(src, PAD_ID), **kw)]
        hyps = beam_search(
            model,
            src,
            make_pad_mask(src, PAD_ID),
            beam_size=s.beam,
            alpha=s.alpha,
            length_penalty="fairseq",
            nbest=1,
            **kw,
        )
        return [h[0].tokens for h in hyps]

    return run


def hf_engine(hf_model) -> Callable:
    def run(rows: list[list[int]], s: DecodeSettings) -> list[list[int]]:
        src = pad(rows).to(hf_model.device)
        low, high = s.limits(src.size(1))
        with torch.inference_mode():
            out = hf_model.generate(
                input_ids=src,
                attention_mask=src != PAD_ID,
                num_beams=s.beam,
                do_sample=False,
                max_new_tokens=high,
                min_new_tokens=low,
                length_penalty=s.alpha,
                early_stopping=True,
            ).tolist()
        result = []
        for row in out:
            row = row[1:]  # the decoder start token
            end = min([row.index(t) for t in (EOS_ID, PAD_ID) if t in row], default=len(row))
            result.append(row[:end])
        return result

    return run


def ct2_engine(translator, src_pieces: list[str], tgt_pieces: list[str], *, suppress: bool = False) -> Callable:
    """`suppress`: ban PAD and BOS (needed for random weights, whose tied embeddings favour the input token; CT2
    then renormalises over the other tokens, which ours and HF do not, so beam scores differ slightly)."""
    banned = [[tgt_pieces[PAD_ID]], [tgt_pieces[BOS_ID]]] if suppress else None
    piece_id = {piece: i for i, piece in enumerate(tgt_pieces)}

    def run(rows: list[list[int]], s: DecodeSettings) -> list[list[int]]:
        low, high = s.limits(max(map(len, rows)))
        results = translator.translate_batch(
            [[src_pieces[i] for i in row] for row in rows],
            beam_size=s.beam,
            length_penalty=s.alpha,
            max_decoding_length=high,
            min_decoding_length=low,
            max_batch_size=0,
            patience=1,
            suppress_sequences=banned,
        )
        return [[piece_id[p] for p in r.hypotheses[0]] for r in results]

    return run


def build_engine(name: str, compute: str, threads: int, source, device: str = "cpu", **options) -> Callable:
    """The run function of one engine on `device` ("cpu" with `threads` threads, or "cuda") in `compute`
    (`COMPUTES`): "ours" decodes `source` (our model): on the CPU packed for fp32, quantized for int8, otherwise
    cast; "ctranslate2" and "hf" load their export in the folder `source` (`options`: the pieces and `suppress` of
    `ct2_engine`)."""
    torch.set_num_threads(threads)
    if device == "cuda":
        avoid_cudnn_attention()  # ours and HF alike, as `StreamingEngine` does: cuDNN would plan every new shape anew
    dtype, ct2_compute = COMPUTES[compute]
    if name in ("ours", "ours_graphs"):
        from transformer.decoding.cpu_linear import pack_linears, quantize_int8

        graphs = name == "ours_graphs"
        if device == "cpu" and compute in ("fp32", "int8"):
            return ours_engine(pack_linears(source) if compute == "fp32" else quantize_int8(source), graphs)
        return ours_engine(copy.deepcopy(source).to(device=device, dtype=dtype), graphs)  # the caller's model stays
    if name == "ctranslate2":
        import ctranslate2

        translator = ctranslate2.Translator(
            str(source), device=device, compute_type=ct2_compute, intra_threads=threads, inter_threads=1
        )
        return ct2_engine(translator, **options)
    from transformers import AutoModelForSeq2SeqLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # "both max_new_tokens and max_length set": ours are per batch
    return hf_engine(AutoModelForSeq2SeqLM.from_pretrained(source).to(device=device, dtype=dtype).eval())


class EngineProcesses:
    """Each engine in a process of its own, built there once by its factory (`build_engine` with its arguments)
    and kept for every call; a context manager that ends the processes.

    Why: CTranslate2 brings its own OpenMP runtime, and once it has run in a process, PyTorch's parallel operations
    there slow down (a LayerNorm of 128 rows: 12 us -> 58 us on 2 threads; our beam search on the demo model 4,150
    -> 2,800 tokens/s), so engines sharing a process measure each other (docs/benchmarks.md).
    """

    def __init__(self, factories: dict[str, Callable[[], Callable]]) -> None:
        context = multiprocessing.get_context("spawn")
        self.pools = {
            name: ProcessPoolExecutor(1, mp_context=context, initializer=_start_engine, initargs=(factory,))
            for name, factory in factories.items()
        }
        self.left_out = {}

    left_out: dict[str, str]  # engine -> why it was left out (it could not load or crashed)

    def leave_out(self, name: str, why: str) -> None:
        print(f"{name} left out: {why}", flush=True)
        self.left_out[name] = why
        self.pools.pop(name).shutdown(wait=False, cancel_futures=True)

    def run(self, name: str, batches: list[list[list[int]]], settings: DecodeSettings):
        """(seconds, outputs): engine `name` decodes the batches of source ids in turn, timed in its process."""
        return self.pools[name].submit(_run_engine, batches, settings).result()

    def __enter__(self) -> EngineProcesses:
        return self

    def __exit__(self, *exc) -> None:
        for pool in self.pools.values():
            pool.shutdown(cancel_futures=True)


_ENGINE: Callable | None = None  # the engine of this process, in an EngineProcesses worker


def _start_engine(factory: Callable[[], Callable]) -> None:
    global _ENGINE
    _ENGINE = factory()


def _run_engine(batches: list[list[list[int]]], settings: DecodeSettings) -> tuple[float, list[list[list[int]]]]:
    start = time.perf_counter()
    outputs = [_ENGINE(rows, settings) for rows in batches]
    return time.perf_counter() - start, outputs


def time_engines(
    engines: EngineProcesses, sources, batches, settings: DecodeSettings, repeats: int, turn: int = TURN_BATCHES
):
    """Run the engines `repeats` times over all batches, taking turns every `turn` batches (the engines' order
    reversed at every other turn), so that a machine whose speed drifts within minutes slows them all alike; per
    engine the fastest repeat's seconds (its turns added up), its output token count and its outputs (in source
    order)."""
    rows = [[sources[i] for i in batch] for batch in batches]
    for name in list(engines.pools):  # warm-up, untimed: first-call allocations and lazy initialisation
        try:
            engines.run(name, rows[:1], settings)
        except Exception as exc:  # a peer that cannot load or crashed: left out, never the loss of our figures
            if name == "ours":
                raise
            engines.leave_out(name, f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}")
    names = list(engines.pools)
    best: dict[str, dict] = {}
    for _ in range(repeats):
        seconds, per_batch = dict.fromkeys(names, 0.0), {name: [] for name in names}
        for start in range(0, len(rows), turn):
            for name in names if start // turn % 2 == 0 else names[::-1]:
                took, outputs = engines.run(name, rows[start : start + turn], settings)
                seconds[name] += took
                per_batch[name] += outputs
        for name in names:
            outputs: list[list[int] | None] = [None] * len(sources)
            for batch, hyps in zip(batches, per_batch[name]):
                for i, hyp in zip(batch, hyps):
                    outputs[i] = hyp
            tokens = sum(len(h) for h in outputs)
            if name not in best or seconds[name] < best[name]["seconds"]:
                best[name] = {
                    "seconds": round(seconds[name], 3),
                    "tokens": tokens,
                    "tokens_per_s": round(tokens / seconds[name], 1),
                    "outputs": outputs,
                }
    return best


class RandomPieces:
    """A stand-in vocabulary for a random model: piece i is "t<i>" (CTranslate2 needs names, not a tokenizer)."""

    def __init__(self, size: int) -> None:
        self.src_vocab_size = self.tgt_vocab_size = size

    def src_piece(self, i: int) -> str:
        return SPECIAL_PIECES[i] if i < len(SPECIAL_PIECES) else f"t{i}"

    tgt_piece = src_piece


def decode_inputs(checkpoint: str | None, *, config_path: str, vocab: int, sentences: int, src_len: int):
    """(model, tokenizer, config, sources as id lists, references or None): a checkpoint's test split, or without
    one a random model of `config_path`'s shape and `sentences` random sources of about `src_len` tokens."""
    from transformer.checkpoint import build_model, load_checkpoint
    from transformer.config import load_config
    from transformer.model.transformer import Transformer

    if checkpoint:
        from transformer.data.corpus import load_pairs

        model, tokenizer, config = build_model(load_checkpoint(checkpoint))
        texts, references = load_pairs(config.data.test, config.data)
        ids = tokenizer.encode_src(texts)
        limit = model.max_positions
        ids = [row if len(row) <= limit else row[: limit - 1] + [EOS_ID] for row in ids]
        return model, tokenizer, config, ids, references
    config = load_config(config_path, [])
    torch.manual_seed(0)
    model = Transformer.from_config(config.model, src_vocab_size=vocab, tgt_vocab_size=vocab, pad_id=PAD_ID)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(src_len // 2, src_len * 3 // 2, (sentences,), generator=g).tolist()
    ids = [torch.randint(4, vocab, (n - 1,), generator=g).tolist() + [EOS_ID] for n in lengths]
    return model.eval(), RandomPieces(vocab), config, ids, None


def decode_engines(
    model,
    tokenizer,
    config,
    names: list[str],
    computes: list[str],
    *,
    threads: int,
    random_weights: bool,
    tmp,
    device: str = "cpu",
    left_out: dict[str, str] | None = None,
) -> dict[str, dict[str, Callable[[], Callable]]]:
    """{compute: {engine name: factory}} for `computes` (`COMPUTES`) on `device`: `build_engine` bound to our model
    or to the weights exported from it into `tmp` (done here), for `EngineProcesses`. HF has no int8. A peer whose
    export raises is left out, with the reason in `left_out`."""
    out: dict[str, dict[str, Callable]] = {c: {} for c in computes}
    for ours in ("ours", "ours_graphs"):
        for c in computes if ours in names else ():
            out[c][ours] = partial(build_engine, ours, c, threads, model, device=device)
    ct2_export = lambda: _export_ct2(model, tokenizer, config, tmp)  # noqa: E731
    if "ctranslate2" in names and _exported("ctranslate2", left_out, ct2_export):
        pieces = dict(
            src_pieces=[tokenizer.src_piece(i) for i in range(tokenizer.src_vocab_size)],
            tgt_pieces=[tokenizer.tgt_piece(i) for i in range(tokenizer.tgt_vocab_size)],
            suppress=random_weights,
        )
        for c in computes:
            out[c]["ctranslate2"] = partial(
                build_engine, "ctranslate2", c, threads, tmp / "ct2", device=device, **pieces
            )
    hf_computes = [c for c in computes if c != "int8"]
    if "hf" in names and hf_computes and _exported("hf", left_out, lambda: _export_hf(model, config, tmp)):
        for c in hf_computes:
            out[c]["hf"] = partial(build_engine, "hf", c, threads, tmp / "hf", device=device)
    return out


def _export_ct2(model, tokenizer, config, tmp) -> None:
    from transformer.interop.export import export_ctranslate2

    export_ctranslate2(model, tokenizer, config, tmp / "ct2", spm=False)


def _export_hf(model, config, tmp) -> None:
    from transformer.interop.export import hf_model_from_ours

    hf_model_from_ours(model, config).save_pretrained(tmp / "hf")


def _exported(name: str, left_out: dict[str, str] | None, export: Callable[[], None]) -> bool:
    """Run a peer's export; False (the reason in `left_out`, or raised without one) when it raises."""
    try:
        export()
    except Exception as exc:
        if left_out is None:
            raise
        left_out[name] = f"its export raised {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
        print(f"{name} left out: {left_out[name]}", flush=True)
        return False
    return True


def compare_engines(result: dict[str, dict], tokenizer, references: list[str] | None) -> dict[str, dict]:
    """Per engine of `time_engines`' result: tokens/s, seconds and tokens; the share of sentences decoded exactly as
    ours did (`same_as_ours`, when ours ran) and, with references, sacreBLEU BLEU."""
    ours = result.get("ours", {}).get("outputs")
    engines = {}
    for name, r in result.items():
        entry = {k: r[k] for k in ("tokens_per_s", "seconds", "tokens")}
        if ours is not None:
            entry["same_as_ours"] = round(sum(a == b for a, b in zip(r["outputs"], ours)) / len(ours), 4)
        if references is not None:
            from transformer.evaluation import corpus_scores

            entry["bleu"] = corpus_scores(tokenizer.decode_tgt(r["outputs"]), references)["bleu"]
        engines[name] = entry
    return engines
