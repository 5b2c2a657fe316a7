"""Chat back ends for the LLM micro coder, behind one call: ``complete(messages, max_tokens) -> str``.

- ``EndpointChat``: an OpenAI-compatible ``/v1/chat/completions`` server (vLLM, llama.cpp server,
  an API) through urllib, with the same JSON POST the endpoint policy uses.
- ``LlamaChat``: a local GGUF through llama-cpp-python's ``Llama.create_chat_completion``; llama_cpp
  is imported when the model loads, so this module imports without it.

Both decode greedily (temperature 0), so one prompt gives one answer.
"""

from __future__ import annotations

import json
import os
import urllib.error
from pathlib import Path
from typing import Any, Protocol

from ..policy.endpoint import post_json
from .errors import CoderError

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}


class Chat(Protocol):
    """A chat model that answers a list of messages with one text."""

    def complete(self, messages: list[Message], max_tokens: int) -> str:
        """The assistant's answer; raises ``CoderError`` when the model cannot answer."""
        ...

    def describe(self) -> str:
        """One line naming the model, for step titles and reports."""
        ...


class EndpointChat:
    """``POST {url}/chat/completions`` on an OpenAI-compatible server."""

    def __init__(self, url: str, model: str = "", api_key: str | None = None, timeout_s: float = 120.0):
        base = url.rstrip("/")
        # A base URL (http://host:8000/v1) gets the chat path; a full .../chat/completions URL is kept.
        self.url = base if base.endswith("/chat/completions") else f"{base}/chat/completions"
        self.model = model
        self.api_key = api_key if api_key is not None else (
            os.environ.get("MTMC_CODER_ENDPOINT_KEY") or os.environ.get("OPENAI_API_KEY", ""))
        self.timeout_s = timeout_s

    def describe(self) -> str:
        return f"{self.model or 'model'} at {self.url}"

    def complete(self, messages: list[Message], max_tokens: int) -> str:
        body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
        if self.model:
            body["model"] = self.model
        try:
            answer = post_json(self.url, body, self.api_key, self.timeout_s)
        except urllib.error.HTTPError as exc:
            raise CoderError(f"the coder endpoint {self.url} answered HTTP {exc.code} ({_error_text(exc)})") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CoderError(f"the coder endpoint {self.url} cannot be reached ({reason})") from exc
        except ValueError as exc:
            raise CoderError(f"the coder endpoint {self.url} did not answer JSON ({exc})") from exc
        return _message_content(answer, self.url)


class LlamaChat:
    """A local GGUF chat model through llama-cpp-python (loaded on first use, then kept)."""

    def __init__(self, model_path: str | os.PathLike, n_ctx: int = 4096, n_threads: int | None = None,
                 n_threads_batch: int | None = None):
        self.model_path = Path(os.path.expanduser(str(model_path)))
        self.n_ctx = n_ctx
        cores = min(os.cpu_count() or 1, 8)
        # Token-by-token generation syncs its threads once per layer: on a busy 2-core machine two threads
        # took 215 s for 64 tokens where one took 1.5 s, so generation gets half the cores; the prompt
        # (large batches, few syncs) gets them all. MTMC_CODER_THREADS overrides the generation threads.
        self.n_threads = n_threads or int(os.environ.get("MTMC_CODER_THREADS", 0)) or max(1, cores // 2)
        self.n_threads_batch = n_threads_batch or cores
        self._llama = None

    def describe(self) -> str:
        return f"{self.model_path.name} (llama.cpp)"

    def _load(self):
        if self._llama is not None:
            return self._llama
        if not self.model_path.is_file():
            raise CoderError(f"the coder model {self.model_path} does not exist")
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise CoderError("llama-cpp-python is not installed (pip install 'mtmc-lsp[policy]')") from exc
        # llama.cpp's spinning OpenMP threads starve other processes on a small shared CPU (docs/policy.md).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            self._llama = Llama(model_path=str(self.model_path), n_ctx=self.n_ctx, n_threads=self.n_threads,
                                n_threads_batch=self.n_threads_batch, seed=0, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise CoderError(f"the coder model {self.model_path.name} failed to load ({exc})") from exc
        return self._llama

    def complete(self, messages: list[Message], max_tokens: int) -> str:
        llama = self._load()
        try:
            answer = llama.create_chat_completion(messages=messages, max_tokens=max_tokens, temperature=0.0, top_k=1)
        except ValueError as exc:  # e.g. the prompt exceeds the context window
            raise CoderError(f"the coder model {self.model_path.name} cannot answer ({exc})") from exc
        return _message_content(answer, self.model_path.name)


def _message_content(answer: Any, source: str) -> str:
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise CoderError(f"{source} answered without choices[0].message.content") from exc
    if not isinstance(content, str):
        raise CoderError(f"{source} answered a non-text message")
    return content


def _error_text(exc: urllib.error.HTTPError) -> str:
    """The server's own error message when the body has one, else the HTTP reason."""
    try:
        raw = exc.read().decode("utf-8", "replace")
    except OSError:
        raw = ""
    try:
        data = json.loads(raw)
        message = data.get("error", {}).get("message") if isinstance(data.get("error"), dict) else data.get("error")
        if message:
            return str(message).splitlines()[0][:200]
    except (ValueError, AttributeError):
        pass
    return (raw.strip().splitlines() or [str(exc.reason)])[0][:200]
