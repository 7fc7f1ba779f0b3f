"""Text in, text out: tokenize, batch by length, search (decoding.py), detokenize, in input order, streaming.

Legend: B batch (sentences), S source length.

Decisions:
- One result per input line, always, in order: an empty or whitespace-only line gives one empty `Translation`
  (score 0) without running the model; a line longer than `model.max_positions` source tokens is truncated to
  that many (its EOS kept last) with a warning naming the line number, never dropped.
- Lines are read lazily, `chunk_lines` at a time (config.CHUNK_LINES, 1000, by default; 1 suits an interactive
  terminal), so a pipe gets its output as it goes. Within a chunk, sentences are sorted by length into batches of
  at most `decode.max_tokens` padded source tokens (`batching.build_batches`), and the results restored to input order.
- Precision: `decode.precision` (or the `precision` argument, which overrides it) under the one rule of
  precision.py, as in training: bf16 autocast on CUDA or CPU, fp16 on CUDA only, auto = bf16 on a GPU that supports
  it. The decoder's log-probabilities are float32 either way.
- Sampling draws from a `torch.Generator` on the model's device seeded with `seed`, so output is reproducible.
- Lines with lexical constraints are searched apart from the other lines of their chunk, batched together by
  length, with a wider beam: max(decode.beam_size, decode.glossary_beam_size) where the constraints are glossary
  terms only, else max(decode.beam_size, decode.constraint_beam_size) (`constraint_beam`, `_search_groups`); a chunk
  without them is batched and searched as before.
- Every line gets a translation: constraints that cannot fit are set aside before the search (steering.py), and a
  line whose controls conflict in the search is searched again with them relaxed (relaxation.py). Each
  `Translation` says which controls were set aside for its line (`relaxed`) and which phrases it does not meet
  (`unmet`), by the automaton the search follows (phrases.py).
- Word alignments (`translate(..., alignment=True)`): one teacher-forced pass per batch after the search
  (alignment.py), so the search runs as without them.
- Every `Translation` has a `confidence` in [0, 1] (confidence.py): features of the search's result and the
  source, no extra pass, mapped by the checkpoint's calibration (`calibration`; None: the uncalibrated fallback).
- A line in ALL CAPS is translated in sentence case and its translations upper-cased (`decode.fold_capitals`,
  casing.py); their `tokens` are the search's, of the folded translation.
"""

from __future__ import annotations

import collections
import copy
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from transformer.config import CHUNK_LINES, DecodeConfig
from transformer.data.batching import build_batches
from transformer.data.tokenizer import EOS_ID, source_surfaces
from transformer.decoding.alignment import align, resolve_layer
from transformer.decoding.casing import fold_capitals
from transformer.decoding.confidence import Calibration, LineFeatures, confidences
from transformer.decoding.cpu_linear import pack_linears
from transformer.decoding.ensemble import members
from transformer.decoding.glossary import Glossary
from transformer.decoding.interface import AttentionModel
from transformer.decoding.relaxation import steered_search
from transformer.decoding.scoring import Score, score_texts
from transformer.decoding.steering import Steering, steered, unmet_texts, word_continuations
from transformer.decoding.unknown_words import restore_unknown
from transformer.devices import OutOfMemoryError, avoid_cudnn_attention, out_of_memory
from transformer.errors import UserError
from transformer.model.attention import make_pad_mask
from transformer.precision import autocast, resolve_precision

log = logging.getLogger(__name__)


@dataclass
class Translation:
    """One hypothesis for one input line."""

    text: str  # detokenized output
    score: float  # the search's score (log P / length penalty for beam search)
    log_prob: float  # sum of token log-probabilities (EOS included when the hypothesis finished)
    tokens: list[int]  # output ids without BOS and EOS
    alignment: list[tuple[int, int]] | None = None  # (source word, target word) links when asked for (alignment.py)
    relaxed: tuple[str, ...] = ()  # the line's controls set aside, of relaxation.py's RELAXATIONS
    unmet: tuple[str, ...] = ()  # the line's constraint phrases (as given) that this output does not meet
    confidence: float = 1.0  # in [0, 1], higher is better (confidence.py); 1 for an empty line
    protected: tuple[tuple[str, str], ...] = ()  # (kind, text) of each span kept as written (documents/spans.py)
    by_position: bool = False  # some protected span had no aligned word beside it: placed by its relative place


class StreamingEngine:
    """A model (or an `ensemble.Ensemble`), its tokenizer and decoding settings: `translate(lines)` streams one
    result list per line; `score(sources, targets)` scores given translations."""

    def __init__(
        self,
        model,
        tokenizer,
        decode: DecodeConfig,
        device: str | torch.device = "cpu",
        precision: str | None = None,
        *,
        seed: int = 1,
        calibration: Calibration | None = None,
    ) -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda":
            avoid_cudnn_attention()
        model = getattr(model, "module", model)  # DistributedDataParallel: decode with the wrapped module
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.settings = decode  # the DecodeConfig (not to be confused with model.decode)
        self.precision = resolve_precision(precision or decode.precision, self.device)  # bf16, fp16 or fp32
        if self.device.type == "cpu" and self.precision == "fp32":
            self.model = pack_linears(self.model)  # the same arithmetic, faster on the CPU (cpu_linear.py)
        self.generator = torch.Generator(device=self.device).manual_seed(seed) if decode.sampling else None
        self.calibration = calibration  # the checkpoint's confidence calibration (confidence.py), or None
        self._features: LineFeatures | None = None
        self.word_pieces: torch.Tensor | None = None  # the target pieces that continue a word, once a term asks

    @property
    def features(self) -> LineFeatures:
        """The confidence's features for this tokenizer (its short pieces read once, at first use)."""
        if self._features is None:
            self._features = LineFeatures(self.tokenizer)
        return self._features

    def translate(
        self,
        lines: Iterable[str],
        *,
        chunk_lines: int = CHUNK_LINES,
        progress: Callable[[int], Any] | None = None,
        alignment: bool = False,
        alignment_layer: int | None = None,
        prefix: Iterable[str] | None = None,
        constraints: Iterable[Sequence[str]] | None = None,
        replace_unk: bool = False,
        glossary: Glossary | None = None,
    ) -> Iterator[list[Translation]]:
        """For each input line, in order: its best `decode.nbest` translations, best first (one for an empty line).

        progress: called with the number of sentences each decoded batch finished, as they finish (a progress bar's
        `update`), not once per chunk. alignment: fill each `Translation.alignment` (empty for an empty line) from
        the cross-attention of decoder layer `alignment_layer` (None: the last, alignment.py). prefix: one text per
        line ("" = none) the output starts with; constraints: one list of phrases per line ([] = none) the output
        contains, in any order (beam search only; steering.py). replace_unk: each <unk> of the output becomes the
        source text it is aligned to (unknown_words.py; an ensemble's first model's attention). glossary: the target
        terms of the terms each line holds join its constraints (glossary.py; an empty one asks nothing).
        """
        if alignment and not isinstance(self.model, AttentionModel):
            raise UserError("word alignments read one model's attention: an ensemble has one per model")
        if (constraints is not None or glossary) and self.settings.search != "beam":
            what = "lexical constraints need" if constraints is not None else "a glossary's terms (constraints) need"
            raise UserError(f"{what} beam search (dynamic beam allocation): a beam size of 2 or more")
        layer = resolve_layer(alignment_layer, len(self.model.decoder.layers)) if alignment else None
        upper: collections.deque[bool] = collections.deque()  # per line read, in order: upper-case its results
        folded = self._folded(lines, upper)
        items, first, options = steered(folded, self.tokenizer, prefix, constraints, glossary), 1, (layer, replace_unk)
        while chunk := list(itertools.islice(items, chunk_lines)):
            for results in self._translate_chunk(chunk, first, progress or (lambda n: None), options):
                yield [replace(t, text=t.text.upper()) for t in results] if upper.popleft() else results
            first += len(chunk)

    def _folded(self, lines: Iterable[str], upper: collections.deque) -> Iterator[str]:
        """The lines to translate, those in ALL CAPS in sentence case (casing.py); `upper` gets a flag per line."""
        for line in lines:
            text, capitals = fold_capitals(line) if self.settings.fold_capitals else (line, False)
            upper.append(capitals)
            yield text

    def translate_texts(self, lines: Iterable[str]) -> list[str]:
        """The best translation's text for each line."""
        return [results[0].text for results in self.translate(lines)]

    def score(
        self, sources: Sequence[str], targets: Sequence[str], *, progress: Callable[[int], Any] | None = None
    ) -> list[Score]:
        """Each target's log-probability given its source under teacher forcing (scoring.py), in input order."""
        return score_texts(
            self.model,
            self.tokenizer,
            sources,
            targets,
            max_tokens=self.settings.max_tokens,
            device=self.device,
            precision=self.precision,
            progress=progress,
        )

    def _translate_chunk(self, items: list, first_line: int, progress: Callable, options) -> list[list[Translation]]:
        """items: (line, Steering or None); options: (alignment layer or None, replace_unk)."""
        chunk, steerings, (layer, replace_unk) = [line for line, _ in items], [s for _, s in items], options
        results = [
            [Translation(text="", score=0.0, log_prob=0.0, tokens=[], alignment=None if layer is None else [])]
            for _ in chunk
        ]  # an empty line's result; an empty alignment when asked for
        todo = [i for i, line in enumerate(chunk) if line.strip()]
        if len(todo) < len(chunk):
            progress(len(chunk) - len(todo))  # empty lines are done at once
        if not todo:
            return results
        encoded = self.tokenizer.encode_src([chunk[i].strip() for i in todo])
        encoded = [truncate_source(ids, self.model.max_positions, first_line + i) for i, ids in zip(todo, encoded)]
        surfaces = source_surfaces(self.tokenizer, [chunk[i].strip() for i in todo]) if replace_unk else None
        lines = [_Line(first_line + i, steerings[i], surfaces and surfaces[j]) for j, i in enumerate(todo)]
        for settings, group in _search_groups(self.settings, lines):  # one search width each (constraints: wider)
            lengths = [len(encoded[j]) for j in group]
            order, bounds = build_batches(lengths, lengths, max_tokens=self.settings.max_tokens, seed=0)
            for start, end in zip(bounds[:-1], bounds[1:]):
                batch = [group[o] for o in order[start:end].tolist()]
                found = self._translate_batch([encoded[j] for j in batch], layer, [lines[j] for j in batch], settings)
                for j, translations in zip(batch, found):
                    results[todo[j]] = translations
                progress(len(batch))
        return results

    def _translate_batch(
        self,
        sources: list[list[int]],
        layer: int | None = None,
        lines: list[_Line] | None = None,
        settings: DecodeConfig | None = None,
    ) -> list[list[Translation]]:
        """Source ids (each ending in EOS) -> per sentence, its hypotheses as `Translation`s, with their word
        alignments from decoder layer `layer` unless it is None; lines: the sentences' line numbers, prefixes and
        constraints, and (for replace_unk) their source pieces' characters; settings: the search's (by default the
        translator's; `_search_groups`)."""
        settings = settings or self.settings
        lines = lines or [_Line(0, None, None)] * len(sources)
        B, S = len(sources), max(len(ids) for ids in sources)
        src = _padded(sources, self.model.pad_id).to(self.device)  # (B, S)
        src_mask = make_pad_mask(src, self.model.pad_id)  # (B, 1, 1, S)
        with autocast(self.precision, self.device):
            try:
                steerings, numbers = [line.steering for line in lines], [line.number for line in lines]
                ids = dict(bos_id=self.tokenizer.bos_id, eos_id=EOS_ID, generator=self.generator)
                ids["continuations"] = self._continuations(steerings)
                hypotheses, relaxed = steered_search(self.model, src, src_mask, settings, steerings, numbers, **ids)
                flat = [(b, h.tokens) for b, hyps in enumerate(hypotheses) for h in hyps]
                links = iter(align(self.model, self.tokenizer, src, flat, layer=layer) if layer is not None else [])
                texts = self.tokenizer.decode_tgt([tokens for _, tokens in flat])
                if lines[0].surfaces is not None:
                    texts = restore_unknown(
                        members(self.model)[0], self.tokenizer, src, flat, texts, [line.surfaces for line in lines]
                    )
            except OutOfMemoryError as exc:
                raise _out_of_memory(settings, exc, sentences=B, length=S) from None
        rows = [self.features.row(sources[b], h.tokens, h.log_prob) for b, hyps in enumerate(hypotheses) for h in hyps]
        texts, confidence = iter(texts), iter(confidences(rows, self.calibration))
        results = []
        for hyps, names, line in zip(hypotheses, relaxed, lines):
            unmet = unmet_texts(line.steering, [h.tokens for h in hyps])
            results.append(
                [
                    Translation(
                        next(texts),
                        h.score,
                        h.log_prob,
                        h.tokens,
                        next(links, None),
                        relaxed=names,
                        unmet=u,
                        confidence=next(confidence),
                    )
                    for h, u in zip(hyps, unmet)
                ]
            )
        return results

    def _continuations(self, steerings: list[Steering | None]) -> torch.Tensor | None:
        """The target pieces a glossary term is never followed by (steering.py), read from the tokenizer once, where
        a line holds a term; else None."""
        if not any(s and any(s.words) for s in steerings):
            return None
        if self.word_pieces is None:
            self.word_pieces = word_continuations(self.tokenizer)
        return self.word_pieces


@dataclass(frozen=True)
class _Line:
    """What one sentence of a batch carries besides its source ids."""

    number: int  # its input line number, from 1
    steering: Steering | None  # its prefix and constraints
    surfaces: list[str] | None  # its source pieces' characters, for replace_unk


def align_tokens(
    engine: StreamingEngine, sources: Sequence[str], targets: Sequence[Sequence[int]], layer: int | None = None
) -> list[list[tuple[int, int]]]:
    """Word links of each (source line, target ids without BOS and EOS) pair from decoder layer `layer` (None:
    the last): one teacher-forced pass per batch (alignment.py), for translations made without alignments."""
    layer = resolve_layer(layer, len(engine.model.decoder.layers))
    links: list[list[tuple[int, int]]] = [[] for _ in sources]
    todo = [j for j, source in enumerate(sources) if source.strip()]
    if not todo:
        return links
    encoded = engine.tokenizer.encode_src([sources[j].strip() for j in todo])
    encoded = [truncate_source(ids, engine.model.max_positions, j + 1) for j, ids in zip(todo, encoded)]
    lengths = [len(ids) + len(targets[j]) for ids, j in zip(encoded, todo)]
    order, bounds = build_batches(lengths, lengths, max_tokens=engine.settings.max_tokens, seed=0)
    for start, end in zip(bounds[:-1], bounds[1:]):
        batch = order[start:end].tolist()
        src = _padded([encoded[k] for k in batch], engine.model.pad_id).to(engine.device)  # (B, S)
        pairs = [(b, targets[todo[k]]) for b, k in enumerate(batch)]
        with autocast(engine.precision, engine.device):
            found = align(engine.model, engine.tokenizer, src, pairs, layer=layer)
        for k, pair_links in zip(batch, found):
            links[todo[k]] = pair_links
    return links


def _padded(sources: list[list[int]], pad_id: int) -> torch.Tensor:
    """Source ids -> (B, S) long, padded with pad_id."""
    src = torch.full((len(sources), max(len(ids) for ids in sources)), pad_id, dtype=torch.long)  # (B, S)
    for b, ids in enumerate(sources):
        src[b, : len(ids)] = torch.tensor(ids)
    return src


def _search_groups(settings: DecodeConfig, lines: list[_Line]) -> list[tuple[DecodeConfig, list[int]]]:
    """A chunk's lines (their places in `lines`) by the settings they are searched with, each group batched apart:
    `settings` themselves for the lines of `constraint_beam(...) == beam_size` (all of them without constraints, so
    a chunk without constraints is searched exactly as before), and `beam_size` widened for the others, narrowest
    first. The n-best count stays `settings.nbest`."""
    groups: dict[int, list[int]] = {}
    for j, line in enumerate(lines):
        groups.setdefault(constraint_beam(settings, line.steering), []).append(j)
    return [
        (settings if width == settings.beam_size else replace(settings, beam_size=width), members)
        for width, members in sorted(groups.items())
    ]


def constraint_beam(settings: DecodeConfig, steering: Steering | None) -> int:
    """The beam a line is searched with: beam_size for a line without constraints; max(beam_size,
    glossary_beam_size) for one whose constraints are all glossary terms; max(beam_size, constraint_beam_size) for
    one with a phrase of the caller's. Dynamic beam allocation shares the beam among the banks, one per count of
    constraint pieces met, so it needs a wider beam than plain search (Post & Vilar 2018 decode with beams of 10 to
    20). Both widths were chosen on the demo model's dev books, against the time they cost (docs/decoding.md): the
    rare words a caller asks gain up to 10; a glossary's frequent terms, most of which the model writes unasked,
    keep within twice the time of translating without them at 4, the plain beam's default, on one thread and two."""
    if not (steering and steering.phrases):
        return settings.beam_size
    terms_only = len(steering.words) == len(steering.phrases) and all(steering.words)
    return max(settings.beam_size, settings.glossary_beam_size if terms_only else settings.constraint_beam_size)


def truncate_source(ids: list[int], limit: int, line_number: int) -> list[int]:
    """Source ids longer than the model's `limit` positions cut to it (EOS kept last), with a warning."""
    if len(ids) <= limit:
        return ids
    log.warning("line %d: %d source tokens, truncated to %d (the model's maximum)", line_number, len(ids), limit)
    return ids[: limit - 1] + [EOS_ID]


def _out_of_memory(settings: DecodeConfig, exc: BaseException, *, sentences: int, length: int) -> UserError:
    beam = f", beam {settings.beam_size}" if settings.search == "beam" else ""
    what = f"decoding a batch of {sentences} sentences of up to {length} source tokens{beam}"
    limit = settings.max_tokens
    if sentences == 1:  # no smaller batch to make
        return out_of_memory(exc, what, "one sentence does not fit: a smaller --beam or --max-len-b, or --device cpu")
    return out_of_memory(
        exc, what, f"lower --max-tokens (decode.max_tokens, now {limit}), e.g. --max-tokens {limit // 2}"
    )


def with_settings(translator: StreamingEngine, decode: DecodeConfig, *, seed: int = 1) -> StreamingEngine:
    """`translator` with other decoding settings, sharing its model (and the model's packed CPU copy)."""
    other = copy.copy(translator)
    other.settings = decode
    other.generator = torch.Generator(device=translator.device).manual_seed(seed) if decode.sampling else None
    return other
