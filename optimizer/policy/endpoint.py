"""A policy served by an OpenAI-compatible HTTP endpoint (vLLM, llama.cpp server, ...), through urllib only.

Two ways to get a ranking, both from log-probabilities:
- ``/v1/completions`` (preferred): each candidate's text is appended to the prompt and the server
  echoes the prompt's token log-probabilities (``echo: true, logprobs: 1``); the candidate's score
  is the sum over its own tokens, normalised over the candidates.
- ``/v1/chat/completions``: the candidates are numbered and the model answers with a number; the
  ``top_logprobs`` of that first token rank the candidates (those not among them get probability 0).
A base URL (``http://host:8000/v1``) tries completions first and falls back to chat when the server
refuses; a URL that ends in ``/completions`` or ``/chat/completions`` picks that API.
"""

from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.request
from typing import Any

from ..actions.base import Candidate
from .base import Policy, PolicyState, Ranked, candidate_texts, sort_ranked
from .heuristic import HeuristicPolicy
from .prompt import SYSTEM, numbered_message, plain_prompt

MAX_CHAT_CHOICES = 20  # top_logprobs is capped at 20 by the OpenAI API


class EndpointError(Exception):
    """The endpoint could not be reached or answered something unusable."""


class EndpointPolicy(Policy):
    """Ranks candidates with a model behind an OpenAI-compatible server."""

    name = "endpoint"

    def __init__(self, url: str, model: str = "", api_key: str | None = None, timeout_s: float = 30.0):
        self.url = url.rstrip("/")
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("MTMC_POLICY_ENDPOINT_KEY") or os.environ.get("OPENAI_API_KEY", "")
        self.timeout_s = timeout_s
        if self.url.endswith("/chat/completions"):
            self.mode = "chat"
        elif self.url.endswith("/completions"):
            self.mode = "completions"
        else:
            self.mode = "auto"
        self.last_error = ""
        self._prefer_chat = False
        self._fallback = HeuristicPolicy()

    def describe(self) -> str:
        model = f" model {self.model}" if self.model else ""
        api = {"auto": "completions, else chat"}.get(self.mode, self.mode)
        return f"endpoint policy at {self.url}{model} (OpenAI-compatible, {api} log-probabilities)"

    def _endpoint(self, api: str) -> str:
        if self.mode != "auto":
            return self.url
        return f"{self.url}/{'chat/completions' if api == 'chat' else 'completions'}"

    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.model:
            body = {"model": self.model, **body}
        return post_json(url, body, self.api_key, self.timeout_s)

    def rank(self, state: PolicyState, candidates: list[Candidate]) -> list[Ranked]:
        if not candidates:
            return []
        texts = candidate_texts(candidates)
        try:
            if self.mode == "completions" or (self.mode == "auto" and not self._prefer_chat):
                try:
                    logprobs, api = self._completions(state, texts), "completions"
                except (urllib.error.HTTPError, EndpointError) as exc:
                    refused = isinstance(exc, EndpointError) or exc.code in (400, 404, 405, 422, 501)
                    if self.mode != "auto" or not refused:
                        raise
                    # This server has no usable completions API (or no echo): use chat from now on.
                    self._prefer_chat = True
                    logprobs, api = self._chat(state, texts), "chat"
            else:
                logprobs, api = self._chat(state, texts), "chat"
        except (OSError, ValueError, KeyError, IndexError, TypeError, EndpointError) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            ranked = self._fallback.rank(state, candidates)
            for r in ranked:
                r.metadata["fallback"] = f"endpoint {self.url} failed ({self.last_error}); heuristic ranking"
            return ranked
        finite = [lp for lp in logprobs if lp is not None and math.isfinite(lp)]
        norm = _logsumexp(finite) if finite else 0.0
        ranked = []
        for candidate, text, lp in zip(candidates, texts, logprobs):
            usable = lp is not None and math.isfinite(lp)
            score = math.exp(lp - norm) if usable else 0.0
            ranked.append(Ranked(candidate, score=score, logprob=lp if usable else None,
                                 reason=f"endpoint probability {score:.3f}",
                                 metadata={"policy": self.name, "api": api, "text": text, "url": self.url}))
        return sort_ranked(ranked)

    def _completions(self, state: PolicyState, texts: list[str]) -> list[float]:
        """Sum of each candidate's echoed token log-probabilities after the shared prompt."""
        prompt = plain_prompt(state, texts)
        answer = self._post(self._endpoint("completions"), {
            "prompt": [prompt + text for text in texts], "max_tokens": 1, "temperature": 0,
            "echo": True, "logprobs": 1,
        })
        choices = sorted(answer["choices"], key=lambda c: c.get("index", 0))
        if len(choices) != len(texts):
            raise EndpointError(f"asked for {len(texts)} completions, got {len(choices)}")
        out = []
        for text, choice in zip(texts, choices):
            info = choice.get("logprobs") or {}
            offsets, values = info.get("text_offset"), info.get("token_logprobs")
            if not offsets or values is None:
                raise EndpointError("the endpoint did not echo prompt log-probabilities (echo + logprobs)")
            start, end = len(prompt), len(prompt) + len(text)
            picked = [v for off, v in zip(offsets, values) if start <= off < end and v is not None]
            if not picked:
                raise EndpointError("no log-probabilities for the candidate's tokens")
            out.append(float(sum(picked)))
        return out

    def _chat(self, state: PolicyState, texts: list[str]) -> list[float | None]:
        """Log-probabilities of answering each candidate's number, from the first token's top_logprobs."""
        shown = texts[:MAX_CHAT_CHOICES]
        answer = self._post(self._endpoint("chat"), {
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": numbered_message(state, shown)}],
            "max_tokens": 2, "temperature": 0, "logprobs": True, "top_logprobs": MAX_CHAT_CHOICES,
        })
        content = answer["choices"][0]["logprobs"]["content"]
        if not content:
            raise EndpointError("the endpoint returned no token log-probabilities (logprobs: true)")
        best: dict[int, float] = {}
        for entry in content[0].get("top_logprobs") or [{"token": content[0]["token"], "logprob": content[0]["logprob"]}]:
            token = str(entry.get("token", "")).strip().rstrip(".")
            if token.isdigit() and 1 <= int(token) <= len(shown):
                index = int(token) - 1
                best[index] = max(best.get(index, -math.inf), float(entry["logprob"]))
        if not best:
            raise EndpointError("the model's answer is not one of the numbered actions")
        return [best.get(i) for i in range(len(texts))]


def post_json(url: str, body: dict[str, Any], api_key: str = "", timeout_s: float = 30.0) -> dict[str, Any]:
    """POST ``body`` as JSON (with a bearer key when given) and decode the JSON answer; urllib errors propagate."""
    request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), method="POST",
                                     headers={"Content-Type": "application/json"})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.loads(response.read().decode("utf-8"))


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))
