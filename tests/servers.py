"""Real OpenAI-compatible servers on 127.0.0.1 for tests and benchmarks.

- :func:`transformers_serve`: ``transformers serve`` of a model directory (the tiny gpt-oss model in tests), when its
  server dependencies (fastapi, uvicorn, accelerate) are importable. ``R2PO_TEST_SERVE_PYTHONPATH`` adds a folder to
  the server's ``PYTHONPATH`` (a place where those dependencies are installed apart from the project's environment).
- :func:`tiny_http_server`: otherwise, an OpenAI-compatible ``http.server`` that runs the same model with
  ``transformers``.
- :class:`ScriptedServer`: answers from a script (faults included) and records every request.
- :func:`real_tiny_server`: the first of the two real ones that can run here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tiny_gptoss import DEFAULT_FINAL, one_torch_thread

SCRIPTED_MODEL = "scripted-model"

Response = tuple[int, Any, dict[str, str]]


def completion(
    content: str | None = DEFAULT_FINAL,
    *,
    reasoning: str | None = None,
    finish_reason: str = "stop",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
) -> Response:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": SCRIPTED_MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": 18},
    }
    return 200, body, {}


def error(status: int, headers: dict[str, str] | None = None) -> Response:
    return status, {"error": {"message": f"injected HTTP {status}", "type": "test", "code": status}}, headers or {}


def _lower(headers: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in headers.items()}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------- servers


@dataclass
class ScriptedServer:
    """An OpenAI-compatible HTTP server on 127.0.0.1 answering chat completions from a script."""

    script: list[Response | Callable[[dict[str, Any]], Response]] = field(default_factory=list)
    default: Response | Callable[[dict[str, Any]], Response] = field(default_factory=completion)
    delay: float = 0.0
    model_id: str = SCRIPTED_MODEL
    requests: list[dict[str, Any]] = field(default_factory=list)
    max_in_flight: int = 0
    _in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def receive(self, path: str, headers: dict[str, str], body: Any) -> Response | Callable[[dict[str, Any]], Response]:
        """Record a POST request as in flight; return the script's next step for it (``default`` once it is empty)."""
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": body})
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            return self.script.pop(0) if self.script else self.default

    def answered(self) -> None:
        """A request recorded by :meth:`receive` has been answered: it is no longer in flight."""
        with self._lock:
            self._in_flight -= 1

    def start(self) -> ScriptedServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, response: Response) -> None:
                status, body, headers = response
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                outer.requests.append({"path": self.path, "headers": _lower(self.headers), "body": None})
                if self.path.endswith("/models"):
                    self._send((200, {"object": "list", "data": [{"id": outer.model_id, "object": "model"}]}, {}))
                else:
                    self._send(error(404))

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                step = outer.receive(self.path, _lower(self.headers), body)
                try:
                    time.sleep(outer.delay)
                    self._send(step(body) if callable(step) else step)
                finally:
                    outer.answered()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@dataclass
class RealServer:
    url: str
    model_id: str
    kind: str


def serve_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_UPDATE_CHECK="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        OMP_NUM_THREADS="1",
    )
    extra = os.environ.get("R2PO_TEST_SERVE_PYTHONPATH")
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra, env.get("PYTHONPATH", "")) if p)
    return env


def can_transformers_serve(env: dict[str, str]) -> bool:
    if not env.get("R2PO_TEST_SERVE_PYTHONPATH") and not all(
        importlib.util.find_spec(m) for m in ("fastapi", "uvicorn", "accelerate")
    ):
        return False
    check = subprocess.run(
        [sys.executable, "-c", "import fastapi, uvicorn, accelerate"], env=env, capture_output=True, timeout=120
    )
    return check.returncode == 0


def wait_ready(url: str, process: subprocess.Popen[bytes] | None, log: Path | None, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            text = log.read_text(errors="replace")[-3000:] if log else ""
            raise RuntimeError(f"the server exited with code {process.returncode}:\n{text}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{url} was not ready within {limit:.0f} s")


@contextlib.contextmanager
def transformers_serve(directory: Path, env: dict[str, str], extra_args: Sequence[str] = ()) -> Iterator[RealServer]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    cli = "from transformers.cli.transformers import main; main()"
    args = ["serve", str(directory), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", *extra_args]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "serve.log"
        with open(log, "wb") as out:
            process = subprocess.Popen([sys.executable, "-c", cli, *args], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_ready(url, process, log, limit=120)
            yield RealServer(url=url, model_id=str(directory), kind="transformers serve")
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)


@contextlib.contextmanager
def tiny_http_server(directory: Path) -> Iterator[RealServer]:
    """An OpenAI-compatible ``http.server`` that generates with the tiny model (flattened harmony, like serve)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory)
    lock = threading.Lock()
    model_id = str(directory)

    def answer(body: dict[str, Any]) -> Response:
        if body.get("model") not in (None, model_id):
            return error(404)
        kwargs = dict(body.get("chat_template_kwargs") or {})
        enc = tok.apply_chat_template(
            body["messages"], add_generation_prompt=True, return_tensors="pt", return_dict=True, **kwargs
        )
        with lock, one_torch_thread():
            out = model.generate(**enc, max_new_tokens=int(body.get("max_tokens") or 256), do_sample=False)
        new = out[0, enc["input_ids"].shape[1] :]
        text = tok.decode(new, skip_special_tokens=True)
        n = len(new)
        return completion(text, prompt_tokens=int(enc["input_ids"].shape[1]), completion_tokens=n, finish_reason="stop")

    server = ScriptedServer(default=answer, model_id=model_id)
    server.start()
    try:
        yield RealServer(url=server.url, model_id=model_id, kind="http.server fallback")
    finally:
        server.stop()


@contextlib.contextmanager
def real_tiny_server(directory: Path) -> Iterator[RealServer]:
    """``transformers serve`` of ``directory`` when it can run here, else :func:`tiny_http_server`."""
    env = serve_env()
    manager = transformers_serve(directory, env) if can_transformers_serve(env) else tiny_http_server(directory)
    with manager as server:
        yield server
