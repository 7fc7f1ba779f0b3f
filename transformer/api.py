"""The Python API: a checkpoint in, translations out.

    from transformer import Translator
    t = Translator.from_checkpoint("runs/demo/checkpoint_last.pt", device="cpu", beam_size=4)
    t.translate(["Hola."])            # -> ["Hello."]
    t.translate(["Hola."], nbest=4)   # -> [[Translation(text, score, log_prob, tokens), ...]], best first
    t.translate(["Hola."], alignment=True)  # -> [Translation(text="Hello.", alignment=[(0, 0)], ...)]
    t.translate(["Hola amigo."], prefix=["Hello"], constraints=[["friend"]])  # steered (decoding/steering.py)
    t.translate(["Hola Juan."], glossary="terms.tsv")  # each term a line holds a constraint (decoding/glossary.py)
    Translator.from_checkpoint(path, glossary=Glossary.load("terms.tsv"))  # the glossary of every translate call
    t.score(["Hola."], ["Hello."])    # -> [Score(log_prob, tokens)]: log P(target | source), .per_token, .ppl
    Translator.from_checkpoint(["a.pt", "b.pt"])  # an ensemble: the models' probabilities averaged at every step
    t.with_decode(beam_size=8, alpha=1.0)   # the same model (shared, not copied) with other decoding settings
    t.translate_document("<p>Hola <b>amigo</b>.</p>", "html")  # a whole document, markup kept (documents/)
    t.translate(["Hola."], nbest=1)[0][0].confidence  # -> 0.71: in [0, 1] (decoding/confidence.py)
    t.confidence_threshold            # the checkpoint's default threshold (None: not calibrated)
    t.translate(["Abrir %s en https://x.org"])  # -> ["Open %s at https://x.org"]: protected spans kept as written
    t.translate(["Hola."], protect=Protection(patterns=(r"ACME-[0-9]+",)))  # from transformer import Protection

A thin layer over `streaming.StreamingEngine` (the engine behind transformer-translate): the same sorting
into token-bounded batches, order restored, truncation and empty-line handling. Decoding settings start from the
checkpoint's `decode` section; keyword arguments replace fields of `DecodeConfig` (beam_size, alpha,
length_penalty, max_len_a, max_len_b, min_len, max_tokens, ...), validated as the config is.
`precision` (default: the checkpoint's `decode.precision`) follows the one rule of precision.py.
`int8=True` (CPU only) runs the Linear layers in int8 through PyTorch's dynamic quantization (cpu_linear.py).
Several checkpoints (ensemble.py) must share one tokenizer; the first one's settings apply.
Every line gets a translation: where its prefix, constraints and repetition blocking conflict, they are set aside in
order (decoding/relaxation.py), with a warning, and each `Translation` names them (`relaxed`) and the phrases it
lacks (`unmet`); a glossary's terms are constraints like the caller's.
Every `Translation` has a `confidence` in [0, 1], from the checkpoint's calibration (transformer-calibrate; without
one, and for an ensemble, the uncalibrated exp(mean log-probability); decoding/confidence.py).
Protected spans (on by default: placeholders, URLs, e-mail addresses, paths, options, numbers, code, and the
`patterns` of a `Protection`; documents/spans.py) are masked from the model and put back by word alignment, each
exactly once (documents/protection.py): a `Translation` lists them (`protected`) and says whether one was placed
by position for want of an aligned word beside it (`by_position`); its score, tokens and confidence are the
search's, over the line the model read.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from transformer.config import CHUNK_LINES
from transformer.decoding.alignment import resolve_layer
from transformer.decoding.attention_maps import MAX_PIECES, Panel, attention_figures
from transformer.decoding.confidence import Calibration, read_calibration
from transformer.decoding.cpu_linear import quantize_int8
from transformer.decoding.glossary import Glossary, as_glossary
from transformer.decoding.interface import AttentionModel
from transformer.decoding.scoring import Score
from transformer.decoding.streaming import StreamingEngine, Translation, align_tokens, truncate_source, with_settings
from transformer.documents.lines import ProtectedLine
from transformer.documents.spans import Protection
from transformer.errors import UserError


class Translator:
    """Text in, text out, from a checkpoint. See the module docstring."""

    def __init__(
        self,
        model,
        tokenizer,
        config,
        *,
        device: str | torch.device = "cpu",
        precision: str | None = None,
        glossary: Glossary | None = None,
        calibration: Calibration | None = None,
    ):
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.device, self.precision = device, precision
        self.glossary = glossary  # the glossary of every `translate` call that names none
        self.calibration = calibration  # the confidence's map (decoding/confidence.py), None: uncalibrated
        self._engines: dict[int, StreamingEngine] = {}
        self._shared: dict[str, StreamingEngine] = {}  # the first engine built, shared with `with_decode`'s translators

    def with_decode(self, **decode: object) -> Translator:
        """This translator with `decode` keywords replacing decoding settings (beam_size, alpha, max_len_b, ...),
        validated as in `from_checkpoint`; the model, and its packed CPU copy, are shared, not copied."""
        config = _with_decode(self.config, decode)
        other = Translator(self.model, self.tokenizer, config, device=self.device, precision=self.precision)
        other.glossary, other.calibration, other._shared = self.glossary, self.calibration, self._shared
        return other

    @property
    def confidence_threshold(self) -> float | None:
        """The checkpoint's default confidence threshold, chosen on its validation set (None: not calibrated)."""
        return None if self.calibration is None else self.calibration.threshold

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path | Sequence[str | Path],
        *,
        device: str | torch.device = "cpu",
        precision: str | None = None,
        int8: bool = False,
        glossary: Glossary | str | Path | None = None,
        **decode: object,
    ) -> Translator:
        """Load `path` (weights_only), or several paths as an ensemble; `decode` keywords override the (first)
        checkpoint's decoding settings; `glossary` (a `Glossary` or a file, loaded once) steers every `translate`
        call that gives none."""
        from transformer.decoding.ensemble import load_models
        from transformer.devices import pick_device

        glossary = as_glossary(glossary)  # a bad file is refused before the checkpoint is read
        device = pick_device(str(device))
        paths = [path] if isinstance(path, (str, Path)) else list(path)
        model, tokenizer, config = load_models(paths, "cpu")
        config = _with_decode(config, decode)
        if int8:
            if device.type != "cpu":
                raise UserError("int8=True is PyTorch's CPU dynamic quantization; use device='cpu'")
            model = quantize_int8(model)
        calibration = read_calibration(paths)
        return cls(
            model, tokenizer, config, device=device, precision=precision, glossary=glossary, calibration=calibration
        )

    def _engine(self, nbest: int) -> StreamingEngine:
        if nbest not in self._engines:
            beam = self.config.decode.beam_size
            if nbest > beam:
                raise UserError(
                    f"nbest {nbest} needs beam_size >= {nbest} (it is {beam}): from_checkpoint(beam_size=...)"
                )
            decode = dataclasses.replace(self.config.decode, nbest=nbest)
            if "engine" not in self._shared:
                self._shared["engine"] = StreamingEngine(
                    self.model,
                    self.tokenizer,
                    decode,
                    device=self.device,
                    precision=self.precision,
                    calibration=self.calibration,
                )
            self._engines[nbest] = with_settings(self._shared["engine"], decode)
        return self._engines[nbest]

    def translate(
        self,
        texts: str | Sequence[str],
        *,
        nbest: int | None = None,
        alignment: bool = False,
        alignment_layer: int | None = None,
        prefix: str | Sequence[str] | None = None,
        constraints: Sequence[str] | Sequence[Sequence[str]] | None = None,
        replace_unk: bool = False,
        glossary: Glossary | str | Path | None = None,
        protect: bool | Protection = True,
    ) -> list[str] | list[Translation] | list[list[Translation]]:
        """texts -> one string each; with `nbest` N, up to N `Translation`s each (text, score, log_prob, tokens).

        alignment=True: `Translation`s (one each, or N each with `nbest`) whose `.alignment` lists the (source word,
        target word) links, from decoder layer `alignment_layer` (None: the last; decoding/alignment.py).
        prefix: one text per input ("" = none; a str for a str input): each output starts with its pieces, and
        scores include their log-probability. constraints: one list of phrases per input ([] = none; a list of
        str for a str input): each output contains every phrase, in any order (beam search: dynamic beam
        allocation, decoding/constraints.py, at a beam of max(beam_size, constraint_beam_size)). replace_unk: each
        <unk> of an output becomes the source text it is aligned to (decoding/unknown_words.py). glossary: a
        `Glossary` or a glossary file (loaded at each call: load it once with `Glossary.load`) for this call, in
        place of the translator's (None: the translator's; an empty `Glossary()`: none); the target terms of the
        terms each input holds join its constraints as whole words, at a beam of max(beam_size, glossary_beam_size)
        where they are all its constraints (decoding/glossary.py). protect: True (the default) keeps placeholders,
        URLs, numbers, code, ... as written; a `Protection` chooses (its numbers switch, its patterns); False: none.
        """
        if isinstance(texts, str):
            texts = [texts]
            prefix = [prefix] if isinstance(prefix, str) else prefix
            constraints = [constraints] if constraints is not None else None
        engine = self._engine(nbest or 1)
        glossary = self.glossary if glossary is None else as_glossary(glossary)
        steer = dict(prefix=prefix, constraints=constraints, replace_unk=replace_unk, glossary=glossary)
        protection = as_protection(protect)
        options = dict(alignment=alignment, alignment_layer=alignment_layer, **steer)
        results = list(translate_protected(engine, list(texts), protection, **options))
        if nbest is None:
            return [hyps[0] if alignment else hyps[0].text for hyps in results]
        return results

    def translate_document(
        self,
        document: str | bytes,
        format: str,
        *,
        attributes: bool = False,
        language: str | None = None,
        protect: bool | Protection = True,
        retranslate: bool = False,
    ) -> str | bytes:
        """A whole document (str, or UTF-8 bytes; bytes for "docx") translated as `format` (text, html, markdown,
        srt, vtt, docx, po, xliff), its markup kept and inline tags placed by word alignment; the same type back.
        Needs the `documents` extra. attributes: html's alt and title translated too; language: the source language
        for the sentence splitter (default: the checkpoint's data.src_lang); protect: as `translate`'s;
        retranslate: po and xliff entries already translated are translated again. docs/documents.md."""
        from transformer.documents import translate_document

        language = language or self.config.data.src_lang
        adapter = SentenceAdapter(self._engine(1), self.glossary)
        options = dict(attributes=attributes, protection=as_protection(protect), retranslate=retranslate)
        return translate_document(document, format, adapter, language=language, **options)

    @property
    def reads_attention(self) -> bool:
        """Whether alignments and attention maps can be read: one model's attention (a `Transformer`), not an
        ensemble's (one per member)."""
        return isinstance(self.model, AttentionModel)

    def cross_attention(
        self, text: str, tokens: Sequence[int], *, layer: int | None = None, max_pieces: int = MAX_PIECES
    ) -> tuple[int, Panel]:
        """(layer, panel): the cross-attention of decoder layer `layer` (None: the last; negative from the last),
        mean over heads, for source `text` (truncated as `translate` truncates it) and its translation's `tokens`
        (no BOS, no EOS). The panel's rows are the target pieces then </s>, its columns the source pieces then </s>,
        each row summing to 1 (`max_pieces` caps both; attention_maps.py)."""
        if not self.reads_attention:
            raise UserError("attention is read from one model's layers; this translator decodes with an ensemble")
        layer = resolve_layer(layer, len(self.model.decoder.layers))
        src_ids = truncate_source(self.tokenizer.encode_src([text.strip()])[0], self.model.max_positions, 1)
        figures = attention_figures(self.model, self.tokenizer, src_ids, list(tokens), max_pieces=max_pieces)
        return layer, next(f for f in figures if f.name == f"cross_layer{layer}").panels[0]  # the mean over heads

    def score(self, sources: str | Sequence[str], targets: str | Sequence[str]) -> list[Score]:
        """log P(target | source) of each line-aligned pair under teacher forcing: `Score(log_prob, tokens)`, with
        `per_token` and `ppl` (scoring.py; an empty source is not scored: tokens 0)."""
        sources, targets = ([x] if isinstance(x, str) else list(x) for x in (sources, targets))
        return self._engine(1).score(sources, targets)


class SentenceAdapter:
    """What transformer.documents asks of a model (its `SentenceTranslator`), over the streaming engine: the best
    translation of each sentence with its word alignment (None from an ensemble, which has no one attention), and
    whether a sentence is within the model's positions; with a glossary, each sentence's terms are constraints."""

    def __init__(self, engine: StreamingEngine, glossary: Glossary | None = None) -> None:
        self.engine, self.glossary = engine, glossary
        self.alignment = isinstance(engine.model, AttentionModel)

    def translate(self, sentences: list[str]) -> list[tuple[str, list[tuple[int, int]] | None]]:
        results = self.engine.translate(sentences, alignment=self.alignment, glossary=self.glossary)
        return [(hypotheses[0].text, hypotheses[0].alignment) for hypotheses in results]

    def fits(self, sentence: str) -> bool:
        return len(self.engine.tokenizer.encode_src([sentence])[0]) <= self.engine.model.max_positions


def as_protection(protect: bool | Protection) -> Protection:
    """`protect` as a `Protection` (True: the default one, False: none)."""
    if isinstance(protect, Protection):
        return protect
    if not isinstance(protect, bool):
        raise UserError(f"protect must be True, False or a Protection, got {protect!r}")
    return Protection() if protect else Protection.off()


def translate_protected(
    engine: StreamingEngine,
    lines: Iterable[str],
    protection: Protection,
    *,
    chunk_lines: int = CHUNK_LINES,
    alignment: bool = False,
    alignment_layer: int | None = None,
    **options,
) -> Iterator[list[Translation]]:
    """`engine.translate`'s results (streamed, a chunk at a time) with each line's protected spans masked before
    the search and placed back after it (documents/lines.py), by the word alignments of its hypotheses (computed
    for the lines with spans only; an ensemble reads none: by position). With `alignment`, a line with spans gets
    the links of its restored text to its own words."""
    if not protection.enabled:
        yield from engine.translate(
            lines, chunk_lines=chunk_lines, alignment=alignment, alignment_layer=alignment_layer, **options
        )
        return
    held: collections.deque[ProtectedLine] = collections.deque()

    def masked() -> Iterator[str]:
        for line in lines:
            held.append(ProtectedLine(line, protection))
            yield held[-1].text

    options |= dict(chunk_lines=chunk_lines, alignment=alignment, alignment_layer=alignment_layer)
    results = engine.translate(masked(), **options)
    while chunk := list(itertools.islice(results, chunk_lines)):
        yield from _restored(engine, [held.popleft() for _ in chunk], chunk, alignment, alignment_layer)


def _restored(engine, lines: list[ProtectedLine], chunk: list[list[Translation]], alignment: bool, layer) -> list:
    """Each line's hypotheses with its spans back (see `translate_protected`)."""
    reads = isinstance(engine.model, AttentionModel)
    todo = [(n, h) for n, line in enumerate(lines) if line.layout is not None and not line.skip for h in chunk[n]]
    links = iter(
        [h.alignment for _, h in todo]
        if alignment
        else align_tokens(engine, [lines[n].text for n, _ in todo], [h.tokens for _, h in todo], layer)
        if reads and todo
        else [None] * len(todo)
    )
    out = []
    for line, hypotheses in zip(lines, chunk):
        if line.layout is None:
            out.append(hypotheses)
            continue
        restored = []
        for h in hypotheses:
            text, guessed = line.restore(h.text, None if line.skip else next(links))
            restored.append(replace(h, text=text, protected=line.spans, by_position=guessed))
        out.append(restored)
    if alignment:  # the links of each restored text to its own line's words
        pairs = [(line.line, h) for line, hyps in zip(lines, out) if line.layout is not None for h in hyps]
        tokens = engine.tokenizer.encode_tgt([h.text.strip() for _, h in pairs]) if pairs else []
        fresh = iter(align_tokens(engine, [source for source, _ in pairs], tokens, layer) if pairs else [])
        out = [
            [replace(h, alignment=next(fresh)) for h in hyps] if line.layout is not None else hyps
            for line, hyps in zip(lines, out)
        ]
    return out


def _with_decode(config, decode: dict[str, object]):
    """`config` with its decode section's fields replaced by `decode` (validated; unknown names refused)."""
    unknown = sorted(set(decode) - {f.name for f in dataclasses.fields(config.decode)})
    if unknown:
        names = ", ".join(unknown)
        raise UserError(f"unknown decoding setting(s) {names}; see DecodeConfig in transformer/config/sections.py")
    return config.replace("decode", **decode) if decode else config
