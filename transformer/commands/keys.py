"""transformer-keys: the API keys file of `transformer-serve --api-keys FILE`, listed, added to, removed from.

The file is plain text, one key a line with its own limits if any (`KEY [REQ_LIMIT [CHAR_LIMIT]]`; serving/access.py
reads it, and a running server reads it again when it changes). `add` writes a new random key (or `--key`),
replacing the line of a key already there; `remove` drops a key's line; comments and other lines are kept as they
are. Every change replaces the file atomically, so a server never reads half of one.
"""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

from transformer.errors import UserError
from transformer.fileio import atomic_output
from transformer.serving.access import parse_keys


def keys_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api-keys", required=True, metavar="FILE", help="the keys file (created by the first add)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="the keys and their limits (the default)")
    add = actions.add_parser("add", help="add a key (a new random one unless --key), printed")
    add.add_argument("--key", help="the key itself (default: 32 random hex digits)")
    add.add_argument("--req-limit", type=int, help="its requests per minute (default: the server's --req-limit)")
    add.add_argument("--char-limit", type=int, help="its characters per request (default: the server's --char-limit)")
    remove = actions.add_parser("remove", help="remove a key")
    remove.add_argument("key")


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the API keys file {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _key_of(line: str) -> str | None:
    words = line.split()
    return words[0] if words and not words[0].startswith("#") else None


def _write(path: Path, lines: list[str]) -> None:
    parse_keys("\n".join(lines), path)  # never write a file the server would refuse
    with atomic_output(path) as out:
        out.write("".join(line + "\n" for line in lines))


def run_keys(args: argparse.Namespace) -> str:
    """What the command prints: the keys (list), the key added, or the key removed."""
    path = Path(args.api_keys)
    lines = _lines(path)
    if args.action in (None, "list"):
        keys = parse_keys("\n".join(lines), path)
        if not keys:
            return "no API keys"
        show = lambda n: "server's" if n is None else str(n)
        return "\n".join(
            f"{k}\treq_limit {show(v.req_limit)}\tchar_limit {show(v.char_limit)}" for k, v in keys.items()
        )
    if args.action == "add":
        key = args.key if args.key is not None else secrets.token_hex(16)
        if not key or any(c.isspace() for c in key) or key.startswith("#"):
            raise UserError(f"--key {key!r}: a key is one word without spaces, not starting with '#'")
        if args.char_limit is not None and args.req_limit is None:
            raise UserError("--char-limit needs --req-limit too (the file's columns are KEY REQ_LIMIT CHAR_LIMIT)")
        limits = [str(n) for n in (args.req_limit, args.char_limit) if n is not None]
        if any(int(n) <= 0 for n in limits):
            raise UserError("--req-limit and --char-limit must be positive")
        kept = [line for line in lines if _key_of(line) != key]
        _write(path, [*kept, " ".join([key, *limits])])
        return key
    kept = [line for line in lines if _key_of(line) != args.key]
    if len(kept) == len(lines):
        raise UserError(f"{path} has no key {args.key!r}: transformer-keys --api-keys {path} list shows them")
    if not any(_key_of(line) for line in kept):
        raise UserError(f"{args.key!r} is the last key of {path}: a server needs one (delete the file instead)")
    _write(path, kept)
    return args.key
