"""transformer-serve's work: load the model, bind the socket, run the application under uvicorn, stop gracefully.

- The socket is bound here, before uvicorn starts, so an address in use or not ours is one line and exit code 2,
  and `--port 0` takes a free port; the line `serving on http://HOST:PORT` (stderr) names the port taken.
- SIGTERM (or Ctrl-C): uvicorn stops accepting connections, answers every request it accepted (the batcher
  decodes what it admitted), then the batcher's worker stops and the process exits with code 0. The wait is
  bounded: requests still unanswered `--shutdown-timeout-s` after the signal are answered 503 (service.py's
  `drain`), and uvicorn's own bound, a few seconds later, ends any connection still open.
- `--api-keys FILE`: one key per line (blank lines and lines starting with '#' skipped); requests then need one.
- `--glossary NAME=FILE` (repeatable): glossaries loaded before the socket is bound (a bad file: one line, exit 2),
  that requests choose by name (glossaries.py).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from pathlib import Path

import uvicorn

from transformer.config import ServeConfig
from transformer.errors import UserError

log = logging.getLogger(__name__)
SHUTDOWN_MARGIN_S = 3.0  # past --shutdown-timeout-s, for the 503s to be sent before uvicorn cuts connections


def read_keys(path: str | Path) -> frozenset[str]:
    """The API keys of `path`: one a line; blank lines and '#' comments skipped; none at all is an error."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the API keys file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    keys = frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise UserError(f"the API keys file {path} has no key: write one key per line")
    return keys


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (IPv6 when the host has a ':'), or a UserError naming the fix."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UserError(f"cannot listen on {host}:{port}: {reason}; choose another --host or --port") from None


def serve(
    checkpoints: list[str],
    serve_config: ServeConfig,
    *,
    keys_file: str | None = None,
    device: str = "cpu",
    precision: str | None = None,
    glossaries: list[str] | tuple[str, ...] = (),
) -> int:
    """Load `checkpoints` (several: an ensemble) and serve until SIGTERM or SIGINT; 0 once every request is answered.
    glossaries: `NAME=FILE` values, the glossaries requests may name."""
    from transformer.api import Translator
    from transformer.serving.app import create_app
    from transformer.serving.engine import Engine
    from transformer.serving.glossaries import load_named

    keys = read_keys(keys_file) if keys_file else None
    named = load_named(glossaries)
    sock = bind(serve_config.host, serve_config.port)
    translator = Translator.from_checkpoint(checkpoints, device=device, precision=precision)
    app = create_app(Engine(translator), serve_config, keys, named)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    log.info(
        "serving on http://%s:%d (%s; %s)",
        shown,
        port,
        ", ".join(checkpoints),
        "API keys required" if keys else "no API keys",
    )
    bound = serve_config.shutdown_timeout_s + SHUTDOWN_MARGIN_S
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=bound, access_log=False)
    GracefulServer(config, on_shutdown=app.state.service.drain).run(sockets=[sock])
    log.info("stopped: every accepted request was answered")
    return 0


class GracefulServer(uvicorn.Server):
    """uvicorn's Server, except that `on_shutdown` is called (on the event loop) as the shutdown begins, and after a
    graceful stop on SIGTERM/SIGINT the process exits 0 (uvicorn re-raises the signal once it has shut down, which
    would end the process by that signal)."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None] = lambda: None) -> None:
        super().__init__(config)
        self.on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.on_shutdown()
        await super().shutdown(sockets)

    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()
