"""transformer-serve's work: load the models, bind the socket, run the application under uvicorn, stop gracefully.

- `--model CKPT [CKPT ...]` (repeatable; `--checkpoint` is one more): each serves the pair its checkpoint's config
  names, several checkpoints after one flag are an ensemble for that pair. Every model is loaded before the socket
  is bound; a checkpoint that does not load, two models for one pair or a pair with no language codes is one line
  naming it and exit code 2, nothing served. A line per model says its pair, files and memory (parameters and
  buffers); the language detector is loaded too (the `serve` extra's py3langid).

- The socket is bound here, before uvicorn starts, so an address in use or not ours is one line and exit code 2,
  and `--port 0` takes a free port; the line `serving on http://HOST:PORT` (stderr) names the port taken.
- SIGTERM (or Ctrl-C): uvicorn stops accepting connections, answers every request it accepted (the batcher
  decodes what it admitted), then the batcher's worker stops and the process exits with code 0. The wait is
  bounded: requests still unanswered `--shutdown-timeout-s` after the signal are answered 503 (service.py's
  `drain`), and uvicorn's own bound, a few seconds later, ends any connection still open.
- `--api-keys FILE`: one key per line, with its own limits if any (access.py; read again when it changes);
  requests then need one.
- `--glossary NAME=FILE` (repeatable): glossaries loaded before the socket is bound (a bad file: one line, exit 2),
  that requests choose by name (glossaries.py).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import uvicorn

from transformer.config import ServeConfig
from transformer.errors import UserError
from transformer.serving.access import KeyRing
from transformer.serving.registry import Model, Registry

log = logging.getLogger(__name__)
SHUTDOWN_MARGIN_S = 3.0  # past --shutdown-timeout-s, for the 503s to be sent before uvicorn cuts connections


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (IPv6 when the host has a ':'), or a UserError naming the fix."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UserError(f"cannot listen on {host}:{port}: {reason}; choose another --host or --port") from None


def memory_bytes(module) -> int:
    """The bytes of a model's parameters and buffers (an ensemble's: all its models')."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def load_models(groups: list[list[str]], device: str, precision: str | None, pivot: str) -> Registry:
    """One model per group of checkpoints (several: an ensemble), as a Registry; any failure a UserError naming the
    group."""
    from transformer.api import Translator
    from transformer.serving.engine import Engine

    models = []
    for group in groups:
        try:
            translator = Translator.from_checkpoint(group, device=device, precision=precision)
        except UserError as exc:
            raise UserError(f"--model {' '.join(group)}: {exc}") from None
        models.append(Model(Engine(translator), tuple(group), memory_bytes(translator.model)))
    registry = Registry(models, pivot=pivot)
    for model in registry.models.values():
        size = model.memory_bytes / (1 << 20)
        log.info("model %s: %s (%.1f MiB of parameters and buffers)", model.label, ", ".join(model.checkpoints), size)
    pivoted = [f"{s}-{t}" for s in registry.sources for t in registry.targets(s) if (s, t) not in registry.models]
    if pivoted:
        log.info("through %s: %s", registry.pivot, ", ".join(pivoted))
    return registry


def serve(
    models: list[list[str]],
    serve_config: ServeConfig,
    *,
    keys_file: str | None = None,
    device: str = "cpu",
    precision: str | None = None,
    glossaries: list[str] | tuple[str, ...] = (),
) -> int:
    """Load `models` (each a list of checkpoints: one model, several an ensemble, for the pair its config names) and
    serve until SIGTERM or SIGINT; 0 once every request is answered. glossaries: `NAME=FILE` values, the
    glossaries requests may name."""
    from transformer.serving.app import create_app
    from transformer.serving.glossaries import load_named

    keys = KeyRing.from_file(keys_file) if keys_file else None
    named = load_named(glossaries)
    registry = load_models(models, device, precision, serve_config.pivot)
    app = create_app(registry, serve_config, keys, named)
    try:
        app.state.service.load_detector()  # now, not on the first request that needs it
    except ImportError as exc:
        raise UserError(
            f"transformer-serve needs the serve extra ({exc.name} is missing): pip install 'transformer[serve]'"
        ) from None
    sock = bind(serve_config.host, serve_config.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    log.info(
        "serving on http://%s:%d (%s; %s)",
        shown,
        port,
        ", ".join(model.label for model in registry.models.values()),
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
