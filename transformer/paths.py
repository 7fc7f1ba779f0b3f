"""Where files are: config-relative data paths and the configs shipped with the package.

The rule: relative input paths in a config file (each source kind's, as `SplitConfig.KINDS` lists them: `src`,
`tgt`, `tsv`, `data_files`; and `dataset` with `from_disk: true`) resolve against the folder of that file, so
`--config /abs/path/configs/demo.yaml` works from any directory; paths given with `--set` resolve against the
current directory, as the shell would. Outputs (`data.cache_dir`, `train.out_dir`) stay relative to the current
directory: a run writes where it is started. `--config NAME` without a folder, when no such file exists, finds a
shipped config (`demo`, `tiny`, `base`, ...).
`check_file` names a missing input and where its relative path was looked for. No torch import.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformer.errors import UserError

_PATH_BASES: dict[str, str] = {}  # resolved path -> the config file whose folder it was resolved against


def shipped_configs_dir() -> Path:
    """The configs that come with the package: inside an installed wheel, else the checkout's `configs/`."""
    installed = Path(__file__).resolve().parent / "bundled" / "configs"
    return installed if installed.is_dir() else Path(__file__).resolve().parents[1] / "configs"


def find_config(name: str | Path) -> Path:
    """A config file's path: `name` itself when it exists, else a shipped config by name (`demo`, `tiny.yaml`)."""
    path = Path(name)
    if path.is_file() or len(path.parts) > 1:
        return path
    shipped = shipped_configs_dir() / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in shipped_configs_dir().glob("*.yaml")))
    raise UserError(f"config file not found: {name} (looked in {Path.cwd()}); shipped configs by name: {names}")


def path_base(path: str | Path) -> str:
    """Which base a data path was resolved against, for error messages."""
    config = _PATH_BASES.get(str(path))
    if config is not None:
        return f"relative paths in a config resolve against its folder: {Path(config).parent} (of {config})"
    if Path(path).is_absolute():
        return "an absolute path"
    return f"a relative path from --set or code resolves against the current directory {Path.cwd()}"


def _resolve(value: str, base: Path, config: Path) -> str:
    if "://" in value or Path(value).is_absolute():
        return value
    resolved = os.path.normpath(base / value)
    _PATH_BASES[resolved] = str(config)
    return resolved


def resolve_split_paths(split: Any, base: Path, config: Path, kinds: dict[str, Any]) -> None:
    """Rewrite the relative input paths of one split mapping (and its corpora) against `base`, in place; `kinds` is
    `SplitConfig.KINDS` (kind -> (the fields that name it, its input paths))."""
    if not isinstance(split, dict):
        return
    for key in dict.fromkeys(key for _, paths in kinds.values() for key in paths):
        value = split.get(key)
        if isinstance(value, str):
            split[key] = _resolve(value, base, config)
        elif isinstance(value, list):
            split[key] = [_resolve(v, base, config) if isinstance(v, str) else v for v in value]
    if split.get("from_disk") and isinstance(split.get("dataset"), str):
        split["dataset"] = _resolve(split["dataset"], base, config)
    for corpus in split.get("corpora") or []:
        resolve_split_paths(corpus, base, config, kinds)


def check_file(path: str | Path, what: str) -> Path:
    """`path` as a Path when it is a file, else a `UserError` naming `what` and where relative paths resolve."""
    if not Path(path).is_file():
        raise UserError(f"{what} not found: {path} ({path_base(path)})")
    return Path(path)
