"""The embedded policy: a GGUF language model run by llama-cpp-python ranks the applicable actions.

Each candidate is written as text (``tiling(BLOCK_K=64, BLOCK_M=128, BLOCK_N=128)``) and scored by
the model's log-probability after a prompt holding the kernel analysis, the target GPU and the
steps so far. The candidates form a token trie, so a shared prefix ("tiling(BLOCK_K=") is evaluated
once, and the prompt's KV cache is kept between calls, so a repeated or extended prompt costs only
its new tokens. The score is the probability of each candidate under the constraint that the model
may only write one of them (its GBNF grammar, see ``grammar.py``): at every branch of the trie the
model's next-token probabilities are renormalised over the allowed tokens. ``propose`` runs real
grammar-constrained greedy decoding through llama.cpp's grammar sampler.

llama_cpp is imported only when the model loads; loading can run in a background thread.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..actions.base import Candidate
from .base import Policy, PolicyState, Ranked, candidate_texts, sort_ranked
from .grammar import choice_grammar
from .heuristic import HeuristicPolicy
from .prompt import SYSTEM, plain_prompt, user_message

UNTRAINED_NOTE = (
    "untrained: the embedded model ranks by its prior over the action text only; "
    "configure trained weights (policyModelPath) or a LoRA adapter (policyAdapterPath) for learned ranking"
)


def _log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64, copy=False)
    top = row.max()
    return row - (top + np.log(np.exp(row - top).sum()))


def _logsumexp(values: np.ndarray) -> float:
    top = float(values.max())
    return top + float(np.log(np.exp(values - top).sum()))


class LlamaCppPolicy(Policy):
    """Ranks candidates by a GGUF model's grammar-constrained probability of writing each one."""

    name = "llama"

    def __init__(self, model_path: str, adapter_path: str | None = None, n_ctx: int = 2048, n_threads: int | None = None,
                 list_choices: bool = True):
        self.model_path = str(model_path)
        self.adapter_path = adapter_path or None
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(1, min(8, os.cpu_count() or 1))
        # Listing the choices in the prompt turns the task into multiple choice, which untrained
        # small models handle better; it costs prompt tokens.
        self.list_choices = list_choices
        self._llm = None
        self._status = "not loaded"
        self._error = ""
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()  # one llama context: one evaluation at a time
        self._thread: threading.Thread | None = None
        self._cached_tokens: list[int] = []
        self._cached_dist: np.ndarray | None = None
        self._formatter = None
        self._trained = bool(self.adapter_path)
        self.load_seconds: float | None = None
        self._fallback = HeuristicPolicy()

    # -- loading -----------------------------------------------------------------------------
    @property
    def status(self) -> str:
        return self._status

    @property
    def error(self) -> str:
        return self._error

    @property
    def trained(self) -> bool:
        return self._trained

    def start_loading(self) -> None:
        """Load the model in a daemon thread; ``status`` goes "loading" -> "ready" (or "failed")."""
        with self._load_lock:
            if self._llm is not None or (self._thread is not None and self._thread.is_alive()):
                return
            self._status = "loading"
            self._thread = threading.Thread(target=self._load_quietly, name="mtmc-policy-load", daemon=True)
            self._thread.start()

    def _load_quietly(self) -> None:
        try:
            self.load()
        except Exception:  # recorded in status/error; rank() falls back to the heuristic
            pass

    def load(self):
        """Load the model now (blocking); returns the ``llama_cpp.Llama``. Raises when it cannot load."""
        with self._load_lock:
            if self._llm is not None:
                return self._llm
            self._status = "loading"
            started = time.perf_counter()
            try:
                from llama_cpp import Llama

                llm = Llama(
                    model_path=self.model_path, lora_path=self.adapter_path, n_ctx=self.n_ctx, n_batch=256,
                    n_threads=self.n_threads, n_threads_batch=self.n_threads, logits_all=False, verbose=False,
                )
            except Exception as exc:
                self._status = "failed"
                self._error = f"{type(exc).__name__}: {exc}"
                raise
            metadata = dict(getattr(llm, "metadata", {}) or {})
            # The project's own trained weights carry mtmc.* metadata (see docs/policy.md).
            self._trained = bool(self.adapter_path) or any(k.startswith("mtmc.") for k in metadata)
            self._formatter = _chat_formatter(llm, metadata)
            self._llm = llm
            self.load_seconds = time.perf_counter() - started
            self._status = "ready"
            return llm

    def close(self) -> None:
        with self._load_lock, self._run_lock:
            if self._llm is not None:
                self._llm.close()
            self._llm = None
            self._cached_tokens, self._cached_dist = [], None
            self._status = "not loaded"

    def describe(self) -> str:
        model = Path(self.model_path).name
        adapter = f" + LoRA {Path(self.adapter_path).name}" if self.adapter_path else ""
        state = {"ready": "loaded", "loading": "loading", "not loaded": "loads on first use"}.get(self._status, "")
        if self._status == "failed":
            return f"embedded model {model}{adapter} failed to load ({self._error}); using the heuristic policy"
        trained = "trained" if self._trained else UNTRAINED_NOTE
        return f"embedded model {model}{adapter} via llama.cpp ({state}); {trained}"

    # -- prompts -----------------------------------------------------------------------------
    def prompt(self, state: PolicyState, choices: list[str]) -> str:
        """The prompt text: the model's chat template when it has one, else a plain prompt."""
        listed = choices if self.list_choices else []
        if self._formatter is not None:
            user = user_message(state, listed) if listed else user_message(state, ["(any applicable action)"])
            return self._formatter(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]).prompt
        return plain_prompt(state, listed or ["(any applicable action)"])

    def _tokenize(self, text: str, special: bool) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=special, special=special)

    # -- ranking -----------------------------------------------------------------------------
    def rank(self, state: PolicyState, candidates: list[Candidate]) -> list[Ranked]:
        if not candidates:
            return []
        try:
            self.load()
        except Exception:
            ranked = self._fallback.rank(state, candidates)
            for r in ranked:
                r.metadata["fallback"] = f"embedded model unavailable: {self._error}"
            return ranked
        texts = candidate_texts(candidates)
        started = time.perf_counter()
        with self._run_lock:
            prompt_tokens = self._tokenize(self.prompt(state, texts), special=True)
            sequences = [self._tokenize(t, special=False) + [self._llm.token_eos()] for t in texts]
            scored = self._score(prompt_tokens, sequences)
        elapsed = time.perf_counter() - started
        ranked = []
        for candidate, text, (raw, constrained) in zip(candidates, texts, scored):
            metadata: dict[str, Any] = {
                "policy": self.name, "model": Path(self.model_path).name, "trained": self._trained,
                "text": text, "prompt_tokens": len(prompt_tokens), "seconds": round(elapsed, 4),
            }
            if not self._trained:
                metadata["note"] = UNTRAINED_NOTE
            ranked.append(Ranked(
                candidate, score=float(np.exp(constrained)), logprob=raw,
                reason=f"model probability {np.exp(constrained):.3f} (log p {raw:.2f})", metadata=metadata,
            ))
        return sort_ranked(ranked)

    def _decode(self, tokens: list[int], n_past: int, all_logits: bool) -> np.ndarray:
        """Evaluate ``tokens`` at ``n_past`` (dropping anything cached after it); log-softmax rows."""
        llm = self._llm
        llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
        rows = []
        n_vocab = llm.n_vocab()
        for start in range(0, len(tokens), llm.n_batch):
            chunk = tokens[start:start + llm.n_batch]
            llm._batch.set_batch(batch=chunk, n_past=n_past + start, logits_all=all_logits)
            llm._ctx.decode(llm._batch)
            if all_logits:
                logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(len(chunk) * n_vocab,))
                rows.extend(_log_softmax(r) for r in logits.reshape(len(chunk), n_vocab))
        if not all_logits:
            last = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
            rows.append(_log_softmax(last))
        return np.stack(rows)

    def _eval_prompt(self, tokens: list[int]) -> np.ndarray:
        """The next-token distribution after ``tokens``, reusing the cached prefix of the last prompt."""
        if tokens == self._cached_tokens and self._cached_dist is not None:
            return self._cached_dist
        if len(tokens) >= self.n_ctx - 64:
            raise ValueError(f"prompt of {len(tokens)} tokens does not fit the context of {self.n_ctx}")
        common = 0
        for a, b in zip(tokens, self._cached_tokens):
            if a != b:
                break
            common += 1
        common = min(common, len(tokens) - 1)  # the last token must be evaluated for its logits
        self._cached_tokens, self._cached_dist = [], None
        dist = self._decode(tokens[common:], common, all_logits=False)[-1]
        self._cached_tokens, self._cached_dist = list(tokens), dist
        return dist

    def _score(self, prompt_tokens: list[int], sequences: list[list[int]]) -> list[tuple[float, float]]:
        """(raw log-prob, grammar-constrained log-prob) of each token sequence after the prompt."""
        root: dict = {}
        for index, seq in enumerate(sequences):
            node = root
            for token in seq:
                node = node.setdefault(token, {})
            node[None] = index
        results: list[tuple[float, float]] = [(float("-inf"), float("-inf"))] * len(sequences)

        def visit(node: dict, n_past: int, dist: np.ndarray, raw: float, constrained: float) -> None:
            # Depth-first, finishing each subtree before its sibling overwrites the KV cache past n_past.
            if None in node:
                results[node[None]] = (raw, constrained)
            children = [t for t in node if t is not None]
            if not children:
                return
            norm = _logsumexp(dist[children])
            for token in children:
                run, child = [token], node[token]
                while None not in child and len(child) == 1:  # forced tokens: one evaluation for the run
                    (next_token,) = child.keys()
                    run.append(next_token)
                    child = child[next_token]
                has_children = any(t is not None for t in child)
                run_raw = raw + float(dist[token])
                run_constrained = constrained + float(dist[token]) - norm
                to_decode = run if has_children else run[:-1]
                rows = self._decode(to_decode, n_past, all_logits=True) if to_decode else None
                for j in range(1, len(run)):
                    run_raw += float(rows[j - 1][run[j]])
                if has_children:
                    visit(child, n_past + len(run), rows[-1], run_raw, run_constrained)
                else:
                    results[child[None]] = (run_raw, run_constrained)

        visit(root, len(prompt_tokens), self._eval_prompt(prompt_tokens), 0.0, 0.0)
        return results

    # -- grammar-constrained generation ------------------------------------------------------
    def propose(self, state: PolicyState, candidates: list[Candidate], max_tokens: int = 96) -> tuple[str, Candidate | None]:
        """Greedy decoding under the candidates' GBNF grammar: the text the model writes and its candidate."""
        if not candidates:
            return "", None
        self.load()
        texts = candidate_texts(candidates)
        grammar = choice_grammar(texts)
        with self._run_lock:
            prompt_tokens = self._tokenize(self.prompt(state, texts), special=True)
            dist = self._eval_prompt(prompt_tokens)
            text = self._generate(grammar, dist, len(prompt_tokens), max_tokens)
        chosen = next((c for c, t in zip(candidates, texts) if t == text), None)
        return text, chosen

    def _grammar_sampler(self, grammar: str):
        import llama_cpp

        sampler = llama_cpp.llama_sampler_init_grammar(self._llm._model.vocab, grammar.encode("utf-8"), b"root")
        if not sampler:
            raise ValueError("llama.cpp rejected the grammar")
        return sampler

    def _allowed(self, sampler, logits: np.ndarray) -> np.ndarray:
        """The logits after the grammar sampler masked what it forbids (-inf)."""
        import llama_cpp
        from llama_cpp._internals import LlamaTokenDataArray

        data = LlamaTokenDataArray(n_vocab=len(logits))
        data.copy_logits(logits.astype(np.single))
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(data.candidates))
        masked = np.full(len(logits), -np.inf, dtype=np.float64)
        size = data.candidates.size
        masked[data.candidates_data.id[:size]] = data.candidates_data.logit[:size]
        return masked

    def _generate(self, grammar: str, dist: np.ndarray, n_past: int, max_tokens: int) -> str:
        import llama_cpp

        sampler = self._grammar_sampler(grammar)
        eos = self._llm.token_eos()
        out: list[int] = []
        try:
            for _ in range(max_tokens):
                masked = self._allowed(sampler, dist)
                token = int(np.argmax(masked))
                if not np.isfinite(masked[token]) or token == eos or llama_cpp.llama_vocab_is_eog(self._llm._model.vocab, token):
                    break
                llama_cpp.llama_sampler_accept(sampler, token)
                out.append(token)
                dist = self._decode([token], n_past, all_logits=True)[-1]
                n_past += 1
        finally:
            llama_cpp.llama_sampler_free(sampler)
        return self._llm.detokenize(out).decode("utf-8", errors="replace")

    def grammar_accepts(self, grammar: str, text: str) -> bool:
        """Whether llama.cpp's grammar sampler lets the model write exactly ``text`` (and then stop)."""
        import llama_cpp

        self.load()
        with self._run_lock:
            sampler = self._grammar_sampler(grammar)
            try:
                flat = np.zeros(self._llm.n_vocab())
                for token in self._tokenize(text, special=False):
                    if not np.isfinite(self._allowed(sampler, flat)[token]):
                        return False
                    llama_cpp.llama_sampler_accept(sampler, token)
                return bool(np.isfinite(self._allowed(sampler, flat)[self._llm.token_eos()]))
            finally:
                llama_cpp.llama_sampler_free(sampler)


def _chat_formatter(llm, metadata: dict[str, str]):
    """A Jinja chat formatter from the GGUF's template, or None for base models without one."""
    template = metadata.get("tokenizer.chat_template")
    if not template:
        return None
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    def piece(token: int) -> str:
        return llm._model.token_get_text(token) if token >= 0 else ""

    return Jinja2ChatFormatter(template, eos_token=piece(llm.token_eos()), bos_token=piece(llm.token_bos()))
