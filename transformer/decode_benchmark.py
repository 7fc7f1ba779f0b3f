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
(EOS excluded), so identical outputs give identical counts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from transformer.attention import make_pad_mask
from transformer.decoding import beam_search, greedy_decode
from transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID


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


def ours_engine(model) -> Callable:
    def run(rows: list[list[int]], s: DecodeSettings) -> list[list[int]]:
        src = pad(rows)
        low, high = s.limits(src.size(1))
        kw = dict(bos_id=BOS_ID, eos_id=EOS_ID, max_len_a=0.0, max_len_b=high, min_len=low)
        if s.beam == 1:
            return [h.tokens for h in greedy_decode(model, src, make_pad_mask(src, PAD_ID), **kw)]
        hyps = beam_search(model, src, make_pad_mask(src, PAD_ID), beam_size=s.beam, alpha=s.alpha,
                           length_penalty="fairseq", nbest=1, **kw)  # fmt: skip
        return [h[0].tokens for h in hyps]

    return run


def hf_engine(hf_model) -> Callable:
    def run(rows: list[list[int]], s: DecodeSettings) -> list[list[int]]:
        src = pad(rows)
        low, high = s.limits(src.size(1))
        with torch.inference_mode():
            out = hf_model.generate(
                input_ids=src, attention_mask=src != PAD_ID, num_beams=s.beam, do_sample=False, max_new_tokens=high,
                min_new_tokens=low, length_penalty=s.alpha, early_stopping=True,
            ).tolist()  # fmt: skip
        result = []
        for row in out:
            row = row[1:]  # the decoder start token
            end = min([row.index(t) for t in (EOS_ID, PAD_ID) if t in row], default=len(row))
            result.append(row[:end])
        return result

    return run


def ct2_engine(translator, tokenizer, *, suppress: bool = False) -> Callable:
    """`suppress`: ban PAD and BOS (needed for random weights, whose tied embeddings favour the input token; CT2
    then renormalises over the other tokens, which ours and HF do not, so beam scores differ slightly)."""
    banned = [[tokenizer.tgt_piece(PAD_ID)], [tokenizer.tgt_piece(BOS_ID)]] if suppress else None
    src_piece, piece_id = tokenizer.src_piece, {tokenizer.tgt_piece(i): i for i in range(tokenizer.tgt_vocab_size)}

    def run(rows: list[list[int]], s: DecodeSettings) -> list[list[int]]:
        low, high = s.limits(max(map(len, rows)))
        results = translator.translate_batch(
            [[src_piece(i) for i in row] for row in rows], beam_size=s.beam, length_penalty=s.alpha,
            max_decoding_length=high, min_decoding_length=low, max_batch_size=0, patience=1,
            suppress_sequences=banned,
        )  # fmt: skip
        return [[piece_id[p] for p in r.hypotheses[0]] for r in results]

    return run


def time_engines(engines: dict[str, Callable], sources, batches, settings: DecodeSettings, repeats: int):
    """Run the engines interleaved `repeats` times over all batches; per engine the fastest run's seconds,
    its output token count and its outputs (in source order)."""
    best: dict[str, dict] = {}
    for run in engines.values():  # warm-up, untimed: first-call allocations and lazy initialisation
        run([sources[i] for i in batches[0]], settings)
    for _ in range(repeats):
        for name, run in engines.items():
            outputs: list[list[int] | None] = [None] * len(sources)
            start = time.perf_counter()
            for batch in batches:
                for i, hyp in zip(batch, run([sources[i] for i in batch], settings)):
                    outputs[i] = hyp
            seconds = time.perf_counter() - start
            tokens = sum(len(h) for h in outputs)
            if name not in best or seconds < best[name]["seconds"]:
                best[name] = {"seconds": round(seconds, 3), "tokens": tokens,
                              "tokens_per_s": round(tokens / seconds, 1), "outputs": outputs}  # fmt: skip
    return best
