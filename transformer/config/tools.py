"""The settings of the commands beyond training and decoding: transformer-serve's (`ServeConfig`) and
transformer-distill's (`DistillConfig`). Like sections.py's, frozen dataclasses holding the only defaults, validated
in `__post_init__`; not part of a checkpoint's `Config`.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformer.typecheck import require


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """transformer-serve's settings (docs/serving.md), each overridden by the flag of the same name."""

    host: str = "127.0.0.1"  # the address to listen on: loopback only unless told otherwise
    port: int = 5000  # TCP port (0: a free one, printed at start)
    max_body_bytes: int = 1 << 20  # request body size in bytes; larger: 413
    max_lines: int = 128  # lines per request (q's items and the lines within them); more: 400
    max_chars: int = 5000  # characters per line; more: 400
    batch_wait_ms: float = 5.0  # how long the first waiting request gathers others before they are decoded, ms
    batch_tokens: int = 4000  # work (source tokens, control pieces) of one round, shared by the requests in turn
    queue_lines: int = 512  # lines admitted and not yet answered; a request past it gets 503 with Retry-After
    retry_after_s: int = 1  # the Retry-After of a 503, seconds
    max_beam: int = 16  # the largest beam_size (and nbest) a request may ask for
    max_len_a: float = 4.0  # the largest max_len_a a request may ask for
    max_len_b: int = 256  # the largest max_len_b (and min_len) a request may ask for
    max_output_pieces: int = 256  # the longest output a request's max_len_a/max_len_b may allow a line, pieces
    max_phrases: int = 8  # constraint phrases per line; more: 400
    max_phrase_pieces: int = 16  # target pieces per constraint phrase; more: 400
    max_constraint_pieces: int = 32  # target pieces of one line's constraint phrases together; more: 400
    max_prefix_pieces: int = 64  # target pieces of one line's prefix; more: 400
    request_timeout_s: float = 30.0  # from a request's arrival to its answer, seconds; past it: 504 (408 for a body)
    shutdown_timeout_s: float = 30.0  # after SIGTERM, how long requests in flight have to be answered; then 503
    max_file_bytes: int = 1 << 20  # the largest file POST /translate_file takes, bytes; larger: 413
    file_timeout_s: float = 300.0  # from a file upload's arrival to its answer, seconds; past it: 504 (408 for a body)
    file_store_bytes: int = 64 << 20  # translated files kept for download, bytes in all; past it the oldest go
    file_ttl_s: float = 1800.0  # how long a translated file is kept for download, seconds; then 404
    pivot: str = "en"  # the language a pair without a model of its own is translated through ("": no pivoting)
    req_limit: int = -1  # requests per minute per client (its API key, else its address); past it 429; -1: none
    char_limit: int = -1  # characters of a request's q in all (a key's own limit first); more: 400; -1: none
    batch_limit: int = -1  # items of a request's list q; more: 400; -1: none

    def __post_init__(self) -> None:
        positive = [self.max_body_bytes, self.max_lines, self.max_chars, self.batch_tokens, self.queue_lines]
        positive += [self.max_output_pieces, self.max_phrases, self.max_phrase_pieces, self.max_constraint_pieces]
        positive += [self.max_prefix_pieces, self.request_timeout_s, self.shutdown_timeout_s]
        positive += [self.max_file_bytes, self.file_timeout_s, self.file_store_bytes, self.file_ttl_s]
        require(min(positive) > 0, "serve limits, budgets and timeouts (all but port and waits) must be positive")
        require(
            self.file_store_bytes >= self.max_file_bytes,
            f"file_store_bytes ({self.file_store_bytes}) must be at least max_file_bytes ({self.max_file_bytes})",
        )
        require(0 <= self.port < 65536, f"port must be in [0, 65535], got {self.port}")
        require(self.batch_wait_ms >= 0 and self.retry_after_s >= 0, "batch_wait_ms and retry_after_s must be >= 0")
        require(self.max_beam >= 1 and self.max_len_a >= 0 and self.max_len_b >= 0, "max_beam must be >= 1")
        limits = [v == -1 or v > 0 for v in (self.req_limit, self.char_limit, self.batch_limit)]
        require(all(limits), "req_limit, char_limit and batch_limit must be positive, or -1 for none")


@dataclass(frozen=True, kw_only=True)
class DistillConfig:
    """transformer-distill's settings (docs/training.md, "Distillation"), each overridden by the flag of the same
    name. Lengths are whitespace-separated words; a pair is counted under the first filter that drops it."""

    chunk_lines: int = 2000  # source lines per chunk: each its own file, the unit of resuming and of sharding
    drop_empty: bool = True  # drop pairs whose source or teacher output is empty
    drop_copies: bool = True  # drop pairs whose teacher output equals the source
    min_length_ratio: float = 0.3  # drop pairs with fewer output words per source word than this (0 = off)
    max_length_ratio: float = 3.0  # drop pairs with more output words per source word than this (0 = off)
    min_score: float | None = None  # drop pairs whose teacher log-probability per piece is below this (None = off)
    original_weight: float = 0.0  # the original pairs beside the distilled ones, times each per epoch (0 = none)
    average_last: int = 5  # the student's last numbered checkpoints averaged into student/averaged.pt

    def __post_init__(self) -> None:
        for name in ("chunk_lines", "average_last"):
            require(getattr(self, name) > 0, f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        for name in ("min_length_ratio", "max_length_ratio", "original_weight"):
            require(getattr(self, name) >= 0, f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        ordered = not self.max_length_ratio or self.min_length_ratio <= self.max_length_ratio
        require(ordered, f"--min-length-ratio ({self.min_length_ratio}) exceeds --max-length-ratio")
