"""The model behind the server: one `Translator` (one model or an ensemble), decoded with each request's settings.

Requests may change the search (beam size, length penalty, lengths, n-best, alignments) within the server's limits;
`Translator.with_decode` gives a translator with those settings over the same model, and the last few such
translators are kept (`VARIANTS`). Search controls that take one value per line (`CONTROLS`: prefix, constraints)
and switches (`OPTIONS`: replace_unk) pass through to `Translator.translate` as keyword arguments. The model is used
by one thread at a time (`lock`): the batcher's worker, or an attention request. `source_tokens` and `target_pieces`
cut text as the translator does, for the server's limits and budgets (work.py); they run off the event loop.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from transformer.api import Translator
from transformer.documents.spans import PROTECT, Protection

CONTROLS = ("prefix", "constraints")  # per-line search controls passed through to Translator.translate
OPTIONS = ("replace_unk",)  # per-request switches (true/false) passed through to Translator.translate
VARIANTS = 16  # translators with other settings kept (they share the model; each holds only its settings)
ATTENTION_PIECES = 60  # rows and columns of an attention answer (attention_maps.py caps and sums past this)


@dataclass(frozen=True)
class Settings:
    """What a request's lines are decoded with; requests with equal settings are decoded together."""

    decode: tuple[tuple[str, Any], ...] = ()  # (DecodeConfig field, value) pairs replaced, sorted by name
    nbest: int = 1  # hypotheses per line
    alignment: bool = False  # word alignments for each hypothesis
    alignment_layer: int | None = None  # the decoder layer they are read from (None: the last)
    controls: tuple[str, ...] = ()  # the per-line controls given (names from CONTROLS)
    options: tuple[tuple[str, bool], ...] = ()  # (name from OPTIONS, value) pairs given
    protection: Protection = PROTECT  # what is kept as written (protected.py)


class Engine:
    """Decodes lines with `Settings` (from the batcher's thread) and draws one sentence's attention."""

    def __init__(self, translator: Translator) -> None:
        self.translator = translator
        self.tokenizer = translator.tokenizer
        self.defaults = translator.config.decode
        self.languages = (translator.config.data.src_lang, translator.config.data.tgt_lang)
        self.attends = translator.reads_attention  # one model: alignments and attention; an ensemble: not
        self.threshold = translator.confidence_threshold  # the default confidence threshold (None: uncalibrated)
        self.lock = threading.Lock()
        self._variants: OrderedDict[tuple, Any] = OrderedDict()

    @property
    def max_positions(self) -> int:
        """The model's positions: an output is at most max_positions - 1 pieces long, whatever a request asks."""
        return self.translator.model.max_positions

    def source_tokens(self, lines: list[str]) -> list[int]:
        """Each line's source tokens (pieces + EOS; 0 for an empty line), as the translator cuts it."""
        return _lengths(self.tokenizer.encode_src, lines)

    def target_pieces(self, texts: list[str]) -> list[int]:
        """Each text's target pieces (0 for an empty one), as a prefix or a constraint phrase is cut."""
        return _lengths(self.tokenizer.encode_tgt, texts)

    def decode(self, settings: Settings, lines: list[str], controls: dict[str, list]) -> list[list]:
        """One list of `Translation`s (best first, `settings.nbest` long at most) per line, in order."""
        translator = self._variant(settings.decode)
        with self.lock:
            return translator.translate(
                lines,
                nbest=settings.nbest,
                alignment=settings.alignment,
                alignment_layer=settings.alignment_layer,
                **controls,
                **dict(settings.options),
                **({} if settings.protection == PROTECT else {"protect": settings.protection}),  # else the default
            )

    def _variant(self, decode: tuple[tuple[str, Any], ...]):
        if decode not in self._variants:
            self._variants[decode] = self.translator.with_decode(**dict(decode)) if decode else self.translator
            if len(self._variants) > VARIANTS:
                self._variants.popitem(last=False)
        self._variants.move_to_end(decode)
        return self._variants[decode]

    def attention(self, text: str, tokens: list[int], layer: int | None) -> dict:
        """The cross-attention (mean over heads) of decoder layer `layer` (None: the last) for source `text` and
        its translation's `tokens`: {"layer", "rows" (target pieces, then </s>), "columns" (source pieces, then
        </s>), "weights" (rows x columns, each row summing to 1)}."""
        with self.lock:
            layer, panel = self.translator.cross_attention(text, tokens, layer=layer, max_pieces=ATTENTION_PIECES)
        weights = [[round(float(w), 4) for w in row] for row in panel.weights.tolist()]
        return {"layer": layer, "rows": panel.rows, "columns": panel.columns, "weights": weights}


def _lengths(encode, texts: list[str]) -> list[int]:
    """len(encode(text.strip())) of each text, 0 for a blank one (not encoded)."""
    kept = [text.strip() for text in texts if text.strip()]
    counts = iter([len(ids) for ids in encode(kept)] if kept else [])
    return [next(counts) if text.strip() else 0 for text in texts]
