"""Helpers for the serving tests: a real `transformer-serve` process on a free loopback port, an in-process server
over any engine (the scripted ones here: upper-casing, or echoing with alignments), and a small HTTP client (the
standard library's, so a test controls every byte it sends), with file uploads and downloads."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from transformer.config import DecodeConfig
from transformer.decoding.streaming import Translation

ROOT = Path(__file__).resolve().parents[1]


class Served:
    """A `python -m transformer serve ...` process, its port and its log (stderr)."""

    def __init__(self, args: list[str], log: Path) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        env["OMP_NUM_THREADS"] = "1"
        self.log = log
        with open(log, "wb") as err:
            command = [sys.executable, "-m", "transformer", "serve", "--port", "0", "--threads", "1", *args]
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env)
        self.port = self._wait_for_port()

    def _wait_for_port(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(encoding="utf-8", errors="replace")
            if "serving on http://127.0.0.1:" in text:
                return int(text.split("serving on http://127.0.0.1:")[1].split()[0])
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}:\n{text}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the server did not start in time")

    def stop(self) -> int:
        """SIGTERM, then the exit code (killed after 30 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def call(port: int, method: str, path: str, body: object = None, *, headers: dict | None = None, timeout=60):
    """(status, headers, parsed JSON or text). A dict/list body is sent as JSON; bytes and str as they are."""
    headers = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode("utf-8")
        headers.setdefault("Content-Type", "application/json")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    kind = response.getheader("Content-Type", "")
    value = json.loads(data) if kind.startswith("application/json") else data.decode("utf-8", "replace")
    return response.status, {k.lower(): v for k, v in response.getheaders()}, value


def raw(port: int, data: bytes, timeout: float = 10.0, *, half_close: bool = True) -> bytes:
    """Send raw bytes (then end the sending side, unless not `half_close`); what comes back before the server
    closes (or the timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def multipart(fields: dict[str, str], boundary: str = "b0undary", files: dict[str, str] | None = None) -> bytes:
    """A multipart/form-data body with text `fields` (and `files`: name -> content, sent as file parts)."""
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    for name, content in (files or {}).items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{name}.txt"\r\n'
            f"Content-Type: text/plain\r\n\r\n{content}\r\n"
        )
    return ("".join(parts) + f"--{boundary}--\r\n").encode("utf-8")


def upload(port: int, filename: str, data: str | bytes, fields: dict | None = None, *, file_field: str = "file"):
    """POST /translate_file as LibreTranslate's clients send it: a multipart body with the text `fields` and one
    file part (`filename`, `data`); (status, headers, answer) as `call` gives them."""
    boundary = "uPl0aDb0undary"
    data = data.encode("utf-8") if isinstance(data, str) else data
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in (fields or {}).items()
    ]
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="{filename}"\r\n'
    parts.append(head.encode() + b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return call(port, "POST", "/translate_file", body, headers=headers)


def download(port: int, url: str):
    """GET a translatedFileUrl from this server: (status, headers, the body's bytes)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", url[url.index("/download_file/") :])
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


@contextmanager
def in_process(engine, serve_config, keys=None):
    """The application over `engine` (any object with Engine's methods) served by uvicorn in a thread: its port."""
    import uvicorn

    from transformer.serving.app import create_app
    from transformer.serving.server import bind

    sock = bind("127.0.0.1", 0)
    app = create_app(engine, serve_config, keys)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=None))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


class ScriptedEngine:
    """Engine's interface: a line's translation is the line upper-cased; "boom" raises; `gate` holds decoding; a
    line's tokens are its words (+ EOS); attention fails with an error a client must not see."""

    languages = ("es", "en")
    defaults = DecodeConfig()
    attends = False
    threshold = None  # no confidence calibration

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.calls: list[list[str]] = []

    max_positions = 1024

    def source_tokens(self, lines: list[str]) -> list[int]:
        return [len(line.split()) + 1 if line.strip() else 0 for line in lines]

    def target_pieces(self, texts: list[str]) -> list[int]:
        return [len(text.split()) for text in texts]

    def attention(self, text, tokens, layer):
        raise RuntimeError(f"secret detail of {text!r}")

    def decode(self, settings, lines, controls):
        self.gate.wait(30)
        self.calls.append(list(lines))
        if "boom" in lines:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return [[Translation(line.upper(), -1.0, -1.0, list(range(len(line.split()))))] for line in lines]


class EchoEngine(ScriptedEngine):
    """Each line back as it is, with the identity word alignment when asked for it (as one model reads it)."""

    attends = True

    def decode(self, settings, lines, controls):
        self.calls.append(list(lines))
        links = (lambda line: [(i, i) for i in range(len(line.split()))]) if settings.alignment else (lambda _: None)
        return [[Translation(line, -1.0, -1.0, [1], links(line))] for line in lines]
