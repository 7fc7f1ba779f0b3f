"""Real faults and long inputs over the commands, beside tests/test_bad_inputs.py's catalogue: SIGTERM and SIGINT
during a translation and a closed standard input in real processes, read-only folders, the temporary files of
killed checkpoint writes, a line of 100,000 characters, the progress bar, and memory that does not grow with the
input.
"""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tiny_checkpoint
from bad_inputs import MAINS, ROOT, prepare_args, train_args
from fs_faults import killed_write, readonly_dir

from transformer.commands import cli

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
    from transformer.decoding.streaming import StreamingEngine

    real = StreamingEngine._translate_batch

    def slow(self, *args, **kwargs):  # a batch takes 0.06 s, so that the bar redraws (at most every 0.1 s) part-way
        time.sleep(0.06)
        return real(self, *args, **kwargs)

    (tmp_path / "in.txt").write_text("the cat\n" * 8, encoding="utf-8")
    monkeypatch.setattr(StreamingEngine, "_translate_batch", slow)
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
