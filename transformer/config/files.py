"""Config files: reading YAML (with `base:` chains), `--set section.key=value` overrides, and writing.

`load_config` reads a file with `yaml.safe_load`, lays it over a base (a checkpoint's config, or a `base:` file),
applies the overrides and builds the sections (`sections.from_dict` validates them). Relative data paths in a file
resolve against the file's folder (`transformer.paths` states the whole rule).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from transformer.config.sections import TOKENIZER_FILES, Config, SplitConfig, from_dict, without_removed
from transformer.errors import ConfigError
from transformer.fileio import decode_utf8, write_text
from transformer.paths import find_config, resolve_split_paths
from transformer.typecheck import require


def set_dotted(tree: dict[str, Any], override: str) -> None:
    """Apply one `section.key=value` override to a nested mapping; the value is parsed as YAML."""
    key, sep, raw = override.partition("=")
    require(bool(sep) and bool(key.strip()), f"bad override {override!r}: use section.key=value")
    *parents, leaf = key.strip().split(".")
    node = tree
    for part in parents:
        child = node.setdefault(part, {})
        require(isinstance(child, dict), f"bad override {override!r}: '{part}' is not a section")
        node = child
    node[leaf] = yaml.safe_load(raw) if raw.strip() else None


def _merge(tree: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`update`'s sections over `tree`'s, key by key (a split such as `data.train` is replaced whole)."""
    merged = dict(tree)
    for section, values in update.items():
        both = isinstance(values, dict) and isinstance(merged.get(section), dict)
        merged[section] = {**merged[section], **values} if both else values
    return merged


def _read_yaml(path: str | Path, _children: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file as a tree; `base: FILE` (relative to this file's folder, or a shipped config's name) first
    reads FILE and lays this file's sections over it, key by key."""
    path = find_config(path)
    require(path.is_file(), f"config file not found: {path} (looked in {Path.cwd()})")
    try:
        tree = yaml.safe_load(decode_utf8(path.read_bytes(), path)) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    require(isinstance(tree, dict), f"{path} must hold a mapping of sections (model, data, train, decode)")
    if isinstance(tree.get("data"), dict):
        for name in ("train", "valid", "test"):
            resolve_split_paths(tree["data"].get(name), path.parent, path, SplitConfig.KINDS)
        for name in TOKENIZER_FILES:  # existing SentencePiece models: relative to the file's folder, like the data
            if isinstance(tree["data"].get(name), str):
                tree["data"][name] = str(path.parent / Path(tree["data"][name]).expanduser())
    if (base := tree.pop("base", None)) is None:
        return tree
    require(isinstance(base, str), f"{path}: base must be the name of a config file, got {base!r}")
    base_path, chain = path.parent / base if (path.parent / base).is_file() else base, (*_children, path.resolve())
    require(find_config(base_path).resolve() not in chain, f"{path}: base {base} makes a cycle of base files")
    return _merge(_read_yaml(base_path, chain), tree)


def load_config(
    path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (), base: Config | None = None
) -> Config:
    """Read a YAML config (any subset of the keys), apply `section.key=value` overrides and validate.

    With `base` (e.g. the config stored in a checkpoint), the file's sections update the base's key by key; a file
    can build on another file the same way with a top-level `base: other.yaml` key.
    """
    tree = _merge(base.to_dict() if base is not None else {}, _read_yaml(path) if path is not None else {})
    for override in overrides:
        set_dotted(tree, override)
    return from_dict(without_removed(tree, warn=True))


def save_config(config: Config, path: str | Path) -> None:
    """`config` as YAML at `path`, written atomically: a full disk never leaves a torn config.yaml."""
    write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
