"""A catalogue of bad inputs and faults over the five commands (prepare, train, translate, evaluate, average).

Each case either fails as the project promises (exit code 2, one line `error: ...` naming the problem, no
traceback) or gives the correct output; in both, nothing is lost: every file that existed before is unchanged,
and no temporary file is left behind. The commands run in-process through their main functions (fast); a few
subprocess cases at the end check real signals and a closed standard input.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import itertools
import logging
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import tiny_checkpoint
import torch
from fs_faults import killed_write, readonly_dir

from transformer.checkpoint import average_checkpoints, load_checkpoint, model_state, save_checkpoint
from transformer.commands import cli
from transformer.config import from_dict
from transformer.data.tokenizer import PAD_ID, Tokenizer
from transformer.devices import OutOfMemoryError
from transformer.model.transformer import Transformer

pytestmark = pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # the crafted pickle is a plain one
ROOT = Path(__file__).resolve().parents[1]
MAINS = {
    "prepare": cli.prepare_main,
    "train": cli.train_main,
    "translate": cli.translate_main,
    "evaluate": cli.evaluate_main,
    "average": cli.average_main,
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
CASES = [
    # ------------------------------------------------------------------------------------ prepare
    Case("prepare-missing-config", "prepare", ["--config", "{tmp}/none.yaml"], "config file not found"),
    Case("prepare-config-not-utf8", "prepare", ["--config", "{tmp}/bad.yaml"], BAD_YAML_ERROR, BAD_YAML),
    Case("prepare-not-yaml", "prepare", ["--config", "{tmp}/c.yaml"], "is not valid YAML", write("c.yaml", "a: [")),
    Case("prepare-list-config", "prepare", ["--config", "{tmp}/c.yaml"], "must hold a mapping", write("c.yaml", "- 1")),
    Case("prepare-unknown-key", "prepare", prepare_args("model.d_modle=3"), "unknown config key 'model.d_modle'"),
    Case("prepare-bad-override", "prepare", prepare_args("model"), "use section.key=value"),
    Case("prepare-wrong-type", "prepare", prepare_args("model.d_model=abc"), "model.d_model must be an integer"),
    Case("prepare-missing-data", "prepare", prepare_args("data.train={{tsv: {tmp}/none.tsv}}"), "data file not found"),
    Case("prepare-src-without-tgt", "prepare", prepare_args("data.train={{src: {ref}}}"), "also needs `tgt`"),
    Case("prepare-vocab-too-small", "prepare", prepare_args("data.vocab_size=4"), "must be at least 16"),
    Case(
        "prepare-not-utf8",
        "prepare",
        prepare_args("data.train={{src: {w}/latin1.txt, tgt: {w}/latin1.txt}}"),
        "latin1.txt line 3 is not valid UTF-8",
    ),
    Case("prepare-unequal-files", "prepare", prepare_args("data.train={{src: {w}/short.txt, tgt: {ref}}}"), "lines"),
    Case(
        "prepare-cache-under-a-file",
        "prepare",
        prepare_args("data.cache_dir={tmp}/file/cache", "data.vocab_size=200"),
        "a part of the path is a file",
        FILE,
    ),
    Case("prepare-zero-max-tokens", "prepare", prepare_args("data.max_tokens_per_sentence=0"), "must be positive"),
    Case("prepare-same-languages", "prepare", prepare_args("data.tgt_lang=es"), "must differ"),
    # -------------------------------------------------------------------------------------- train
    Case("train-fp16-on-cpu", "train", train_args("train.precision=fp16"), "fp16 needs a CUDA device"),
    Case(
        "train-sentences-over-max-positions",
        "train",
        train_args("data.max_tokens_per_sentence=300"),
        "exceeds model.max_positions (256)",
    ),
    Case(
        "train-out-dir-under-a-file",
        "train",
        train_args("train.out_dir={tmp}/file/run", "train.max_steps=1"),
        "a part of the path is a file",
        FILE,
    ),
    Case("train-resume-nothing", "train", train_args(extra=("--resume",)), "checkpoint not found"),
    Case(
        "train-resume-averaged",
        "train",
        train_args(extra=("--resume", "{w}/run_avg.pt")),
        "holds no training state (no optimizer",
    ),
    Case(
        "train-resume-other-architecture",
        "train",
        train_args("model.d_ff=96", extra=("--resume", "{run}/checkpoint_last.pt")),
        "does not fit the model: decoder.layers.0.ff.linear1.bias is 64 there but 96",
    ),
    Case("train-resume-garbage", "train", train_args(extra=("--resume", "{w}/garbage.pt")), "not a readable"),
    Case("train-resume-pickle", "train", train_args(extra=("--resume", "{w}/evil.pt")), "is not a readable checkpoint"),
    Case(
        "train-locked-run-dir",
        "train",
        train_args("train.max_steps=1"),
        f"(PID {os.getppid()} ",
        lock_held_by(os.getppid),
        check=lambda tmp, out, err: os.listdir(tmp / "run") == ["train.lock"],
    ),
    Case(
        "train-stale-lock",
        "train",
        train_args("train.max_steps=1"),
        None,
        lock_held_by(dead_pid),
        check=lambda tmp, out, err: (tmp / "run/checkpoint_1.pt").is_file() and not (tmp / "run/train.lock").exists(),
    ),
    Case("train-bad-max-time", "train", train_args("train.max_time=soon"), "bad duration 'soon'"),
    Case("train-config-not-utf8", "train", ["--config", "{tmp}/bad.yaml"], BAD_YAML_ERROR, BAD_YAML),
    Case(
        "train-base-config-not-utf8",
        "train",
        ["--config", "{tmp}/child.yaml"],
        BAD_YAML_ERROR,
        lambda tmp, mp: (BAD_YAML(tmp, mp), write("child.yaml", "base: bad.yaml\n")(tmp, mp)),
    ),
    Case(
        "train-cuda-out-of-memory",
        "train",
        train_args("train.max_steps=4", "train.save_every=2"),
        "out of GPU memory in a training update, on a micro-batch of ",
        out_of_memory("transformer.training.optim.train_update", after=2),
        check=intact_after_out_of_memory,
    ),
    Case("train-bad-prepare-timeout", "train", train_args("train.prepare_timeout=soon"), "bad duration"),
    Case("train-zero-nan-patience", "train", train_args("train.nan_patience=0"), "train.nan_patience must be positive"),
    Case("train-init-from-missing", "train", train_args("train.init_from={tmp}/none.pt"), "checkpoint not found"),
    Case("train-init-from-other-model", "train", train_args("train.init_from={ckpt}"), "does not fit the model"),
    Case("train-tokenizer-not-a-model", "train", train_args("data.tokenizer={src}"), "model is not readable"),
    Case("train-tokenizer-missing", "train", train_args("data.tokenizer={tmp}/none.model"), "cannot read the"),
    Case("train-unknown-precision", "train", train_args("train.precision=fp8"), "train.precision must be one of"),
    Case("train-zero-keep-last", "train", train_args("train.keep_last=0"), "train.keep_last must be positive"),
    Case("train-no-train-split", "train", train_args("data.train=null"), "data.train is not configured"),
    # ---------------------------------------------------------------------------------- translate
    Case(
        "translate-output-is-input",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{src}", "--output", "{src}"],
        "is the same file as --input",
    ),
    Case(
        "translate-output-symlink-to-input",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{tmp}/in.txt", "--output", "{tmp}/link.txt"],
        "is the same file as --input",
        link("sym", "in.txt", "link.txt"),
    ),
    Case(
        "translate-output-hardlink-to-input",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{tmp}/in.txt", "--output", "{tmp}/hard.txt"],
        "is the same file as --input",
        link("hard", "in.txt", "hard.txt"),
    ),
    Case(
        "translate-output-is-checkpoint",
        "translate",
        ["--checkpoint", "{ckpt}", "--output", "{ckpt}", "x"],
        "is the same file as --checkpoint",
    ),
    Case(
        "translate-bad-utf8-line-3",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{tmp}/in.txt", "--output", "{tmp}/out.txt", "--chunk-lines", "1"],
        "in.txt line 3 is not valid UTF-8",
        lambda tmp, mp: (BAD_UTF8_AT_3(tmp, mp), OLD(tmp, mp)),
    ),
    Case(
        "translate-latin1-stdin",
        "translate",
        ["--checkpoint", "{ckpt}"],
        "standard input line 2 is not valid UTF-8",
        stdin(b"the cat\ncaf\xe9\n"),
    ),
    Case(
        "translate-binary-stdin",
        "translate",
        ["--checkpoint", "{ckpt}"],
        "standard input line 1 is not valid",
        stdin(b"\x89PNG\r\n\x1a\n\x00\xff"),
    ),
    Case("translate-closed-stdin", "translate", ["--checkpoint", "{ckpt}"], "standard input is closed", stdin(None)),
    Case(
        "translate-bom-empty-first-line",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{w}/bom.txt"],
        None,
        check=output_lines(["", None]),
    ),
    Case(
        "translate-bom-stdin",
        "translate",
        ["--checkpoint", "{ckpt}"],
        None,
        stdin(b"\xef\xbb\xbf\nthe cat\n"),
        check=output_lines(["", None]),
    ),
    Case("translate-negative-threads", "translate", ["--checkpoint", "{ckpt}", "--threads", "-1", "x"], "must be >= 0"),
    Case(
        "translate-zero-chunk-lines", "translate", ["--checkpoint", "{ckpt}", "--chunk-lines", "0", "x"], "must be >= 1"
    ),
    Case("translate-missing-checkpoint", "translate", ["--checkpoint", "{tmp}/none.pt", "x"], "checkpoint not found"),
    Case("translate-garbage-checkpoint", "translate", ["--checkpoint", "{w}/garbage.pt", "x"], "not a readable"),
    Case("translate-pickle-checkpoint", "translate", ["--checkpoint", "{w}/evil.pt", "x"], "not a readable"),
    Case(
        "translate-contradicting-config",
        "translate",
        ["--checkpoint", "{w}/contradicting.pt", "x"],
        "the checkpoint does not fit the model: ",
    ),
    Case(
        "translate-averaged-checkpoint",
        "translate",
        ["--checkpoint", "{w}/avg.pt", "the cat", "the dog"],
        None,
        check=output_lines([None, None]),
    ),
    Case(
        "translate-change-model",
        "translate",
        ["--checkpoint", "{ckpt}", "--set", "model.d_ff=40", "x"],
        "cannot change model.d_ff",
    ),
    Case(
        "translate-missing-input",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{tmp}/none.txt"],
        "input file not found",
    ),
    Case("translate-text-and-input", "translate", ["--checkpoint", "{ckpt}", "--input", "{src}", "x"], "not both"),
    Case(
        "translate-fp16-on-cpu",
        "translate",
        ["--checkpoint", "{ckpt}", "--precision", "fp16", "--device", "cpu", "x"],
        "needs a CUDA device",
    ),
    Case(
        "translate-unknown-device", "translate", ["--checkpoint", "{ckpt}", "--device", "tpu9", "x"], "unknown device"
    ),
    Case(
        "translate-output-under-a-file",
        "translate",
        ["--checkpoint", "{ckpt}", "--output", "{tmp}/file/o", "x"],
        "a part of the path is a file",
        FILE,
    ),
    Case(
        "translate-output-is-a-folder",
        "translate",
        ["--checkpoint", "{ckpt}", "--output", "{tmp}", "x"],
        "it is a folder",
    ),
    Case("translate-beam-zero", "translate", ["--checkpoint", "{ckpt}", "--beam", "0", "x"], "beam_size must be >= 1"),
    Case("translate-no-checkpoint", "translate", ["x"], "--checkpoint is required"),
    Case(
        "translate-config-not-utf8",
        "translate",
        ["--checkpoint", "{ckpt}", "--config", "{tmp}/bad.yaml", "x"],
        BAD_YAML_ERROR,
        BAD_YAML,
    ),
    Case(
        "translate-cuda-out-of-memory",
        "translate",  # 12 lines of a few tokens: one batch of 12 sentences
        ["--checkpoint", "{ckpt}", "--input", "{src}", "--output", "{tmp}/out.txt"],
        "out of GPU memory decoding a batch of 12 sentences of up to ",
        lambda tmp, mp: (OLD(tmp, mp), out_of_memory("transformer.decoding.translator.generate")(tmp, mp)),
        check=lambda tmp, out, err: (
            "beam 2 (tried to allocate 2.50 GiB): lower --max-tokens (decode.max_tokens, "
            "now 8000), e.g. --max-tokens 4000" in err
        ),
    ),
    Case(
        "translate-cuda-out-of-memory-one-sentence",
        "translate",
        ["--checkpoint", "{ckpt}", "the cat"],
        "one sentence does not fit: a smaller --beam or --max-len-b, or --device cpu",
        out_of_memory("transformer.decoding.translator.generate"),
    ),
    # ----------------------------------------------------------------------------------- evaluate
    Case(
        "evaluate-output-is-ref",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--src", "{src}", "--ref", "{ref}", "--output", "{ref}"],
        "is the same file as --ref",
    ),
    Case(
        "evaluate-output-is-config-test-ref",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--output", "{ref}"],
        "is the same file as data.test",
    ),
    Case(
        "evaluate-json-is-ref",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--json", "{ref}", "--output", "{tmp}/h"],
        "is the same file as data.test",
    ),
    Case(
        "evaluate-json-is-hyp",
        "evaluate",
        ["--hyp", "{tmp}/h.txt", "--ref", "{tmp}/h.txt", "--json", "{tmp}/h.txt"],
        "is the same file as --hyp",
        write("h.txt", "the cat\n"),
    ),
    Case(
        "evaluate-json-is-output",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--output", "{tmp}/h", "--json", "{tmp}/h"],
        "is the same file as the hypotheses file",
    ),
    Case("evaluate-hyp-length-mismatch", "evaluate", ["--hyp", "{w}/short.txt", "--ref", "{ref}"], "has 1 lines but"),
    Case("evaluate-hyp-without-ref", "evaluate", ["--hyp", "{w}/short.txt"], "--hyp needs --ref"),
    Case("evaluate-src-without-ref", "evaluate", ["--checkpoint", "{ckpt}", "--src", "{src}"], "go together"),
    Case(
        "evaluate-json-under-a-file",
        "evaluate",
        ["--hyp", "{ref}", "--ref", "{ref}", "--json", "{tmp}/file/s.json"],
        "a part of the path is a file",
        FILE,
    ),
    Case(
        "evaluate-ref-not-utf8",
        "evaluate",
        ["--hyp", "{w}/latin1.txt", "--ref", "{w}/latin1.txt"],
        "latin1.txt line 3 is not valid UTF-8",
    ),
    Case("evaluate-nothing-to-do", "evaluate", [], "give --checkpoint CKPT"),
    Case(
        "evaluate-score-nothing",
        "evaluate",
        ["--hyp", "{tmp}/empty.txt", "--ref", "{tmp}/empty.txt"],
        "nothing to score: ",
        EMPTY,
        check=lambda tmp, out, err: f"{tmp}/empty.txt has no lines" in err,
    ),
    Case(
        "evaluate-score-nothing-from-stdin",
        "evaluate",
        ["--hyp", "-", "--ref", "{tmp}/empty.txt"],
        "empty.txt has no lines",
        lambda tmp, mp: (EMPTY(tmp, mp), stdin(b"")(tmp, mp)),
    ),
    Case(
        "evaluate-translate-nothing",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--src", "{tmp}/empty.txt", "--ref", "{tmp}/empty.txt", "--output", "{tmp}/h"],
        "nothing to score: ",
        EMPTY,
        check=lambda tmp, out, err: not (tmp / "h").exists(),
    ),
    Case(
        "evaluate-empty-test-split",
        "evaluate",
        [
            "--checkpoint",
            "{ckpt}",
            "--set",
            "data.test.src={tmp}/empty.txt",
            "--set",
            "data.test.tgt={tmp}/empty.txt",
            "--output",
            "{tmp}/h",
        ],
        "is empty: no sentence pairs to read",
        EMPTY,
    ),
    Case(
        "evaluate-src-longer-than-ref",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--src", "{src}", "--ref", "{w}/short.txt", "--output", "{tmp}/h"],
        "test.src has 12 lines but ",
        check=lambda tmp, out, err: "short.txt has 1" in err,
    ),
    Case(
        "evaluate-cuda-out-of-memory",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--output", "{tmp}/h"],
        "lower --max-tokens (decode.max_tokens, now 8000)",
        out_of_memory("transformer.decoding.translator.generate"),
        check=lambda tmp, out, err: not (tmp / "h").exists(),
    ),
    Case(
        "evaluate-test-set-without-langpair",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--test-set", "wmt14"],
        "--test-set needs --langpair",
    ),
    Case("evaluate-no-valid-split", "evaluate", ["--checkpoint", "{ckpt}", "--split", "valid"], "no data.valid split"),
    Case("evaluate-contradicting-config", "evaluate", ["--checkpoint", "{w}/contradicting.pt"], "does not fit"),
    Case(
        "evaluate-bom-ref",
        "evaluate",
        ["--hyp", "{w}/bom.txt", "--ref", "{w}/bom.txt"],
        None,
        check=lambda tmp, out, err: "hyp_len = 2 ref_len = 2" in out,
    ),  # the BOM is not a word
    # ------------------------------------------------------------------------------------ average
    Case(
        "average-output-is-input",
        "average",
        ["--inputs", "{ckpt}", "{w}/avg.pt", "--output", "{ckpt}"],
        "is the same file as --inputs",
    ),
    Case(
        "average-output-is-input-in-dir",
        "average",
        ["--dir", "{w}/ckpt_dir", "--output", "{w}/ckpt_dir/checkpoint_2.pt"],
        "same file as --inputs",
    ),
    Case(
        "average-last-zero",
        "average",
        ["--dir", "{w}/ckpt_dir", "--last", "0", "--output", "{tmp}/a.pt"],
        "must be >= 1",
    ),
    Case(
        "average-last-negative",
        "average",
        ["--dir", "{w}/ckpt_dir", "--last", "-1", "--output", "{tmp}/a.pt"],
        "must be >= 1",
    ),
    Case("average-empty-dir", "average", ["--dir", "{w}/empty_dir", "--output", "{tmp}/a.pt"], "no numbered"),
    Case(
        "average-other-architecture",
        "average",
        ["--inputs", "{ckpt}", "{w}/other.pt", "--output", "{tmp}/a.pt"],
        "linear1.weight is 40x16 there but 24x16 in",
    ),
    Case("average-missing-input", "average", ["--inputs", "{tmp}/none.pt", "--output", "{tmp}/a.pt"], "not found"),
    Case("average-pickle-input", "average", ["--inputs", "{w}/evil.pt", "--output", "{tmp}/a.pt"], "not a readable"),
    Case("average-no-inputs", "average", ["--output", "{tmp}/a.pt"], "no checkpoints to average"),
    Case(
        "average-output-under-a-file",
        "average",
        ["--inputs", "{ckpt}", "--output", "{tmp}/file/a.pt"],
        "a part of the path is a file",
        FILE,
    ),
    Case(
        "average-dir-last-one",
        "average",
        ["--dir", "{w}/ckpt_dir", "--last", "1", "--output", "{tmp}/a.pt"],
        None,
        check=lambda tmp, out, err: load_checkpoint(tmp / "a.pt")["averaged_from"][0].endswith(
            "ckpt_dir/checkpoint_2.pt"
        ),
    ),
]
if os.path.exists("/dev/full"):  # a full disk, as the kernel reports it
    CASES += [
        Case(
            "translate-output-dev-full",
            "translate",
            ["--checkpoint", "{ckpt}", "--output", "/dev/full", "x"],
            "cannot write /dev/full: the disk is full",
        ),
        Case(
            "evaluate-json-dev-full",
            "evaluate",
            ["--hyp", "{ref}", "--ref", "{ref}", "--json", "/dev/full"],
            "cannot write /dev/full: the disk is full",
        ),
        Case("average-output-dev-full", "average", ["--inputs", "{ckpt}", "--output", "/dev/full"], "disk is full"),
    ]


def _snapshot(*folders: Path) -> dict[Path, str]:
    files = [p for folder in folders for p in folder.rglob("*") if p.is_file() and "cache" not in p.parts]
    return {p: _digest(p) for p in files if p.name != "train.lock"}  # the stale-lock case replaces one on purpose


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_the_catalogue_is_large_enough():
    assert len(CASES) >= 60 and {c.command for c in CASES} == set(MAINS)
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, world, tmp_path, capsys, monkeypatch):
    if case.setup:
        case.setup(tmp_path, monkeypatch)
    argv = [a.format(tmp=tmp_path, **world) for a in case.argv]
    before = _snapshot(Path(world["w"]), tmp_path)
    try:
        code = MAINS[case.command](argv)
    except SystemExit as exc:  # argparse's own errors (usage line, then `prog: error: ...`)
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if case.check:
        assert case.check(tmp_path, out, err), (out, err)
    if case.error is None:
        assert code == 0, err
    else:
        errors = [line for line in err.splitlines() if "error: " in line]
        assert code == 2 and len(errors) == 1 and case.error in errors[0], err
        assert not [
            line
            for line in err.splitlines()
            if line.strip()
            and not line.startswith(("error: ", "usage"))
            and "error: " not in line
            and not line.startswith(" ")
        ], err
    after = _snapshot(Path(world["w"]), tmp_path)
    changed = [str(p) for p, digest in before.items() if after.get(p) != digest]
    assert not changed, f"changed or removed: {changed}"
    assert not [p for p in after if p.name.endswith(".tmp")], "a temporary file was left behind"
    assert not (Path(world["w"]) / "PWNED").exists()


# ------------------------------------------------------------------------------------- real processes


def _translate_process(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "transformer", "translate", "--threads", "1", *args],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_translate_keeps_the_old_output(world, tmp_path, sig):
    """Signalled part-way through (once the temporary output holds lines): the old output is intact, stderr says
    how many lines were done and that the output was not written, the exit status is 128 + N."""
    (tmp_path / "in.txt").write_text("the cat sat on the mat\n" * 100_000, encoding="utf-8")
    (tmp_path / "out.txt").write_text("previous contents\n", encoding="utf-8")
    proc = _translate_process(
        "--checkpoint",
        world["ckpt"],
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(tmp_path / "out.txt"),
        "--chunk-lines",
        "50",
        "--beam",
        "1",
    )
    deadline = time.monotonic() + 120
    while not [p for p in tmp_path.glob(".out.txt.*.tmp") if p.stat().st_size] and proc.poll() is None:
        assert time.monotonic() < deadline, "no output within 2 minutes"
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert (tmp_path / "out.txt").read_text() == "previous contents\n"
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.txt"]
    done = int(re.search(r"after (\d+) translated lines", err)[1])
    assert 0 < done < 100_000 and "Traceback" not in err and f"interrupted ({sig.name})" in err, err
    assert f"{tmp_path / 'out.txt'} was not written (it keeps its previous contents)" in err


@pytest.mark.slow
def test_closed_stdin_in_a_real_process(world):
    proc = _translate_process("--checkpoint", world["ckpt"], stdin=subprocess.DEVNULL)
    proc.communicate(timeout=60)
    assert proc.returncode == 0  # empty input: no lines, no error
    closed = subprocess.run(
        f"{sys.executable} -m transformer translate --checkpoint {world['ckpt']} <&-",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert closed.returncode == 2 and closed.stderr.strip() == (
        "error: standard input is closed: give the text as arguments or with --input FILE"
    ), closed.stderr


READ_ONLY = [  # the read-only folder is {ro}; where the platform cannot make one, these are skipped
    ("prepare", prepare_args("data.cache_dir={ro}/cache", "data.vocab_size=200")),
    ("train", train_args("train.out_dir={ro}/run", "train.max_steps=1")),
    ("evaluate", ["--hyp", "{ref}", "--ref", "{ref}", "--json", "{ro}/scores.json"]),
    ("average", ["--inputs", "{ckpt}", "--output", "{ro}/avg.pt"]),
    ("translate", ["--checkpoint", "{ckpt}", "--output", "{ro}/out.txt", "the cat"]),
]


@pytest.mark.parametrize("command, argv", READ_ONLY, ids=[c for c, _ in READ_ONLY])
def test_read_only_folder(command, argv, world, tmp_path, capsys):
    with readonly_dir(tmp_path / "ro", {"out.txt": b"old\n"}) as ro:
        code = MAINS[command]([a.format(tmp=tmp_path, ro=ro, **world) for a in argv])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("error: cannot ") and "\n" not in err, err
        assert "read-only" in err or "permission denied" in err
        assert os.listdir(ro) == ["out.txt"] and (ro / "out.txt").read_bytes() == b"old\n"


# ----------------------------------------------------------------------------- stale temporary checkpoints


def test_a_run_removes_the_temporaries_of_killed_writes_only(world, tmp_path, caplog):
    """A checkpoint write killed with SIGKILL left its temporary file in the run directory: the next run there (it
    holds the lock) removes it and says so in one line; one that a live process (this one) is writing stays."""
    run = tmp_path / "run"
    run.mkdir()
    dead, _ = killed_write(run / "checkpoint_7.pt", size=3_000_000)
    live = run / f".checkpoint_8.pt.{os.getpid()}@{socket.gethostname()}.k2j4h5g6.tmp"
    live.write_bytes(b"being written")
    with caplog.at_level(logging.INFO):
        assert cli.train_main([a.format(tmp=tmp_path, **world) for a in train_args("train.max_steps=1")]) == 0
    assert not dead.exists() and live.read_bytes() == b"being written" and (run / "checkpoint_1.pt").is_file()
    said = [r.getMessage() for r in caplog.records if "temporary" in r.getMessage()]
    assert said == [f"removed 1 temporary file(s), 3.0 MB, left in {run} by writes that were killed: {dead.name}"]


# ------------------------------------------------------------------------------------------- long inputs


def test_a_line_of_100000_characters_gives_one_warning_and_a_translation(world, tmp_path, capsys, caplog):
    (tmp_path / "in.txt").write_text("the cat\n" + "the small dog " * 7_143 + "\nthe mat\n", encoding="utf-8")
    assert len((tmp_path / "in.txt").read_text().splitlines()[1]) == 100_002  # 7,143 x 14 characters
    with caplog.at_level(logging.WARNING):
        code = cli.translate_main(["--checkpoint", world["ckpt"], "--input", str(tmp_path / "in.txt")])
    out = capsys.readouterr().out.splitlines()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert code == 0 and len(out) == 3 and out[1].strip(), out
    assert len(warnings) == 1 and re.fullmatch(
        r"line 2: \d+ source tokens, truncated to 24 \(the model's maximum\)", warnings[0]
    ), warnings  # tiny_checkpoint.MAX_POSITIONS


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_lines_done_and_the_time_left(world, tmp_path, monkeypatch):
    """Reading a file, the bar knows the total: it shows `done/total [elapsed<remaining]` while lines are done."""
    from transformer.decoding.translator import Translator

    real = Translator._translate_batch

    def slow(self, *args, **kwargs):  # a batch takes 0.06 s, so that the bar redraws (at most every 0.1 s) part-way
        time.sleep(0.06)
        return real(self, *args, **kwargs)

    (tmp_path / "in.txt").write_text("the cat\n" * 8, encoding="utf-8")
    monkeypatch.setattr(Translator, "_translate_batch", slow)
    monkeypatch.setattr(sys, "stderr", terminal := _Terminal())
    argv = ["--checkpoint", world["ckpt"], "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o")]
    assert cli.translate_main([*argv, "--chunk-lines", "1"]) == 0
    assert re.search(r"\b[1-7]/8 \[\d\d:\d\d<\d\d:\d\d", terminal.getvalue()), terminal.getvalue()


MEASURE = r"""
import sys
from transformer.commands import cli, common, evaluate, translate

def kb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

loaded = []
def load_translator(args):
    result = common.load_translator(args)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident size (VmHWM) starts again from the current one (Linux >= 4.0)
    loaded.append(kb("VmRSS:"))
    return result

translate.load_translator = evaluate.load_translator = load_translator
code = cli.COMMANDS[sys.argv[1]](sys.argv[2:])
print("measured", code, loaded[0], kb("VmHWM:"))
"""


def _growth(command: str, argv: list[str]) -> int:
    """Peak resident memory of `command` above its level right after the model is loaded, in kB."""
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux's /proc/self/clear_refs to measure a peak from a given moment")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", MEASURE, command, *argv, "--threads", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    code, loaded, peak = map(int, run.stdout.splitlines()[-1].split()[1:])  # the line MEASURE prints last
    assert code == 0, run.stderr
    return peak - loaded


def _lines(path: Path, n: int, words: int = 2, offset: int = 0) -> str:
    """n lines of `words` of tiny_checkpoint's 20 words each, different up to 20^words lines."""
    vocabulary = tiny_checkpoint.WORDS
    lines = (" ".join(vocabulary[(i + offset) // 20**k % 20] for k in range(words)) for i in range(n))
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


FAST = ["--beam", "1", "--max-len-a", "0", "--max-len-b", "1"]  # one decoding step: the reading is what is measured


@pytest.mark.slow
def test_translate_memory_does_not_grow_with_the_input(world, tmp_path):
    """Peak memory above the level right after the model is loaded: 200,000 lines need at most 20% more than
    2,000 (holding the lines would take tens of MB more: 200,000 Python strings of ~60 bytes, and their lists).
    Two-word lines, so that batches take few shapes: oneDNN's kernel per row count, bounded whatever the input
    (tests/test_cpu_linear.py), would otherwise appear gradually over the first tens of thousands of lines."""
    growth = {}
    for n in (2_000, 200_000):
        source = _lines(tmp_path / f"{n}.txt", n)
        growth[n] = _growth(
            "translate",
            ["--checkpoint", world["ckpt"], "--input", source, "--output", str(tmp_path / "out.txt"), *FAST],
        )
    assert growth[200_000] <= 1.2 * growth[2_000], growth


@pytest.mark.slow
def test_evaluate_memory_does_not_grow_with_the_test_set(world, tmp_path):
    """The same for transformer-evaluate translating --src and scoring against --ref: 80,000 lines need at most 20%
    more than 2,000. The references differ line by line: past 65,536 different lines sacreBLEU's tokenizer caches
    alone would add about 40 MB (corpus_stats.CorpusStats.clear_caches)."""
    growth = {}
    for n in (2_000, 80_000):
        source, reference = _lines(tmp_path / "src", n), _lines(tmp_path / "ref", n, words=4, offset=7)
        growth[n] = _growth(
            "evaluate",
            [
                "--checkpoint",
                world["ckpt"],
                "--src",
                source,
                "--ref",
                reference,
                "--output",
                str(tmp_path / "hyp"),
                "--metrics",
                "bleu",
                *FAST,
            ],
        )
    assert growth[80_000] <= 1.2 * growth[2_000], growth
