"""`make gpu-check` without a GPU: one line and exit 0 where there is no CUDA; the forced overflow really skips an
update through the real update function; the judgements (schedule, counts, losses) catch what they are for; the
driver's lines and stamp; and the whole CPU smoke run (slow)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import random_tokens, tiny_model

from transformer.benchmarks import gpu_check
from transformer.benchmarks.gpu_check_runs import CheckFailedError, CheckSkippedError, Run, compare_losses
from transformer.benchmarks.gpu_check_training import UpdateSpy, check_skip
from transformer.benchmarks.stamps import write_json
from transformer.config import load_config
from transformer.data.batching import Batch
from transformer.training import optim

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"
NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("script", ["gpu_check.py", "gpu_report.py"])
def test_without_cuda_one_line_and_exit_0(script, tmp_path):
    folder = ["--results" if "report" in script else "--records", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, f"scripts/{script}", *folder],
        cwd=ROOT,
        env=NO_GPU,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device here" in lines[0] and "--cpu-smoke" in lines[0], done.stdout
    assert not list(tmp_path.iterdir())  # nothing recorded


# ------------------------------------------------------------------------------------------ the forced overflow


def _batch() -> Batch:
    src, tgt = random_tokens(3, 5, seed=1), random_tokens(3, 7, seed=2)
    return Batch(src, tgt[:, :-1], tgt[:, 1:], indices=[0, 1, 2])


@pytest.mark.parametrize("variant", ["host", "scaler", "fused"])
def test_the_forced_update_is_skipped_by_the_real_update(variant):
    """Update 2 of 3 gets non-finite gradients: the real `optim.train_update` skips it (host check, GradScaler, or
    the fused Adam's found_inf), the weights stay, the other updates move them; a GradScaler halves its scale."""
    model, train = tiny_model(), load_config(TINY).train
    kwargs = {"fused": True} if variant == "fused" else {}
    try:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, **kwargs)
    except (RuntimeError, TypeError) as exc:
        pytest.skip(f"no fused Adam on the CPU here: {exc}")
    scaler = torch.amp.GradScaler("cpu") if variant == "scaler" else None
    spy, moved = UpdateSpy(force_at=2), []
    with spy.installed():
        for _ in range(3):
            before = [p.detach().clone() for p in model.parameters()]
            optim.train_update(
                model, [_batch()], optimizer, lr=1e-3, train=train, precision="fp32", scaler=scaler, pad_id=0
            )
            moved.append(any(not torch.equal(a, p) for a, p in zip(before, model.parameters())))
    assert spy.skipped == [False, True, False] and moved == [True, False, True]
    assert spy.weights_moved is False and spy.rates == [1e-3] * 3
    assert spy.scales == ((65536.0, 32768.0) if variant == "scaler" else None)  # GradScaler: init 2^16, backoff 0.5
    assert optim.train_update is not spy and optim.batch_loss.__name__ == "batch_loss"  # both put back


# ------------------------------------------------------------------------------------------ the judgements


def _run(rates, skipped, *, counted=None, step=None, scales=None, moved=False) -> tuple[UpdateSpy, Run]:
    """A spy and a run as a training run of the tiny config would leave them."""
    spy = UpdateSpy(force_at=2)
    spy.rates, spy.skipped, spy.weights_moved, spy.scales = rates, skipped, moved, scales
    applied = len(skipped) - sum(skipped)
    result = {"skipped": sum(skipped) if counted is None else counted, "step": applied if step is None else step}
    return spy, Run(load_config(TINY), result, {}, Path("."))


# configs/tiny.yaml: inverse_sqrt, lr 3e-3, warmup 20: update k < 20 runs at 3e-3 * k / 20
LR = [3e-3 * k / 20 for k in range(1, 6)]


def test_check_skip_accepts_a_skip_that_holds_the_schedule():
    spy, run = _run([LR[0], LR[1], LR[1], LR[2]], [False, True, False, False], scales=(1024.0, 512.0))
    detail = check_skip(spy, run)
    assert "skipped, counted (1 of 4), schedule held, loss scale 1024 -> 512, weights unchanged" in detail


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (dict(rates=[LR[0], LR[1], LR[2], LR[3]], skipped=[False, True, False, False]), "a skip moved the schedule"),
        (dict(rates=[LR[0], LR[1], LR[2]], skipped=[False, False, False]), "with non-finite gradients, was applied"),
        (dict(rates=[LR[0], LR[1], LR[1]], skipped=[False, True, False], moved=True), "the weights moved"),
        (dict(rates=[LR[0], LR[1], LR[1]], skipped=[False, True, False], counted=0), "counted 0 skipped"),
        (dict(rates=[LR[0], LR[1], LR[1]], skipped=[False, True, False], step=3), "counted 3 updates, 2 applied"),
        (dict(rates=[LR[0], LR[1], LR[1]], skipped=[False, True, False], scales=(1024.0, 1024.0)), "not halved"),
    ],
)
def test_check_skip_names_what_went_wrong(case, message):
    rates, skipped = case.pop("rates"), case.pop("skipped")
    with pytest.raises(CheckFailedError, match=message):
        check_skip(*_run(rates, skipped, **case))


def test_compare_losses():
    reference = {1: 5.0, 2: 4.0, 3: 3.0}
    assert compare_losses({1: 5.0, 2: 4.004, 3: 3.0}, reference, 3, 5e-3) == pytest.approx(1e-3)  # 0.004 / 4
    with pytest.raises(CheckFailedError, match=r"update 2: loss 4.04 against 4 \(relative 1.0e-02 > 0.005\)"):
        compare_losses({1: 5.0, 2: 4.04, 3: 3.0}, reference, 3, 5e-3)
    with pytest.raises(CheckFailedError, match=r"no logged loss at update\(s\) \[3\]"):
        compare_losses({1: 5.0, 2: 4.0}, reference, 3, 5e-3)
    with pytest.raises(CheckFailedError, match="update 1"):
        compare_losses({1: math.nan, 2: 4.0, 3: 3.0}, reference, 3, 5e-3)


# ------------------------------------------------------------------------------------------ the driver


def _fail(ctx):
    raise CheckFailedError("the loss went up")


def _skip(ctx):
    raise CheckSkippedError("ctranslate2 is not installed")


def _crash(ctx):
    raise RuntimeError("CUDA error: an illegal memory access\nsecond line")


def test_one_line_per_path_exit_1_on_a_failure_and_the_stamp(tmp_path, capsys):
    checks = [("a", lambda ctx: "held"), ("b", _skip), ("c", _fail), ("d", _crash), ("e", lambda ctx: "fine")]
    ctx = gpu_check.context(smoke=True, work=tmp_path)
    code = gpu_check.run_checks(ctx, checks, records=tmp_path / "rec", commit="abc123", device="CPU X", command="c")
    lines = capsys.readouterr().out.splitlines()
    assert code == 1 and len(lines) == 7 and "commit abc123" in lines[0]
    assert [line.split(":")[0] for line in lines[1:6]] == ["PASS a", "SKIP b", "FAIL c", "FAIL d", "PASS e"]
    assert "the loss went up" in lines[3] and "RuntimeError: CUDA error: an illegal memory access (" in lines[4]
    assert lines[6].startswith("gpu-check: 2 passed, 2 failed (c, d), 1 skipped")
    stamp = json.loads((tmp_path / "rec" / "gpu_check_cpu-x_partial.json").read_text())  # not every path: partial
    assert stamp["kind"] == "gpu_check" and stamp["commit"] == "abc123" and stamp["device"] == "CPU X"
    assert stamp["finished"] and not stamp["passed"] and stamp["mode"] == "cpu-smoke"
    assert [(r["path"], r["status"]) for r in stamp["results"]] == [
        ("a", "PASS"),
        ("b", "SKIP"),
        ("c", "FAIL"),
        ("d", "FAIL"),
        ("e", "PASS"),
    ]
    passing = [(name, lambda ctx: "held") for name, _ in gpu_check.CHECKS]  # every path ran, none failed
    assert (
        gpu_check.run_checks(ctx, passing, records=tmp_path / "rec", commit="abc123", device="CPU X", command="c") == 0
    )
    assert json.loads((tmp_path / "rec" / "gpu_check_cpu-x.json").read_text())["passed"]


def test_a_check_stopped_part_way_goes_on_from_its_record(tmp_path, capsys):
    """A record with this stamp (a check killed part-way, one path failed): the paths it passed or skipped are
    carried over, the others run; another stamp runs everything."""
    names = [name for name, _ in gpu_check.CHECKS]
    ran = []
    run = lambda name: lambda ctx: ran.append(name) or "held"  # noqa: E731
    earlier = [
        {"path": names[0], "status": "PASS", "detail": "held before", "seconds": 1.0},
        {"path": names[1], "status": "SKIP", "detail": "no package", "seconds": 0.1},
        {"path": names[2], "status": "FAIL", "detail": "broke", "seconds": 2.0},
    ]
    path = gpu_check.record_path(tmp_path, "CPU X")
    write_json(path, {"kind": "gpu_check", "stamp": "s1", "finished": False, "passed": False, "results": earlier})
    ctx = gpu_check.context(smoke=True, work=tmp_path)
    checks = [(name, run(name)) for name in names]
    assert gpu_check.run_checks(ctx, checks, records=tmp_path, commit="c", device="CPU X", command="c", stamp="s1") == 0
    assert ran == names[2:] and "(recorded earlier with this stamp)" in capsys.readouterr().out
    record = json.loads(path.read_text())
    assert record["passed"] and [r["status"] for r in record["results"][:3]] == ["PASS", "SKIP", "PASS"]
    assert record["results"][0]["detail"] == "held before"
    ran.clear()
    assert gpu_check.run_checks(ctx, checks, records=tmp_path, commit="c", device="CPU X", command="c", stamp="s2") == 0
    assert ran == names  # another stamp: nothing carried over


# What each path's line must say in the CPU smoke run (the dress rehearsal of tests/test_gpu_report_processes.py runs
# them all).
SMOKE_DETAILS = {
    "bf16": "decided on the device",
    "fp16-scaler": "bf16 autocast with a GradScaler forced on",
    "prefetch": "prefetch 2 vs 0",
    "compile-buckets": "aot_eager backend, dynamic shapes, 1 graph(s)",
    "unfused-loss": "validations with greedy BLEU",
    "torchrun": "2 micro-batches per update (no_sync on the first)",
    "kill-resume": "SIGTERM at update",
    "decode": "CPU smoke: the tiny model, pre-LN",
    "graphs": "CPU smoke: the same steps, no capture",
    "evaluate": "precision auto (fp32)",
    "inspect": "transformer-score within",
    "export-hf": "exported, loaded on cpu",
    "export-ctranslate2": "exported, loaded on cpu",
}


def test_every_path_has_its_smoke_detail():
    assert list(SMOKE_DETAILS) == [name for name, _ in gpu_check.CHECKS]


@pytest.mark.slow
def test_cpu_smoke_of_some_paths_writes_the_partial_record(tmp_path):
    """`--only` runs some paths (and the runs they compare with) on the CPU and records them as partial, never
    passed."""
    paths = ["prefetch", "decode"]
    command = [
        sys.executable,
        "scripts/gpu_check.py",
        "--cpu-smoke",
        "--records",
        str(tmp_path / "rec"),
        "--work",
        str(tmp_path / "work"),
        "--commit",
        "smoke1",
        "--only",
        ",".join(paths),
    ]
    done = subprocess.run(command, cwd=ROOT, env=NO_GPU, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    (record_path,) = (tmp_path / "rec").glob("gpu_check_*_partial.json")
    record = json.loads(record_path.read_text())
    assert record["finished"] and not record["passed"] and record["commit"] == "smoke1" and record["stamp"]
    assert [(r["path"], r["status"]) for r in record["results"]] == [(p, "PASS") for p in paths]
    assert all(SMOKE_DETAILS[r["path"]] in r["detail"] for r in record["results"])


# ------------------------------------------------------------------------------------------ engines and decoding


@pytest.mark.parametrize(
    ("code", "stdout", "outcome", "message"),
    [
        (0, "loading\nPASS exported, loaded on cuda: equal on 100%\n", None, "exported, loaded on cuda"),
        (0, "FAIL greedy output equal to ours on 60% of 40 sentences\n", CheckFailedError, "on 60% of 40"),
        (0, "SKIP ctranslate2 is not installed\n", CheckSkippedError, "not installed"),
        (-11, "loading CUDA libraries\n", CheckSkippedError, r"its process crashed \(exit code -11\)"),
    ],
)
def test_an_engine_checked_in_its_own_process(monkeypatch, tmp_path, code, stdout, outcome, message):
    """The export checks read the child's last line; a child that crashes (CTranslate2 loading its CUDA libraries)
    is a SKIP with its reason, never the end of the check."""
    from transformer.benchmarks import gpu_check_decoding, gpu_check_engines

    calls = []
    monkeypatch.setattr(gpu_check_decoding, "_checkpoint", lambda ctx: tmp_path / "checkpoint_last.pt")
    monkeypatch.setattr(
        gpu_check_engines.subprocess,
        "run",
        lambda command, **kw: calls.append(command) or subprocess.CompletedProcess(command, code, stdout, ""),
    )
    ctx = gpu_check.context(smoke=True, work=tmp_path)
    if outcome is None:
        assert message in gpu_check_engines.check_export_ctranslate2(ctx)
    else:
        with pytest.raises(outcome, match=message):
            gpu_check_engines.check_export_ctranslate2(ctx)
    assert calls[0][1:4] == ["-m", "transformer.benchmarks.gpu_check_engines", "ctranslate2"]


def test_half_precision_is_judged_by_agreement_and_chrf():
    from transformer.benchmarks.gpu_check_decoding import _judge
    from transformer.decoding.streaming import Translation

    def outputs(texts):
        return [Translation(text=t, score=0.0, log_prob=0.0, tokens=[len(w) for w in t.split()]) for t in texts]

    full = outputs([f"the word {i} of the book of Ruth" for i in range(20)])
    near = outputs([f"the word {i} of the book of Ruth" if i % 3 else f"the word {i} of the book" for i in range(20)])
    broken = outputs(["lord lord" for i in range(20)])
    assert _judge(near, full, [t.text for t in full], "greedy bf16")[1]  # two thirds the same, chrF high
    part, good = _judge(broken, full, [t.text for t in full], "greedy fp16")
    assert not good and "same 0%" in part
