"""What `make gpu-check` and `make gpu-report` record beside their results: what a result depends on, the device it
was measured on, and small JSON records that let a later call skip what an earlier call already did.

A step's stamp (`dependency_stamp`) is a hash of the contents of the files it runs (its `depends`: files or folders
of the checkout, e.g. the configs it trains, the scripts and library modules it runs, the data it reads) and of
strings such as the GPU's name, the torch version and the versions of the optional packages it uses. A later call
skips a step whose record carries the same stamp, so fixing one module re-runs only the steps that run it, and no
git is needed (GPU machines get a copy of the working tree without git). The code commit (`code_commit`) is still
written into records, for people: from `--commit`, $GPU_COMMIT or git, else "unknown".
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from transformer.devices import cpu_name, device_name  # noqa: F401 (re-exported: every record names its device)
from transformer.fileio import write_text

ROOT = Path(__file__).resolve().parents[2]
CODE = ("transformer", "scripts", "configs", "Makefile", "pyproject.toml")  # what the recorded commit covers
UNKNOWN = "unknown"
SKIPPED_FILES = ("__pycache__", ".pyc")  # never part of a stamp: written by running the code


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


def _files(relative: str) -> list[Path]:
    """The files of `relative` (a file, a folder walked, or a glob pattern of the checkout), sorted."""
    found = []
    for path in sorted(ROOT.glob(relative)) if any(c in relative for c in "*?[") else [ROOT / relative]:
        found += sorted(path.rglob("*")) if path.is_dir() else [path] if path.is_file() else []
    return [f for f in found if f.is_file() and not any(part in str(f) for part in SKIPPED_FILES)]


def dependency_stamp(depends: Iterable[str], *extra: str) -> str:
    """16 hex digits of a SHA-256 over each file of `depends` (its path relative to the checkout and its bytes) and
    the `extra` strings: equal exactly when the same code, configs and data run on the same device and libraries."""
    digest = hashlib.sha256()
    for relative in sorted(set(depends)):
        for file in _files(relative):
            digest.update(file.relative_to(ROOT).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    for text in extra:
        digest.update(text.encode() + b"\0")
    return digest.hexdigest()[:16]


def package_versions(*names: str) -> str:
    """'torch 2.11.0, transformers 5.17.0, ctranslate2 missing': the installed versions, for stamps and records."""
    from importlib import metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "missing"

    return ", ".join(f"{name} {version(name)}" for name in ("torch", *names))


def step_stamp(depends: Iterable[str], device: str, packages: Iterable[str], signature: str) -> str:
    """A report step's stamp: `dependency_stamp` of its files, the device, the versions of torch and `packages`, and
    its `signature` (the arguments that change what it measures)."""
    return dependency_stamp(depends, device, package_versions(*packages), signature)
