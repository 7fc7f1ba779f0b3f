"""What `make gpu-check` and `make gpu-report` record beside their results: the code commit and the device a result
belongs to, and small JSON stamps that let a second run skip what a first run already did on the same code and GPU.

The commit is the last one that changed the code (`CODE`: the package, the scripts, the configs, the Makefile and
pyproject.toml), so committing records or documentation between two calls on a GPU machine does not make the next
call redo its work; "-dirty" is added while that code differs from it. GPU machines get a copy of the working tree
without git, so there the commit comes from `--commit` or $GPU_COMMIT (`scripts/gpu_report.py --print-commit`
prints it here); without either it is "unknown", which never matches, so nothing is skipped.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from transformer.fileio import write_text

ROOT = Path(__file__).resolve().parents[2]
CODE = ("transformer", "scripts", "configs", "Makefile", "pyproject.toml")  # what a result depends on
UNKNOWN = "unknown"


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_commit(given: str | None = None) -> str:
    """`given`, else $GPU_COMMIT, else the last git commit of `CODE` (+"-dirty" if that code has changed since),
    else "unknown"."""
    if given or os.environ.get("GPU_COMMIT"):
        return given or os.environ["GPU_COMMIT"]
    commit = _git("log", "-1", "--format=%H", "--", *CODE)
    if not commit:
        return UNKNOWN
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", *CODE)
    return commit + ("-dirty" if changed else "")


def cpu_name() -> str:
    """'2-core CPU (AMD EPYC)': the cores this process may use and /proc/cpuinfo's model name."""
    model = platform.processor() or platform.machine() or "unknown model"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(errors="replace"), re.MULTILINE)
        model = found[1].strip() if found else model
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores}-core CPU ({model})"


def device_name(cuda: bool) -> str:
    """The GPU's name as torch reports it ('NVIDIA H100 80GB HBM3'), or `cpu_name()`."""
    if cuda:
        import torch

        return torch.cuda.get_device_name(0)
    return cpu_name()


def slug(text: str, limit: int = 40) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': for file names."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit]


def today() -> str:
    return datetime.date.today().isoformat()


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when it is missing or unreadable."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_json(path: Path, record: dict[str, Any]) -> None:
    """`record` to `path` atomically (its folder made), indented as docs/results/ holds them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(record, indent=2, ensure_ascii=False) + "\n")


def same_work(stamp: dict[str, Any] | None, commit: str, device: str) -> bool:
    """Does `stamp` belong to this code commit (a known one) and this device?"""
    return bool(stamp) and commit != UNKNOWN and stamp.get("commit") == commit and stamp.get("device") == device
