"""Beam search and greedy decoding in fixed shapes, one CUDA graph replay a step: the GPU fast path of beam.py and
search.py (`decode.cuda_graphs`, on by default on a CUDA device).

Legend: B batch (sentences), S source length, V vocabulary, K beam, N = B*K rows, T the longest output of the
batch (positions), F = 2K places for a sentence's finished hypotheses.

Why: the eager searches launch every operator of the decoder from the host at each step, a few tokens per row: on
an H200 a base decoder step of 128 rows takes 3.6 ms launched from the host and 0.58 ms replayed as a graph
(docs/benchmarks.md, "Decoding as CUDA graphs").

How: a whole step (the model's `decode_step` over model/static_cache.py's cache, PAD and BOS and early EOS
forbidden, the controls' `mask_static`, and the search's own update) reads and writes only tensors allocated
before it, in fixed shapes, with the step number a () tensor on the device; so it is captured once and replayed.
What the eager searches do by shrinking the batch is masked here: a finished sentence (beam) or row (greedy) stays
and is ignored; beam search starts with K rows per sentence whose scores are [0, -inf, ...], which selects the
same candidates as its one row per sentence; finished hypotheses go into fixed places on the device. The host reads
one flag every `CHECK_EVERY` steps (is every sentence done?) and the finished hypotheses once, at the end.

The results are the eager searches' (the same rules, the same sums in the same order; scores computed on the host
by the same function); the tests compare them token for token in fp32 on the CPU, where the same code runs without
capture. Searches this path cannot take run eagerly: sampling, an ensemble, a control that keeps per-row state or
chooses the candidates (prefixes, constraints; `Controls.graphable`).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable

import torch

from transformer.decoding.candidates import select_top
from transformer.decoding.controls import Controls
from transformer.decoding.steps import NEG_INF, Hypothesis, ban_row, lp, max_output_lengths
from transformer.model.attention import make_pad_mask
from transformer.model.static_cache import init_static_cache

CHECK_EVERY = 4  # steps between the host's looks at the done flags (each one waits for the device)
GRAPHS_PER_MODEL = 8  # captured shapes kept per model, least recently used dropped first
ROUND = (8, 16, 16)  # on CUDA, B, S and T are padded up to multiples of these, so that batches share graphs


class _Step:
    """What every graphed search holds: the rows' tokens (N, T+2) (BOS first, step s's piece in column s+1), the
    step number, each sentence's maximum length and the model's cache; `advance()` is one step."""

    def __init__(self, model, memory, src_mask, *, beams: int, capacity: int, ids: dict, controls: Controls) -> None:
        B = src_mask.size(0)
        self.model, self.controls, self.ids = model, controls, ids
        self.cache = init_static_cache(model, memory, src_mask, beams=beams, capacity=capacity)
        self.tokens = torch.full((B * beams, capacity + 2), ids["bos_id"], dtype=torch.long, device=memory.device)
        self.step = torch.zeros((), dtype=torch.long, device=memory.device)
        self.max_lens = torch.zeros(B, dtype=torch.long, device=memory.device)

    def begin(self, memory: torch.Tensor, src_mask: torch.Tensor, max_lens: torch.Tensor) -> None:
        """Start a batch of this search's shapes: memory (B, S, D), src_mask (B, 1, 1, S), max_lens (B,) long."""
        self.cache.restart(self.model, memory, src_mask)
        self.tokens.fill_(self.ids["bos_id"])
        self.step.zero_()
        self.max_lens.copy_(max_lens)
        self.start()

    def log_probs(self) -> torch.Tensor:
        """The next-token log-probabilities (N, V) as steps.next_log_probs gives them, in fixed shapes."""
        last = self.tokens.index_select(1, self.step.view(1))  # (N, 1)
        log_probs = self.model.decode_step(last, self.cache)  # (N, V)
        ban = ban_row((self.model.pad_id, self.ids["bos_id"]), log_probs.dtype, log_probs.device)
        log_probs[:, : ban.numel()] += ban  # PAD and BOS, as steps._forbid adds them
        early = torch.where(self.step < self.ids["min_len"], NEG_INF, 0.0)  # EOS before min_len tokens
        log_probs[:, self.ids["eos_id"]] += early
        return self.controls.mask_static(log_probs, self.tokens, self.step)

    def append(self, pieces: torch.Tensor) -> None:
        """Write each row's new piece (N,) in the column after the step, and count the step."""
        self.tokens.index_copy_(1, self.step.view(1) + 1, pieces[:, None])
        self.step += 1


class _Greedy(_Step):
    """search.py's greedy decoding (`_decode_rows` with argmax) with finished rows masked, not dropped."""

    def __init__(self, model, memory, src_mask, **kwargs) -> None:
        super().__init__(model, memory, src_mask, beams=1, **kwargs)
        B, device = src_mask.size(0), memory.device
        self.log_prob = torch.zeros(B, device=device)  # (B,)
        self.lengths = torch.zeros(B, dtype=torch.long, device=device)  # (B,)
        self.alive = torch.zeros(B, dtype=torch.bool, device=device)  # (B,)

    def start(self) -> None:
        self.log_prob.zero_()
        self.lengths.zero_()
        self.alive.copy_(self.max_lens > 0)

    def advance(self) -> None:
        log_probs = self.log_probs()  # (B, V)
        pieces = log_probs.argmax(dim=-1).masked_fill(~self.alive, self.model.pad_id)  # (B,)
        picked = log_probs.gather(1, pieces[:, None]).squeeze(1)  # (B,)
        self.log_prob += torch.where(self.alive, picked, torch.zeros_like(picked))
        self.append(pieces)
        ended = self.alive & (pieces == self.ids["eos_id"])  # (B,)
        self.lengths += (self.alive & ~ended).long()
        self.alive &= ~ended & (self.step < self.max_lens)

    def done(self) -> torch.Tensor:
        return ~self.alive.any()

    def results(self, sentences: int, score_fn) -> list[list[Hypothesis]]:
        rows = self.tokens[:sentences, 1:].tolist()
        pairs = zip(rows, self.lengths.tolist(), self.log_prob.tolist())
        return [[Hypothesis(tokens[:n], total, total)] for tokens, n, total in pairs]


class _Beam(_Step):
    """beam.py's beam search with done sentences masked, not dropped, and finished hypotheses stored on the device:
    per sentence F = 2K places (fewer than K finished before its last step, at most K more in it), a dump place
    after them for the candidates that do not finish."""

    def __init__(self, model, memory, src_mask, *, beams: int, capacity: int, **kwargs) -> None:
        super().__init__(model, memory, src_mask, beams=beams, capacity=capacity, **kwargs)
        B, K, device = src_mask.size(0), beams, memory.device
        self.scores = torch.zeros(B, K, device=device)  # (B, K) log P of the alive hypotheses
        self.finished = torch.zeros(B, dtype=torch.bool, device=device)  # (B,) done sentences
        places = (B, 2 * K + 1)
        self.fin_tokens = torch.zeros(*places, capacity + 1, dtype=torch.long, device=device)  # (B, F+1, T+1)
        self.fin_log_prob = torch.zeros(places, device=device)  # (B, F+1)
        self.fin_length = torch.zeros(places, dtype=torch.long, device=device)  # (B, F+1) pieces, EOS excluded
        self.fin_eos = torch.zeros(places, dtype=torch.bool, device=device)  # (B, F+1)
        self.fin_count = torch.zeros(B, dtype=torch.long, device=device)  # (B,)

    def start(self) -> None:
        """As beam.py starts: one hypothesis per sentence until the first step makes K (scores [0, -inf, ...]), and
        the sentences with room for no piece finalised at once."""
        self.scores.fill_(NEG_INF)[:, 0] = 0.0
        self.fin_count.zero_()
        self.finished.copy_(self.max_lens == 0)
        B, K = self.scores.shape
        own = torch.arange(B * K, device=self.scores.device).view(B, K)  # (B, K)
        self._store(self.finished[:, None] & (self.scores > NEG_INF), own, self.scores, eos=False)

    def _store(self, which: torch.Tensor, rows: torch.Tensor, log_prob: torch.Tensor, eos: bool) -> None:
        """Hypotheses rows (B, K) of `tokens` where `which` (B, K) becomes finished, with log_prob (B, K) (and an EOS
        after their pieces when `eos`), in their sentences' next free places, in rank order."""
        B, K = which.shape
        place = torch.where(which, which.long().cumsum(1) - 1 + self.fin_count[:, None], 2 * K)  # (B, K)
        history = self.tokens.index_select(0, rows.flatten()).view(B, K, -1)[:, :, 1:]  # (B, K, T+1)
        self.fin_tokens.scatter_(1, place[:, :, None].expand_as(history), history)
        self.fin_log_prob.scatter_(1, place, log_prob)
        self.fin_length.scatter_(1, place, self.step.expand(B, K))
        self.fin_eos.scatter_(1, place, torch.full_like(which, eos))
        self.fin_count += which.sum(dim=1)

    def advance(self) -> None:
        """beam.py's `_beam_step`, then `_finalise_at_max_length`, then the cache's and controls' re-ranking."""
        B, K = self.scores.shape
        log_probs = self.log_probs()  # (N, V)
        V = log_probs.size(-1)
        k = min(2 * K, K * V)
        top, where, priority = select_top(log_probs.view(B, K, V), self.scores, k)  # (B, k) each
        is_eos = where % V == self.ids["eos_id"]  # (B, k)
        ending = is_eos[:, :K] & (top[:, :K] > NEG_INF) & ~self.finished[:, None]  # (B, K)
        self._store(ending, where[:, :K] // V, top[:, :K], eos=True)
        self.finished |= self.fin_count >= K
        keep = priority.masked_fill(is_eos, NEG_INF).topk(K, dim=1).indices  # (B, K)
        self.scores.copy_(top.masked_fill(is_eos, NEG_INF).gather(1, keep))
        kept = where.gather(1, keep).view(-1)  # (N,)
        rows = kept // V  # (N,) rows of log_probs
        self.tokens.copy_(self.tokens.index_select(0, rows))
        self.append(kept % V)
        last = (self.max_lens == self.step) & ~self.finished  # (B,) at their maximum length now
        own = torch.arange(B * K, device=rows.device).view(B, K)  # (B, K): the rows as they are now
        self._store(last[:, None] & (self.scores > NEG_INF), own, self.scores, eos=False)
        self.finished |= last
        self.cache.rerank_beams(rows)
        self.controls.rerank_beams(rows)

    def done(self) -> torch.Tensor:
        return self.finished.all()

    def results(self, sentences: int, score_fn) -> list[list[Hypothesis]]:
        counts, log_probs = self.fin_count.tolist(), self.fin_log_prob.tolist()
        lengths, eos, tokens = self.fin_length.tolist(), self.fin_eos.tolist(), self.fin_tokens.tolist()
        found = []
        for b in range(sentences):
            hyps = []
            for f in range(counts[b]):
                n, total = lengths[b][f], log_probs[b][f]
                hyps.append(Hypothesis(tokens[b][f][:n], score_fn(total, max(n + eos[b][f], 1)), total))
            found.append(hyps)
        return found


# ------------------------------------------------------------------------------------------------ the driver


class _Graphs:
    """One model's captured searches, by shape and settings (at most `GRAPHS_PER_MODEL`), the memory pool they share
    and the lock that keeps two threads from replaying them at once."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple, tuple[_Step, torch.cuda.CUDAGraph]] = OrderedDict()
        self.lock = threading.Lock()
        self.pool = None


_GRAPHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> _Graphs
_GRAPHS_LOCK = threading.Lock()


def _autocast(tensor: torch.Tensor):
    """The caller's autocast without its weight-cast cache: a captured step must cast inside the graph, since the
    cache is emptied when the caller's autocast region ends (and a graph would read freed memory)."""
    kind = tensor.device.type
    if not torch.is_autocast_enabled(kind):
        return torch.autocast(kind, enabled=False)
    return torch.autocast(kind, dtype=torch.get_autocast_dtype(kind), cache_enabled=False)


def _capture(search: _Step, graphs: _Graphs) -> torch.cuda.CUDAGraph:
    """Two warm-up steps on a side stream (library handles, workspaces), then one step captured; the search is
    started again before it is used."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), _autocast(search.step):
        for _ in range(2):
            search.advance()
    torch.cuda.current_stream().wait_stream(stream)
    graphs.pool = graphs.pool or torch.cuda.graph_pool_handle()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=graphs.pool), _autocast(search.step):
        search.advance()
    return graph


def _padded(src: torch.Tensor, max_lens: torch.Tensor, pad_id: int, eos_id: int):
    """src (B, S) and max_lens (B,) padded up to multiples of ROUND's B and S: padding sentences are one EOS with
    room for no piece (finished before the first step)."""
    B, S = src.shape
    B2, S2 = (-(-B // ROUND[0]) * ROUND[0], -(-S // ROUND[1]) * ROUND[1])
    padded = src.new_full((B2, S2), pad_id)
    padded[:B, :S] = src
    padded[B:, 0] = eos_id
    return padded, torch.cat([max_lens, max_lens.new_zeros(B2 - B)])


def _key(model, kind, src: torch.Tensor, beams: int, capacity: int, ids: dict, controls: Controls) -> tuple:
    """What a captured search depends on: the shapes, the settings, the autocast dtype, and where the model's
    weights are (a graph reads them at the addresses it was captured with: `model.half()` makes new ones)."""
    settings = tuple((type(c).__name__, tuple(sorted(vars(c).items()))) for c in controls.controls)
    dtype = torch.get_autocast_dtype(src.device.type) if torch.is_autocast_enabled(src.device.type) else None
    weights = tuple((t.data_ptr(), t.dtype) for t in (*model.parameters(), *model.buffers()))
    return (kind, *src.shape, beams, capacity, tuple(sorted(ids.items())), settings, dtype, hash(weights))


def _captured(model, kind: type, src: torch.Tensor, memory, src_mask, kwargs: dict) -> tuple[_Step, Callable, _Graphs]:
    """The captured search for this shape and these settings (captured now if new) and its replay; the caller holds
    the model's lock while it uses them."""
    with _GRAPHS_LOCK:
        graphs = _GRAPHS.setdefault(model, _Graphs())
    key = _key(model, kind.__name__, src, kwargs.get("beams", 1), kwargs["capacity"], kwargs["ids"], kwargs["controls"])
    if key not in graphs.entries:
        search = kind(model, memory, src_mask, **kwargs)
        search.begin(memory, src_mask, torch.zeros(src.size(0), dtype=torch.long, device=src.device))
        graphs.entries[key] = (search, _capture(search, graphs))
        while len(graphs.entries) > GRAPHS_PER_MODEL:
            graphs.entries.popitem(last=False)
    graphs.entries.move_to_end(key)
    search, graph = graphs.entries[key]
    return search, graph.replay, graphs


@torch.inference_mode()
def graphed_search(
    model,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    *,
    bos_id: int,
    eos_id: int,
    beam_size: int,
    alpha: float,
    length_penalty: str,
    max_len_a: float,
    max_len_b: int,
    min_len: int,
    nbest: int,
    controls: Controls | None = None,
    capture: bool | None = None,
) -> list[list[Hypothesis]]:
    """beam.py's `beam_search` (beam_size > 1) or search.py's `greedy_decode` (beam_size 1) in fixed shapes, the
    same hypotheses; `controls` must be `graphable`. capture (default: on CUDA): each step one graph replay, the
    batch padded to ROUND's shapes so that later batches reuse the graph; else the same steps run eagerly.

    src (B, S) long, src_mask (B, 1, 1, S) bool -> B lists of up to `nbest` hypotheses, best score first.
    """
    controls, B = controls or Controls(), src.size(0)
    capture = src.is_cuda if capture is None else capture
    max_lens = max_output_lengths(model, src_mask, max_len_a, max_len_b)  # (B,)
    steps = int(max_lens.max()) if B else 0
    capacity = max(steps, 1)
    if capture:
        src, max_lens = _padded(src, max_lens, model.pad_id, eos_id)
        src_mask = make_pad_mask(src, model.pad_id)
        capacity = -(-capacity // ROUND[2]) * ROUND[2]
    memory = model.encode(src, src_mask)  # (B, S, D)
    kind = _Greedy if beam_size == 1 else _Beam
    kwargs = dict(capacity=capacity, ids=dict(bos_id=bos_id, eos_id=eos_id, min_len=min_len), controls=controls)
    kwargs |= {} if beam_size == 1 else {"beams": beam_size}
    if capture:
        search, run, graphs = _captured(model, kind, src, memory, src_mask, kwargs)
        lock = graphs.lock
    else:
        search, lock = kind(model, memory, src_mask, **kwargs), threading.Lock()
        run = search.advance
    with lock:
        search.begin(memory, src_mask, max_lens)
        for step in range(steps):
            run()
            if (step + 1) % CHECK_EVERY == 0 and bool(search.done()):
                break
        found = search.results(B, lambda total, length: total / lp(length, alpha=alpha, kind=length_penalty))
    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest] for hyps in found]
