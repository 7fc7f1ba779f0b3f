"""The steps of `make gpu-report` (gpu_report.py runs them): each one's command, cap, records and what it depends
on (its stamp: `stamps.step_stamp`), on a GPU and in the CPU smoke mode (the same scripts with tiny shapes); and the
`Report` they are run for: where their records go and which of them need no run.

Caps on one GPU (docs/gpu.md#the-caps), against the seconds each step took in the first window (one H200,
2026-11-28): check 280 s (177), train 420 s (59 before its compiled run and profile were added; about 200 now by
estimate, Inductor's compilation of the base model the unknown), decode 120 s (39), each recipe piece 270 s (189
and 186: 3 minutes of training, then its save; data preparation and CUDA's start before it). The five took 12.7 of
a window's 15 device-minutes there, in calls of `--budget` what was left, on the warm machine. The recipe pieces
write a `recipe_piece` record (updates, minutes, the validation curve): one piece does not end a recipe, so no
`bleu` record comes until `make recipe` has run a recipe to its end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from transformer.benchmarks.stamps import ROOT, read_json, slug, step_stamp, today, write_json

STEP_NAMES = ("check", "graphs", "train", "decode", "recipe-pre-ln", "recipe-post-ln")
PY = sys.executable
RECIPES = {"recipe-pre-ln": "configs/bible_es_en.yaml", "recipe-post-ln": "configs/bible_es_en_paper.yaml"}
BASE_SHAPE = "base (6+6, d512, ff2048, V8000)"  # the name docs/results/decode_cpu_base_*.json use


# What the steps run, for their stamps (stamps.dependency_stamp: files, folders or glob patterns of the checkout).
CORE = ("transformer/*.py", "transformer/model", "transformer/data")
LIBRARY = (*CORE, "transformer/training", "transformer/decoding", "transformer/interop", "transformer/commands")
TRAIN_DEPENDS = (
    *CORE,
    "transformer/training",
    "transformer/interop/export.py",
    "transformer/interop/marian.py",
    "transformer/commands/cli.py",
    "scripts/bench_gpu.py",
    "scripts/benchmark.py",
    "transformer/benchmarks/training.py",
    "configs/base.yaml",
    "configs/big.yaml",
)
DECODE_DEPENDS = (
    *CORE,
    "transformer/decoding",
    "transformer/interop",
    "transformer/commands/cli.py",
    "transformer/benchmarks/decode.py",
    "scripts/benchmark.py",
    "configs/base.yaml",
    "configs/tiny.yaml",
)
RECIPE_DEPENDS = (*LIBRARY, "scripts/run_recipe.py", "data/bible-es-en")
GRAPHS_DEPENDS = (*TRAIN_DEPENDS, *DECODE_DEPENDS, "scripts/bench_graphs.py")


@dataclass(frozen=True)
class Step:
    name: str
    cap: float  # seconds
    command: Callable[[Report], list[str]]  # built just before the step runs
    summary: Callable[[Report, str], list[Path]] | None = None  # records it writes after the run, given the status
    depends: tuple[str, ...] = ()  # the files it runs, its configs and data: part of its stamp
    packages: tuple[str, ...] = ()  # the packages it uses besides torch: their versions are part of its stamp
    signature: str = ""  # the arguments that change what it measures: part of its stamp
    adopt: Callable[[Report, str], dict | None] | None = None  # a record made outside the report that does for it
    resumable: bool = False  # capped, it goes on from where it stopped when run again: run it again


GRACE_S = 10.0  # between SIGTERM and SIGKILL of a step's process group
RECORDED = ("done", "skipped", "failed", "capped")  # not run again for the same stamp (unless --redo)


@dataclass
class Report:
    """Where records go, what they belong to, the budget, and what the caller asked to run."""

    results: Path
    device: str
    commit: str  # for people; skipping goes by each step's stamp
    budget: float  # seconds
    only: set[str] = field(default_factory=set)  # empty: every step
    redo: set[str] = field(default_factory=set)
    caps: dict[str, float] = field(default_factory=dict)  # cap overrides, seconds
    grace: float = GRACE_S

    def ledger(self, step: str, suffix: str = "json") -> Path:
        return self.results / "gpu" / f"report_{step}_{slug(self.device)}.{suffix}"

    def stamp(self, step: Step) -> str:
        return step_stamp(step.depends, self.device, step.packages, step.signature)

    def recorded(self, step: Step, stamp: str) -> str | None:
        """Why `step` needs no run (its record, with this stamp), or None."""
        record = read_json(self.ledger(step.name))
        again = step.resumable and (record or {}).get("status") == "capped"  # it goes on from where it stopped
        if record and record.get("stamp") == stamp and record.get("status") in RECORDED and not again:
            return f"{record['status']} on {record['date']}"
        done = step.adopt(self, stamp) if step.adopt is not None else None
        if done is not None:  # e.g. `make gpu-check` run alone, passed with this stamp: the check step is done
            entry = {
                "kind": "gpu_report_step",
                "step": step.name,
                "status": "done",
                "device": self.device,
                "date": today(),
                "commit": self.commit,
                "stamp": stamp,
                **done,
            }
            write_json(self.ledger(step.name), entry)
            return f"done on {done.get('date', today())}: {done.get('adopted', '')}"
        return None


# ------------------------------------------------------------------------------------------------ check


def _check_record(report: Report) -> Path:
    from transformer.benchmarks.gpu_check import record_path

    return record_path(report.results / "gpu", report.device)


def _check(smoke: bool, cap: float) -> Step:
    from transformer.benchmarks.gpu_check_runs import CHECK_DEPENDS, CHECK_PACKAGES, check_signature

    def command(report: Report) -> list[str]:
        smoke_flag = ["--cpu-smoke"] if smoke else []
        return [
            PY,
            "scripts/gpu_check.py",
            *smoke_flag,
            "--records",
            str(report.results / "gpu"),
            "--commit",
            report.commit,
        ]

    def summary(report: Report, status: str) -> list[Path]:
        return [p for p in [_check_record(report)] if p.is_file()]

    def adopt(report: Report, stamp: str) -> dict | None:
        """gpu-check's own record, when it ran alone with this stamp and passed."""
        record = read_json(_check_record(report))
        if not record or record.get("stamp") != stamp or not record.get("passed"):
            return None
        path = _check_record(report)
        return {
            "adopted": f"gpu-check passed alone ({path.name})",
            "records": [str(path)],
            "seconds": record.get("seconds"),
            "command": record.get("command"),
        }

    signature = check_signature(smoke)
    return Step("check", cap, command, summary, CHECK_DEPENDS, CHECK_PACKAGES, signature, adopt, resumable=True)


# ------------------------------------------------------------------------------------------------ decode


def probe_ctranslate2(device: str) -> str | None:
    """None when CTranslate2 translates with a tiny exported model on `device`, else why not (one line)."""
    try:
        import ctranslate2
    except ImportError:
        return "ctranslate2 is not installed"
    from transformer.benchmarks.decode import RandomPieces
    from transformer.config import load_config
    from transformer.data.tokenizer import PAD_ID
    from transformer.interop.export import export_ctranslate2
    from transformer.model.transformer import Transformer

    config = load_config(ROOT / "configs" / "tiny.yaml")
    model = Transformer.from_config(config.model, src_vocab_size=30, tgt_vocab_size=30, pad_id=PAD_ID)
    try:
        with tempfile.TemporaryDirectory() as folder:
            export_ctranslate2(model, RandomPieces(30), config, Path(folder), spm=False)
            compute = "float16" if device == "cuda" else "float32"
            translator = ctranslate2.Translator(folder, device=device, compute_type=compute)
            translator.translate_batch([["t5", "t6", "</s>"]], max_decoding_length=4)
    except Exception as exc:  # a missing CUDA library, another CUDA version, ...: whatever stops it
        return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
    return None


def ctranslate2_problem(device: str) -> str | None:
    """`probe_ctranslate2` in a process of its own (a crash in CTranslate2's CUDA loading stays there)."""
    command = [PY, "scripts/gpu_report.py", "--probe-ctranslate2", device]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        return "it did not translate one sentence in 180 s"
    last = (done.stdout.strip().splitlines() or [f"exit code {done.returncode}: {done.stderr.strip()[-200:]}"])[-1]
    return None if done.returncode == 0 else last


def decode_engines(problem: str | None, hf: bool = True) -> tuple[str, list[str]]:
    """(--engines, extra arguments): CTranslate2 with ours (and HF), or, where it cannot run, a note saying so."""
    if problem is None:
        return ("ours,ctranslate2,hf" if hf else "ours,ctranslate2"), []
    note = f"CTranslate2 cannot run on this machine ({problem}): ours against HF generate only"
    return ("ours,hf" if hf else "ours"), ["--note", note]


def _decode(smoke: bool, cap: float) -> Step:
    def command(report: Report) -> list[str]:
        engines, note = decode_engines(ctranslate2_problem("cpu" if smoke else "cuda"), hf=not smoke)
        out = ["--engines", engines, *note, "--out", str(report.results)]
        if smoke:
            return [
                PY,
                "scripts/benchmark.py",
                "decode",
                "--device",
                "cpu",
                "--config",
                "configs/tiny.yaml",
                "--vocab",
                "300",
                "--sentences",
                "8",
                "--src-len",
                "8",
                "--forced",
                "6",
                "--computes",
                "fp32",
                "--threads",
                "1",
                "--repeats",
                "1",
                "--shape",
                "tiny",
                *out,
            ]
        return [
            PY,
            "scripts/benchmark.py",
            "decode",
            "--device",
            "cuda",
            "--config",
            "configs/base.yaml",
            "--forced",
            "32",
            "--computes",
            "fp16",
            "--beams",
            "4,1",
            "--shape",
            BASE_SHAPE,
            *out,
        ]

    signature = "decode " + ("tiny cpu fp32" if smoke else f"{BASE_SHAPE} cuda fp16 beams 4,1 forced 32")
    return Step(
        "decode", cap, command, depends=DECODE_DEPENDS, packages=("transformers", "ctranslate2"), signature=signature
    )


# ------------------------------------------------------------------------------------------------ graphs


def _graphs(smoke: bool, cap: float) -> Step:
    """scripts/bench_graphs.py: eager, compiled and graphed training of base and big, and our eager and graphed
    decoding against HF generate (fp16, bf16; batches of 32 and 128), into results/graphs/."""

    def command(report: Report) -> list[str]:
        return [PY, "scripts/bench_graphs.py", *(["--cpu-smoke"] if smoke else []), "--out", str(_graphs_out(report))]

    def summary(report: Report, status: str) -> list[Path]:
        return sorted(_graphs_out(report).glob("*.json"))

    signature = "bench-graphs " + ("tiny cpu" if smoke else "base,big; decode base fp16,bf16 b32,b128")
    return Step("graphs", cap, command, summary, GRAPHS_DEPENDS, ("transformers",), signature)


def _graphs_out(report: Report) -> Path:
    return report.results / "graphs"


# ------------------------------------------------------------------------------------------------ recipes


def piece_record(out_dir: Path, *, name: str, config: str, report: Report, command: str, status: str) -> dict:
    """What one piece of a recipe left in its run folder (recipe.json, metrics.jsonl), as a `recipe_piece` record."""
    state = json.loads((out_dir / "recipe.json").read_text(encoding="utf-8"))
    log = out_dir / "metrics.jsonl"  # none yet when the piece ended before its first log line
    lines = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
    metrics = [json.loads(line) for line in lines if line.strip()]
    valid = [{k: m[k] for k in ("step", "valid_loss", "valid_bleu") if k in m} for m in metrics if "valid_loss" in m]
    train = [m for m in metrics if "loss" in m and "valid_loss" not in m]
    return {
        "kind": "recipe_piece",
        "name": name,
        "config": config,
        "device": report.device,
        "date": today(),
        "commit": report.commit,
        "command": command,
        "status": status,
        "updates": state["step"],
        "train_minutes": round(state["elapsed"] / 60, 2),
        "pieces": len(state["pieces"]),
        "done": state["done"],
        "stop_reason": state["pieces"][-1]["reason"] if state["pieces"] else None,
        "best_valid": state.get("best"),
        "last_train": train[-1] if train else None,
        "validations": valid,
    }


def _recipe(step: str, config: str, overrides: list[str], arguments: list[str], cap: float) -> Step:
    def command(report: Report) -> list[str]:
        sets = [a for s in overrides for a in ("--set", s)]
        return [
            PY,
            "scripts/run_recipe.py",
            "--config",
            config,
            *sets,
            *arguments,
            "--max-pieces",
            "1",
            "--results-dir",
            str(report.results),
            "--no-progress",
        ]

    def summary(report: Report, status: str) -> list[Path]:
        from transformer.config import load_config

        out_dir = ROOT / load_config(ROOT / config, overrides).train.out_dir
        if not (out_dir / "recipe.json").is_file():
            return []  # capped before the first piece ended: the log holds what there is
        name = arguments[arguments.index("--name") + 1] if "--name" in arguments else Path(config).stem
        record = piece_record(
            out_dir, name=name, config=config, report=report, command=" ".join(command(report)), status=status
        )
        path = report.results / f"recipe_piece_{name}_{slug(report.device)}.json"
        write_json(path, record)
        return [path]

    signature = " ".join([config, *overrides, *arguments])
    return Step(step, cap, command, summary, (*RECIPE_DEPENDS, config), signature=signature)


# ------------------------------------------------------------------------------------------------ the lists


def gpu_steps(docs: Path) -> list[Step]:
    """The report on a GPU: `make gpu-check`, the CUDA-graph measurements, `make bench-gpu`, the decode report, a
    piece of each recipe."""
    train = lambda report: [PY, "scripts/bench_gpu.py", "--out", str(report.results), "--docs", str(docs)]  # noqa: E731
    recipes = [_recipe(step, config, [], ["--piece", "3m"], 270) for step, config in RECIPES.items()]
    bench = Step("train", 420, train, depends=TRAIN_DEPENDS, packages=("transformers",), signature="bench-gpu base,big")
    return [_check(False, 280), _graphs(False, 360), bench, _decode(False, 120), *recipes]


def _smoke_train(report: Report) -> list[str]:
    docs = report.results / "benchmarks.md"  # bench_gpu.py rewrites the table between its markers
    if not docs.is_file():
        docs.parent.mkdir(parents=True, exist_ok=True)
        docs.write_text("<!-- bench-gpu table: begin -->\n<!-- bench-gpu table: end -->\n", encoding="utf-8")
    return [
        PY,
        "scripts/bench_gpu.py",
        "--cpu-smoke",
        "--out",
        str(report.results),
        "--docs",
        str(docs),
        "--peers",
        "torch",
    ]


def smoke_steps(work: Path) -> list[Step]:
    """The same steps on the CPU with tiny shapes: the check's smoke mode, bench-gpu's, a tiny random model's decode
    report, and recipe pieces of 2 updates of configs/tiny.yaml, pre-LN then post-LN (runs and cache in `work`)."""
    recipes = []
    for step, norm_first in (("recipe-pre-ln", "true"), ("recipe-post-ln", "false")):
        name = f"tiny_{step.removeprefix('recipe-').replace('-', '_')}"
        overrides = [
            f"train.out_dir={work / name}",
            f"data.cache_dir={work / 'cache'}",
            f"model.norm_first={norm_first}",
            "train.threads=1",
        ]
        arguments = ["--name", name, "--piece", "0", "--piece-updates", "2"]
        recipes.append(_recipe(step, "configs/tiny.yaml", overrides, arguments, 120))
    train = Step("train", 120, _smoke_train, depends=TRAIN_DEPENDS, signature="bench-gpu tiny cpu")
    return [_check(True, 180), _graphs(True, 180), train, _decode(True, 120), *recipes]
