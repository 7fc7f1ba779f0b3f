"""The one definition of a constraint phrase met: the automaton that lexically constrained search (constraints.py)
follows row by row, that the feasibility check walks over a target prefix and that the report reads over each
output (steering.py).

Decisions:
- Phrases are met in any order, each once, on pieces of its own: two phrases that overlap in the output count as
  one met (with phrases "a b" and "b c", the output "a b c" meets "a b" only; "b c" needs pieces of its own), and a
  phrase given twice must appear twice. Phrases without a shared piece are met exactly when the output contains them.
- A state is which phrases are met and the phrase in progress with how many of its pieces end the history. A piece
  that continues that phrase advances it; any other falls back to the longest end of (the matched pieces, the piece)
  that begins an unmet phrase (as a KMP automaton falls back), or to no phrase in progress. A phrase is met when its
  last piece is matched, and then no phrase is in progress.
- The fall-backs are listed once per node (no phrase in progress, or phrase j with m pieces matched): `steps[node]`,
  the (phrase, pieces matched after, piece) moves in the order they are tried, the continuation first, then the
  longest ends first (found through Aho-Corasick failure links over the phrases' prefixes), phrases in order. The
  first move whose piece is the next piece and whose phrase is unmet is taken. `advance` reads the lists one piece at
  a time; constraints.py reads the same lists as tensors, for every row of a batch at once.
- The budget: an output of at most `limit` pieces can meet every phrase only if, at each step, the constraint pieces
  still to meet (`Phrases.tokens` less the `bank`) fit in the steps left. The search keeps to it (a row with as many
  steps left as pieces to meet may only take a piece of `advancing`; one with fewer is dropped), and `fits` walks a
  target prefix under the same rule, so a sentence the check lets through is one the search can finish.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class ConstraintState(NamedTuple):
    met: int  # bit i set: phrase i is in the history
    phrase: int  # the phrase in progress, -1 for none
    matched: int  # how many of its pieces end the history


START = ConstraintState(0, -1, 0)


class Move(NamedTuple):
    phrase: int  # the phrase the piece continues
    matched: int  # its pieces matched once the piece is taken
    piece: int  # the piece


class Phrases:
    """One sentence's constraints: phrases of target ids, each to appear once in the output, in any order (see the
    module docstring). `nodes[n]` is (phrase, pieces matched) with node 0 = (-1, 0), no phrase in progress;
    `steps[n]` its moves, in the order they are tried."""

    def __init__(self, phrases: Sequence[Sequence[int]]) -> None:
        self.phrases = [tuple(p) for p in phrases if len(p)]
        self.every = (1 << len(self.phrases)) - 1
        self.tokens = sum(len(p) for p in self.phrases)  # the most banks: pieces to meet in all
        self.nodes = [(-1, 0)] + [(j, m) for j, p in enumerate(self.phrases) for m in range(1, len(p))]
        self.node = {key: n for n, key in enumerate(self.nodes)}
        self.steps = _moves(self.phrases, self.nodes)

    def advance(self, state: ConstraintState, token: int) -> ConstraintState:
        """The state after `token`: the first move of the state's node that takes `token` into an unmet phrase, or
        no phrase in progress."""
        met, phrase, matched = state
        for i, length, piece in self.steps[self.node[phrase, matched]]:
            if piece == token and not met >> i & 1:
                return self._matched(met, i, length)
        return ConstraintState(met, -1, 0)

    def _matched(self, met: int, phrase: int, matched: int) -> ConstraintState:
        if matched == len(self.phrases[phrase]):
            return ConstraintState(met | 1 << phrase, -1, 0)
        return ConstraintState(met, phrase, matched)

    def read(self, tokens: Sequence[int], state: ConstraintState = START) -> ConstraintState:
        """The state after `tokens`, from `state`."""
        for token in tokens:
            state = self.advance(state, token)
        return state

    def unmet(self, tokens: Sequence[int]) -> list[int]:
        """The phrases (their indices) an output of `tokens` does not meet."""
        met = self.read(tokens).met
        return [i for i in range(len(self.phrases)) if not met >> i & 1]

    def next_tokens(self, state: ConstraintState) -> list[int]:
        """The pieces that advance a phrase: the next of the one in progress and the first of each unmet one."""
        starts = [p[0] for i, p in enumerate(self.phrases) if not state.met >> i & 1]
        return starts + ([self.phrases[state.phrase][state.matched]] if state.phrase >= 0 else [])

    def advancing(self, state: ConstraintState) -> list[int]:
        """The pieces after which one more constraint piece is met."""
        bank = self.bank(state)
        return [t for t in self.next_tokens(state) if self.bank(self.advance(state, t)) > bank]

    def bank(self, state: ConstraintState) -> int:
        """Constraint pieces met: those of the met phrases and the matched ones of the phrase in progress."""
        return sum(len(p) for i, p in enumerate(self.phrases) if state.met >> i & 1) + state.matched

    def complete(self, state: ConstraintState) -> bool:
        return state.met == self.every

    def needed(self, prefix: Sequence[int]) -> int:
        """Output pieces an output that starts with `prefix` needs to meet every phrase, at the least."""
        return len(prefix) + self.tokens - self.bank(self.read(prefix))

    def fits(self, prefix: Sequence[int], limit: int) -> bool:
        """Whether the search can meet every phrase in an output of at most `limit` pieces that starts with
        `prefix` (cut at `limit`): the budget rule of the module docstring, walked over the prefix."""
        state = START
        for step, token in enumerate(prefix[:limit]):
            need, left = self.tokens - self.bank(state), limit - step
            if need > left or (need == left and token not in self.advancing(state)):
                return False
            state = self.advance(state, token)
        return self.tokens - self.bank(state) <= limit - min(len(prefix), limit)


def _moves(phrases: list[tuple[int, ...]], nodes: list[tuple[int, int]]) -> list[list[Move]]:
    """Each node's moves in the order they are tried: the continuation of its phrase, then for each end of its matched
    pieces that begins a phrase, longest first (the failure chain), each phrase with that beginning, in order; a
    (phrase, piece) already listed is left out (the first always wins)."""
    children, through, depth, prefix_node = _trie(phrases)
    fail = _failure_links(children)
    moves = []
    for j, m in nodes:
        listed = [Move(j, m + 1, phrases[j][m])] if j >= 0 else []
        seen = {(j, phrases[j][m])} if j >= 0 else set()
        node = prefix_node[j, m] if j >= 0 else 0
        while True:
            for i in through[node]:
                piece = phrases[i][depth[node]]
                if (i, piece) not in seen:
                    seen.add((i, piece))
                    listed.append(Move(i, depth[node] + 1, piece))
            if node == 0:
                break
            node = fail[node]
        moves.append(listed)
    return moves


def _trie(phrases: list[tuple[int, ...]]):
    """The phrases' prefixes as a trie: children[u] {piece: node}, through[u] the phrases longer than u that begin
    with it (in order), depth[u] its length, prefix_node[(j, m)] the node of phrase j's first m pieces."""
    children: list[dict[int, int]] = [{}]
    through: list[list[int]] = [[]]
    depth, prefix_node = [0], {}
    for j, pieces in enumerate(phrases):
        node = 0
        for m, piece in enumerate(pieces):
            prefix_node[j, m] = node
            through[node].append(j)
            if piece not in children[node]:
                children[node][piece] = len(children)
                children.append({})
                through.append([])
                depth.append(m + 1)
            node = children[node][piece]
    return children, through, depth, prefix_node


def _failure_links(children: list[dict[int, int]]) -> list[int]:
    """fail[u]: the node of the longest proper end of u's pieces that is also a node (0, the root, for none)."""
    fail = [0] * len(children)
    queue = list(children[0].values())
    for u in queue:  # breadth first: a node's failure link is set before its children's
        for piece, child in children[u].items():
            f = fail[u]
            while f and piece not in children[f]:
                f = fail[f]
            fail[child] = children[f].get(piece, 0)
            queue.append(child)
    return fail
