"""The bad-input catalogue's machinery (tests/test_bad_inputs.py, tests/test_real_faults.py): the shared inputs
(`world`), the `Case` record, and the setups and checks the cases of tests/bad_inputs_training.py and
tests/bad_inputs_decoding.py are made of.
"""

from __future__ import annotations

import importlib
import io
import itertools
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import tiny_checkpoint
import torch

from transformer.checkpoint import average_checkpoints, load_checkpoint, model_state, save_checkpoint
from transformer.commands import cli
from transformer.config import from_dict
from transformer.data.tokenizer import PAD_ID, Tokenizer
from transformer.devices import OutOfMemoryError
from transformer.model.transformer import Transformer

ROOT = Path(__file__).resolve().parents[1]
MAINS = {
    "prepare": cli.prepare_main,
    "train": cli.train_main,
    "translate": cli.translate_main,
    "evaluate": cli.evaluate_main,
    "average": cli.average_main,
    "distill": cli.distill_main,
    "calibrate": cli.calibrate_main,
    "keys": cli.keys_main,
}


class Evil:
    """Unpickling this runs code (creates a folder): a safe loader must refuse it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    """Shared inputs: checkpoints good and bad, text files good and bad, a tiny trained run and its cache."""
    root = tmp_path_factory.mktemp("world")
    tiny = tiny_checkpoint.build(root)
    state = load_checkpoint(tiny["checkpoint"])
    tokenizer = Tokenizer.from_bytes(state["tokenizer"])
    other = from_dict({**state["config"], "model": {**state["config"]["model"], "d_ff": 40}})
    torch.manual_seed(1)
    model = Transformer.from_config(
        other.model, src_vocab_size=tokenizer.src_vocab_size, tgt_vocab_size=tokenizer.tgt_vocab_size, pad_id=PAD_ID
    )
    save_checkpoint(model_state(model, other, tokenizer), root / "other.pt")  # same vocabulary, d_ff 40
    save_checkpoint({**state, "config": other.to_dict()}, root / "contradicting.pt")  # config says d_ff 40
    save_checkpoint(average_checkpoints([tiny["checkpoint"], tiny["checkpoint"]]), root / "avg.pt")
    with open(root / "evil.pt", "wb") as f:
        pickle.dump({"model": Evil(str(root / "PWNED")), "config": {}}, f)
    (root / "garbage.pt").write_bytes(b"this is not a checkpoint\n")
    (root / "latin1.txt").write_bytes(b"the cat\nthe dog\ncaf\xe9 au lait\n")
    (root / "short.txt").write_text("the cat\n", encoding="utf-8")
    (root / "bom.txt").write_bytes(b"\xef\xbb\xbf\nthe cat\n")
    for name in ("ckpt_dir", "empty_dir"):
        (root / name).mkdir()
    for step in (1, 2):
        save_checkpoint(state, root / "ckpt_dir" / f"checkpoint_{step}.pt")
    run, cache = root / "run", root / "cache"
    settings = [f"train.out_dir={run}", f"data.cache_dir={cache}", "train.max_steps=2", "train.valid_every=0"]
    assert (
        cli.train_main(
            ["--config", str(ROOT / "configs/tiny.yaml"), "--no-progress", *(a for s in settings for a in ("--set", s))]
        )
        == 0
    )
    save_checkpoint(average_checkpoints([run / "checkpoint_last.pt"]), root / "run_avg.pt")
    return {
        "w": str(root),
        "ckpt": str(tiny["checkpoint"]),
        "src": str(tiny["src"]),
        "ref": str(tiny["ref"]),
        "run": str(run),
        "cache": str(cache),
        "cfg": str(ROOT / "configs/tiny.yaml"),
    }


@dataclass
class Case:
    id: str
    command: str
    argv: list[str]  # "{name}" is replaced by a `world` path, "{tmp}" by this case's own folder
    error: str | None  # text of the one-line error; None: the command must succeed
    setup: Callable | None = None  # (tmp: Path, monkeypatch) -> None, before the run
    check: Callable | None = None  # (tmp: Path, out: str, err: str) -> bool, after the run


def train_args(*settings: str, extra: tuple[str, ...] = ()) -> list[str]:
    """transformer-train arguments on the tiny config, with the shared cache and this case's run directory."""
    base = ["data.cache_dir={cache}", "train.out_dir={tmp}/run", "train.valid_every=0", *settings]
    return ["--config", "{cfg}", "--no-progress", *(a for s in base for a in ("--set", s)), *extra]


def distill_args(*settings: str, teacher: tuple[str, ...] = ("{ckpt}",), extra: tuple[str, ...] = ()) -> list[str]:
    """transformer-distill arguments: the tiny checkpoint (xx -> yy) teaching the tiny config's student (the same
    languages, the shared cache), this case's folder as DIR."""
    base = ["data.cache_dir={cache}", "data.src_lang=xx", "data.tgt_lang=yy", *settings]
    return ["--teacher", *teacher, "--config", "{cfg}", "--out", "{tmp}/d", "--no-progress", *extra] + [
        a for s in base for a in ("--set", s)
    ]


def other_vocabulary(name: str) -> Callable:
    """A checkpoint like the tiny one but with another SentencePiece model (another vocabulary size)."""

    def setup(tmp: Path, monkeypatch) -> None:
        words = tiny_checkpoint.sentences(40, seed=9)
        tokenizer = Tokenizer.train(words, words, vocab_size=40)
        config = from_dict({"model": dict(d_model=16, n_heads=2, d_ff=24, n_encoder_layers=1, n_decoder_layers=1)})
        sizes = dict(src_vocab_size=tokenizer.src_vocab_size, tgt_vocab_size=tokenizer.tgt_vocab_size)
        model = Transformer.from_config(config.model, **sizes, pad_id=PAD_ID)
        save_checkpoint(model_state(model, config, tokenizer), tmp / name)

    return setup


def prepare_args(*settings: str) -> list[str]:
    return ["--config", "{cfg}", *(a for s in ["data.cache_dir={cache}", *settings] for a in ("--set", s))]


def write(name: str, data: bytes | str) -> Callable:
    def setup(tmp: Path, monkeypatch) -> None:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())

    return setup


def stdin(data: bytes | None) -> Callable:
    def setup(tmp: Path, monkeypatch) -> None:
        stream = None if data is None else io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
        monkeypatch.setattr(sys, "stdin", stream)

    return setup


def link(kind: str, target: str, name: str) -> Callable:
    def setup(tmp: Path, monkeypatch) -> None:
        (tmp / target).write_text("the cat\nthe dog\n", encoding="utf-8")
        (os.symlink if kind == "sym" else os.link)(tmp / target, tmp / name)

    return setup


def lock_held_by(pid: Callable[[], int]) -> Callable:
    def setup(tmp: Path, monkeypatch) -> None:
        (tmp / "run").mkdir()
        (tmp / "run/train.lock").write_text(f"{pid()} {os.uname().nodename}\n")

    return setup


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def output_lines(expected: list[str | None]) -> Callable:
    """A check that stdout has these lines: a string exactly, None any non-empty text."""

    def check(tmp: Path, out: str, err: str) -> bool:
        lines = out.splitlines()
        return len(lines) == len(expected) and all(
            line == want if want is not None else bool(line.strip()) for line, want in zip(lines, expected)
        )

    return check


OUT_OF_MEMORY = (
    "CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
    "1.06 GiB is free."
)  # the start of what CUDA's caching allocator says


def out_of_memory(target: str, after: int = 0) -> Callable:
    """`target` (module.function) raises torch's OutOfMemoryError, as CUDA does where an allocation does not fit,
    from its (after + 1)-th call on; the calls before run the real function."""

    def setup(tmp: Path, monkeypatch) -> None:
        module, name = target.rsplit(".", 1)
        real, calls = getattr(importlib.import_module(module), name), itertools.count()

        def fake(*args, **kwargs):
            if next(calls) < after:
                return real(*args, **kwargs)
            raise OutOfMemoryError(OUT_OF_MEMORY)

        monkeypatch.setattr(target, fake)

    return setup


def intact_after_out_of_memory(tmp: Path, out: str, err: str) -> bool:
    """Two updates saved (save_every 2), the third ran out of memory: checkpoint_2.pt is whole and the last one,
    and the error names the micro-batch, the setting to lower and the checkpoint."""
    run = tmp / "run"
    state = load_checkpoint(run / "checkpoint_last.pt")
    return (
        state["step"] == 2
        and os.path.samefile(run / "checkpoint_last.pt", run / "checkpoint_2.pt")
        and not (run / "train.lock").exists()
        and "(tried to allocate 2.50 GiB)" in err
        and "lower train.max_tokens (now 1,024), e.g. --set train.max_tokens=512; train.update_tokens (1,024) stays"
        in err
        and f"{run / 'checkpoint_last.pt'}, is intact" in err
    )


FILE = write("file", "a regular file\n")
OLD = write("out.txt", "previous contents\n")
BAD_UTF8_AT_3 = write("in.txt", b"the cat\nthe dog\ncaf\xe9\nthe mat\n")
BAD_YAML = write("bad.yaml", b"model:\n  d_model: \xff\n")  # "model:\n" is 7 bytes, "  d_model: " 11: \xff at byte 18
BAD_YAML_ERROR = "bad.yaml line 2 is not valid UTF-8 (byte offset 18: invalid start byte); convert it to UTF-8"
EMPTY = write("empty.txt", b"")
