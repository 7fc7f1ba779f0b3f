"""A spinner for work with no countable progress (SentencePiece training, reading a large corpus): a line on stderr
that shows the elapsed time, refreshed twice a second; nothing when stderr is not a terminal."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

from tqdm import tqdm


@contextlib.contextmanager
def spinner(text: str, enabled: bool = True) -> Iterator[None]:
    """`text` and the elapsed time on stderr until the block ends (only on a terminal)."""
    if not enabled or not sys.stderr.isatty():
        yield
        return
    bar = tqdm(total=None, desc=text, bar_format="{desc} [{elapsed}]", file=sys.stderr, leave=False)
    stop = threading.Event()

    def refresh() -> None:
        while not stop.wait(0.5):
            bar.refresh()

    thread = threading.Thread(target=refresh, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.close()
