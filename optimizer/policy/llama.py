"""The embedded policy: a GGUF language model run by llama-cpp-python ranks the applicable actions.

Each candidate is written as text (``tiling(BLOCK_K=64, BLOCK_M=128, BLOCK_N=128)``) and scored by
the model's log-probability after a prompt holding the kernel analysis, the target GPU and the
steps so far. The candidates form a token trie that is evaluated in one batch: every trie token is
decoded once, tagged with the sequence ids of all candidates below it, so it attends only to the
prompt and its own ancestors (llama.cpp masks attention by sequence; the KV cache is unified). The
prompt's KV cache is kept between calls, so a repeated or extended prompt costs only its new tokens.

The score is the probability of each candidate under the constraint that the model may only write
one of them (its GBNF grammar, ``grammar.py``): at every branch of the trie the next-token
probabilities are renormalised over the allowed tokens, so the scores of one ranking sum to 1, and
tokens the grammar forces cost little: those below a candidate's last branch are not evaluated, those
above one are decoded for their keys and values only (no logits). ``logprob`` is the log of
that probability; ``exact_logprob=True`` also records the unconstrained log-probability.
``propose`` runs real grammar-constrained greedy decoding through llama.cpp's grammar sampler.

A small quantized model is computed on a cached F16 copy (``f16_copy.py``): same ranking, about
twice the prompt speed on a CPU. llama_cpp is imported only when the model loads; loading can run
in a background thread.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from ..actions.base import Candidate
from .base import Policy, PolicyState, Ranked, candidate_texts, sort_ranked
from .f16_copy import f16_copy
from .grammar import choice_grammar
from .heuristic import HeuristicPolicy
from .prompt import SYSTEM, plain_prompt, plain_prompt_prefix, user_message

UNTRAINED_NOTE = (
    "untrained: the embedded model ranks by its prior over the action text only; "
    "configure trained weights (policyModelPath) or a LoRA adapter (policyAdapterPath) for learned ranking"
)
PROMPT_SLOTS = 4  # sequences 0..3 keep the most recent prompts; candidates use the ids after them
RANKINGS_KEPT = 256  # scored (prompt, candidates) pairs remembered


def _log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    top = row.max()
    return row - (top + np.log(np.exp(row - top).sum()))


def _logsumexp(values: np.ndarray) -> float:
    top = float(values.max())
    return top + float(np.log(np.exp(values - top).sum()))


class _Engine:
    """A llama.cpp model + context with a unified KV cache shared by many sequences."""

    def __init__(self, model_path: str, adapter_path: str | None, n_ctx: int, n_batch: int, n_threads: int,
                 n_seq_max: int):
        import llama_cpp
        from llama_cpp import _internals as internals
        from llama_cpp._logger import set_verbose

        set_verbose(False)
        self.llama_cpp = llama_cpp
        self.model = internals.LlamaModel(path_model=model_path, params=llama_cpp.llama_model_default_params(),
                                          verbose=False)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.n_seq_max = n_seq_max
        params.kv_unified = True  # candidate sequences share the prompt's cells
        params.no_perf = True
        self.ctx = internals.LlamaContext(model=self.model, params=params, verbose=False)
        self.batch = internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=n_seq_max, verbose=False)
        self.adapter = None
        if adapter_path:
            self.adapter = llama_cpp.llama_adapter_lora_init(self.model.model, adapter_path.encode("utf-8"))
            if not self.adapter:
                self.close()
                raise RuntimeError(f"llama.cpp could not load the LoRA adapter {adapter_path}")
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(self.adapter)
            scales = (ctypes.c_float * 1)(1.0)
            if llama_cpp.llama_set_adapters_lora(self.ctx.ctx, adapters, 1, scales):
                self.close()
                raise RuntimeError(f"llama.cpp could not apply the LoRA adapter {adapter_path}")
        self.memory = llama_cpp.llama_get_memory(self.ctx.ctx)
        self.n_vocab = self.model.n_vocab()
        self.n_batch = n_batch
        self.metadata = self.model.metadata()

    def close(self) -> None:
        for part in (self.batch, self.ctx):
            part.close()
        if self.adapter:
            self.llama_cpp.llama_adapter_lora_free(self.adapter)
            self.adapter = None
        self.model.close()

    def tokenize(self, text: str, special: bool) -> list[int]:
        return self.model.tokenize(text.encode("utf-8"), add_bos=special, special=special)

    def forget(self, seq: int, from_pos: int) -> None:
        """Drop ``seq``'s cells from position ``from_pos`` on (-1 for every sequence)."""
        self.llama_cpp.llama_memory_seq_rm(self.memory, seq, from_pos, -1)

    def share(self, source: int, seqs: list[int], n_tokens: int) -> None:
        """Make the first ``n_tokens`` cells of ``source`` part of ``seqs`` too (no copy: unified KV)."""
        for seq in seqs:
            self.llama_cpp.llama_memory_seq_cp(self.memory, source, seq, 0, n_tokens)

    def decode(self, tokens: list[int], positions: list[int], seqs: list[list[int]], outputs: list[bool]) -> list[np.ndarray]:
        """One llama_decode; the log-softmax rows of the tokens marked in ``outputs``, in order."""
        b = self.batch.batch
        b.n_tokens = len(tokens)
        for i, (token, pos, ids, out) in enumerate(zip(tokens, positions, seqs, outputs)):
            b.token[i] = token
            b.pos[i] = pos
            b.n_seq_id[i] = len(ids)
            for j, seq in enumerate(ids):
                b.seq_id[i][j] = seq
            b.logits[i] = out
        self.ctx.decode(self.batch)
        rows = []
        for i, out in enumerate(outputs):
            if out:
                ptr = self.llama_cpp.llama_get_logits_ith(self.ctx.ctx, i)
                rows.append(_log_softmax(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))))
        return rows


class LlamaCppPolicy(Policy):
    """Ranks candidates by a GGUF model's grammar-constrained probability of writing each one."""

    name = "llama"

    def __init__(self, model_path: str, adapter_path: str | None = None, n_ctx: int = 4096, n_threads: int | None = None,
                 list_choices: bool = False, max_parallel: int = 32, exact_logprob: bool = False,
                 use_f16_copy: bool | None = None):
        self.model_path = str(model_path)
        # Compute on a cached F16 copy of a small quantized model (f16_copy.py): same ranking, ~2x faster.
        self.use_f16_copy = use_f16_copy if use_f16_copy is not None else os.environ.get("MTMC_POLICY_F16", "1") != "0"
        self.compute_path = self.model_path
        self.compute_note = ""
        self.adapter_path = adapter_path or None
        self.n_ctx = n_ctx
        self.n_threads = n_threads or int(os.environ.get("MTMC_POLICY_THREADS", 0)) or max(1, min(8, os.cpu_count() or 1))
        # Listing the choices in the prompt makes it multiple choice (easier for an untrained small
        # model) but costs prompt tokens; the grammar constrains the answer either way.
        self.list_choices = list_choices
        self.max_parallel = max_parallel  # candidates scored per batch (one sequence id each)
        # Also compute each candidate's unconstrained log-probability (decodes every trie token).
        self.exact_logprob = exact_logprob
        self._engine: _Engine | None = None
        self._status = "not loaded"
        self._error = ""
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()  # one llama context: one evaluation at a time
        self._thread: threading.Thread | None = None
        # The prompts kept in the KV cache, one per slot (sequence id): tokens, next-token
        # distribution, last use. Returning to a kernel seen recently costs no prompt evaluation.
        self._slots: list[dict[str, Any]] = [{"tokens": [], "dist": None, "used": 0.0} for _ in range(PROMPT_SLOTS)]
        # The same prompt and candidates give the same scores: kept, so a repeated request is answered
        # at once and identically (scores depend slightly on how the batch was split, e.g. whether
        # the prompt was cached).
        self._rankings: OrderedDict[tuple, list[tuple[float | None, float]]] = OrderedDict()
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
            if self._engine is not None or self._status == "failed" or (self._thread is not None and self._thread.is_alive()):
                return
            self._status = "loading"
            self._thread = threading.Thread(target=self._load_quietly, name="mtmc-policy-load", daemon=True)
            self._thread.start()

    def _load_quietly(self) -> None:
        try:
            self.load()
        except Exception:  # kept in status/error; rank() falls back to the heuristic
            pass

    def load(self) -> _Engine:
        """Load the model now (blocking). Raises when it cannot load (and stays failed)."""
        with self._load_lock:
            if self._engine is not None:
                return self._engine
            if self._status == "failed":
                raise RuntimeError(self._error)
            self._status = "loading"
            started = time.perf_counter()
            # OpenMP threads that spin while waiting starve the verification workers sharing the
            # CPU (and themselves under contention); must be set before llama.cpp's libgomp starts.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            try:
                if self.use_f16_copy:
                    path, self.compute_note = f16_copy(self.model_path)
                    self.compute_path = str(path)
                engine = _Engine(self.compute_path, self.adapter_path, self.n_ctx, 512, self.n_threads,
                                 PROMPT_SLOTS + self.max_parallel)
            except Exception as exc:
                self._status = "failed"
                self._error = f"{type(exc).__name__}: {exc}"
                raise
            # The project's own trained weights carry mtmc.* metadata (see docs/policy.md).
            self._trained = bool(self.adapter_path) or any(k.startswith("mtmc.") for k in engine.metadata)
            self._formatter = _chat_formatter(engine)
            self._engine = engine
            self.warm_up()
            self.load_seconds = time.perf_counter() - started
            self._status = "ready"
            return engine

    def warm_up(self) -> None:
        """Evaluate the system turn every prompt starts with, so a first proposal costs only its own part."""
        with self._run_lock:
            if self._engine is not None:
                self._eval_prompt(self._engine.tokenize(self._system_prefix(), special=True))

    def _system_prefix(self) -> str:
        """The prompt text before the user's message (the same for every kernel and GPU)."""
        if self._formatter is None:
            return plain_prompt_prefix()
        marker = "\u2063MTMC\u2063"  # invisible separator: cannot occur in the template itself
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": marker}]
        return self._formatter(messages=messages).prompt.split(marker)[0]

    def close(self) -> None:
        with self._load_lock, self._run_lock:
            if self._engine is not None:
                self._engine.close()
            self._engine = None
            self._reset_slots()
            if self._status == "ready":
                self._status = "not loaded"

    def describe(self) -> str:
        model = Path(self.model_path).name
        adapter = f" + LoRA {Path(self.adapter_path).name}" if self.adapter_path else ""
        if self._status == "failed":
            return f"embedded model {model}{adapter} failed to load ({self._error}); using the heuristic policy"
        state = {"ready": "loaded", "loading": "loading"}.get(self._status, "loads on first use")
        trained = "trained" if self._trained else UNTRAINED_NOTE
        f16 = ", computed in F16" if self.compute_path != self.model_path else ""
        return f"embedded model {model}{adapter} via llama.cpp ({state}{f16}); {trained}"

    # -- prompts -----------------------------------------------------------------------------
    def prompt(self, state: PolicyState, choices: list[str]) -> str:
        """The prompt text: the model's chat template when it has one, else a plain prompt."""
        listed = choices if self.list_choices else []
        if self._formatter is not None:
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user_message(state, listed)}]
            return self._formatter(messages=messages).prompt
        return plain_prompt(state, listed)

    # -- ranking -----------------------------------------------------------------------------
    def rank(self, state: PolicyState, candidates: list[Candidate]) -> list[Ranked]:
        if not candidates:
            return []
        try:
            engine = self.load()
        except Exception:
            ranked = self._fallback.rank(state, candidates)
            for r in ranked:
                r.metadata["fallback"] = f"embedded model unavailable ({self._error}); heuristic ranking"
            return ranked
        texts = candidate_texts(candidates)
        started = time.perf_counter()
        with self._run_lock:
            prompt_tokens = engine.tokenize(self.prompt(state, texts), special=True)
            eos = engine.model.token_eos()
            sequences = [engine.tokenize(t, special=False) + [eos] for t in texts]
            key = (tuple(prompt_tokens), tuple(map(tuple, sequences)), self.exact_logprob)
            scored = self._rankings.get(key)
            if scored is None:
                scored = self._score(prompt_tokens, sequences)
                self._rankings[key] = scored
                while len(self._rankings) > RANKINGS_KEPT:
                    self._rankings.popitem(last=False)
            else:
                self._rankings.move_to_end(key)
        elapsed = time.perf_counter() - started
        ranked = []
        for candidate, text, (raw, constrained) in zip(candidates, texts, scored):
            metadata: dict[str, Any] = {
                "policy": self.name, "model": Path(self.model_path).name, "trained": self._trained,
                "text": text, "prompt_tokens": len(prompt_tokens), "seconds": round(elapsed, 4),
            }
            if raw is not None:
                metadata["raw_logprob"] = raw
            if not self._trained:
                metadata["note"] = UNTRAINED_NOTE
            probability = float(np.exp(constrained))
            ranked.append(Ranked(candidate, score=probability, logprob=constrained,
                                 reason=f"model probability {probability:.3f} under the grammar", metadata=metadata))
        return sort_ranked(ranked)

    def _reset_slots(self) -> None:
        self._rankings.clear()
        for slot in self._slots:
            slot.update(tokens=[], dist=None, used=0.0)

    def forget_rankings(self) -> None:
        """Forget the remembered scores but keep the prompts' KV cache (benchmarks time a new state)."""
        with self._run_lock:
            self._rankings.clear()

    def clear_cache(self) -> None:
        """Forget every cached prompt and score (the next proposal evaluates its whole prompt)."""
        with self._run_lock:
            if self._engine is not None:
                for seq in range(PROMPT_SLOTS):
                    self._engine.forget(seq, -1)
            self._reset_slots()

    def _eval_prompt(self, tokens: list[int]) -> tuple[int, np.ndarray]:
        """(slot, next-token log-probabilities) for ``tokens``, evaluating only what no cached prompt shares."""
        slot, common, dist = self._claim_slot(tokens)
        if dist is None:
            dist = self._finish_prompt(tokens, slot, common)
        return slot, dist

    def _claim_slot(self, tokens: list[int]) -> tuple[int, int, np.ndarray | None]:
        """(slot, cells of ``tokens`` it already holds, the distribution when it holds them all).

        A slot that holds exactly ``tokens`` is reused; otherwise the least recently used slot gets the
        longest prefix any slot shares with ``tokens`` and the rest is left to evaluate.
        """
        engine = self._engine
        if len(tokens) >= self.n_ctx - engine.n_batch - 64:
            raise ValueError(f"prompt of {len(tokens)} tokens does not fit the context of {self.n_ctx}")

        def shared(slot: dict) -> int:
            n = 0
            for a, b in zip(tokens, slot["tokens"]):
                if a != b:
                    break
                n += 1
            return n

        for seq, slot in enumerate(self._slots):
            if slot["tokens"] == tokens and slot["dist"] is not None:
                slot["used"] = time.monotonic()
                return seq, len(tokens), slot["dist"]
        source = max(range(PROMPT_SLOTS), key=lambda i: shared(self._slots[i]))
        common = min(shared(self._slots[source]), len(tokens) - 1)  # the last token is evaluated again
        target = min(range(PROMPT_SLOTS), key=lambda i: self._slots[i]["used"])  # least recently used
        if target == source:
            engine.forget(target, common)
        else:
            engine.forget(target, -1)
            engine.share(source, [target], common)
        self._slots[target].update(tokens=[], dist=None, used=time.monotonic())
        return target, common, None

    def _finish_prompt(self, tokens: list[int], slot: int, common: int) -> np.ndarray:
        """Evaluate ``tokens`` from ``common`` on in ``slot``; its next-token distribution."""
        engine = self._engine
        try:
            dist = self._decode_prompt(tokens, common, slot)
        except RuntimeError:
            # The KV cache is full: keep only this prompt's cells and try once more.
            for seq in range(PROMPT_SLOTS):
                if seq != slot:
                    engine.forget(seq, -1)
                    self._slots[seq].update(tokens=[], dist=None, used=0.0)
            engine.forget(slot, common)
            dist = self._decode_prompt(tokens, common, slot)
        self._slots[slot].update(tokens=list(tokens), dist=dist)
        return dist

    def _decode_prompt(self, tokens: list[int], start_at: int, seq: int) -> np.ndarray:
        engine = self._engine
        rows: list[np.ndarray] = []
        for start in range(start_at, len(tokens), engine.n_batch):
            chunk = tokens[start:start + engine.n_batch]
            last = start + len(chunk) == len(tokens)
            rows = engine.decode(chunk, list(range(start, start + len(chunk))), [[seq]] * len(chunk),
                                 [last and i == len(chunk) - 1 for i in range(len(chunk))])
        return rows[-1]

    def _score(self, prompt_tokens: list[int], sequences: list[list[int]]) -> list[tuple[float | None, float]]:
        """(raw log-prob or None, grammar-constrained log-prob) of each token sequence after the prompt.

        Under the grammar only the branches of the candidates' trie are choices: a token that is the
        only allowed continuation has probability 1. So only the trie nodes at or above a branch are
        decoded (the raw, unconstrained log-probability needs every node: ``exact_logprob``).
        """
        slot, common, first = self._claim_slot(prompt_tokens)
        n_prompt = len(prompt_tokens)
        # The trie: node -> {token: child}; node 0 is the prompt's end, every other node one token at
        # depth d (position n_prompt + d - 1), shared by the candidates (leaves) below it.
        children: list[dict[int, int]] = [{}]
        parent_of, token_of, depth_of, leaves = [-1], [-1], [0], [[]]
        paths: list[list[int]] = []
        for index, seq in enumerate(sequences):
            node, path = 0, []
            for token in seq:
                nxt = children[node].get(token)
                if nxt is None:
                    nxt = len(children)
                    children[node][token] = nxt
                    children.append({})
                    parent_of.append(node)
                    token_of.append(token)
                    depth_of.append(depth_of[node] + 1)
                    leaves.append([])
                leaves[nxt].append(index)
                node = nxt
                path.append(node)
            paths.append(path)
        needed: set[int] = set()
        for node in range(1, len(children)):
            if len(children[node]) > 1 or (self.exact_logprob and children[node]):
                while node > 0 and node not in needed:  # a branch and everything above it
                    needed.add(node)
                    node = parent_of[node]
        order = sorted(needed)  # creation order: parents before children
        # Logits only where a choice is made: the output head is a fifth of a token's compute, and
        # forced tokens above a branch are decoded only for their keys and values.
        scored_nodes = {n for n in order if len(children[n]) > 1 or (self.exact_logprob and children[n])}
        groups = self._groups(list(range(len(sequences))), order, leaves)
        # A prompt not cached yet is decoded in the same batch as the first group's trie tokens: one
        # llama_decode of ~130 tokens costs ~20% less than two of ~80 and ~50 on a CPU.
        suffix = prompt_tokens[common:] if first is None else []
        first_nodes = sum(1 for n in order if set(groups[0]).intersection(leaves[n]))
        if suffix and len(suffix) + first_nodes > self._engine.n_batch:
            first, suffix = self._finish_prompt(prompt_tokens, slot, common), []
        rows: dict[int, np.ndarray] = {}
        for group in groups:
            if suffix:
                try:
                    first = self._decode_group(group, order, leaves, token_of, depth_of, slot, n_prompt, rows,
                                               scored_nodes, prompt_tokens, common)
                    self._slots[slot].update(tokens=list(prompt_tokens), dist=first)
                except RuntimeError:  # the KV cache is full: the prompt alone, with its own recovery
                    self._engine.forget(slot, common)
                    first = self._finish_prompt(prompt_tokens, slot, common)
                    self._decode_group(group, order, leaves, token_of, depth_of, slot, n_prompt, rows, scored_nodes)
                suffix = []
            else:
                self._decode_group(group, order, leaves, token_of, depth_of, slot, n_prompt, rows, scored_nodes)
        rows[0] = first
        results: list[tuple[float | None, float]] = []
        for path in paths:
            raw: float | None = 0.0
            constrained, parent = 0.0, 0
            for node in path:
                allowed = list(children[parent].keys())
                if parent in rows:
                    dist = rows[parent]
                    lp = float(dist[token_of[node]])
                    if len(allowed) > 1:
                        constrained += lp - _logsumexp(dist[allowed])
                    if raw is not None:
                        raw += lp
                else:
                    raw = None  # a forced token that was not evaluated
                parent = node
            results.append((raw, constrained))
        return results

    def _groups(self, members: list[int], order: list[int], leaves: list[list[int]]) -> list[list[int]]:
        """Split the candidates so each batch has at most ``max_parallel`` sequences and fits ``n_batch``."""
        wanted = set(members)
        size = sum(1 for n in order if wanted.intersection(leaves[n]))
        if len(members) <= self.max_parallel and size <= self._engine.n_batch:
            return [members]
        if len(members) == 1:
            raise ValueError("a candidate's text does not fit one batch")
        half = len(members) // 2
        return self._groups(members[:half], order, leaves) + self._groups(members[half:], order, leaves)

    def _decode_group(self, group: list[int], order: list[int], leaves: list[list[int]], token_of: list[int],
                      depth_of: list[int], slot: int, n_prompt: int, rows: dict[int, np.ndarray],
                      scored_nodes: set[int], prompt_tokens: list[int] | None = None,
                      common: int = 0) -> np.ndarray | None:
        """One batch: every needed node above this group's candidates, tagged with their sequence ids.

        With ``prompt_tokens``, the slot holds only their first ``common`` cells: the rest of the prompt
        goes first in the same batch, tagged with the slot and every candidate's id, and the prompt's
        next-token distribution is returned.
        """
        engine = self._engine
        seq_of = {candidate: PROMPT_SLOTS + i for i, candidate in enumerate(group)}  # ids after the prompt slots
        nodes = [n for n in order if any(c in seq_of for c in leaves[n])]
        seq_ids = list(seq_of.values())
        suffix = prompt_tokens[common:] if prompt_tokens is not None else []
        if not nodes and not suffix:
            return None
        engine.share(slot, seq_ids, common if suffix else n_prompt)
        try:
            decoded = engine.decode(
                suffix + [token_of[n] for n in nodes],
                list(range(common, common + len(suffix))) + [n_prompt + depth_of[n] - 1 for n in nodes],
                [[slot] + seq_ids] * len(suffix) + [[seq_of[c] for c in leaves[n] if c in seq_of] for n in nodes],
                [i == len(suffix) - 1 for i in range(len(suffix))] + [n in scored_nodes for n in nodes],
            )
        finally:
            for seq in seq_ids:
                engine.forget(seq, -1)
        first = decoded.pop(0) if suffix else None
        for node, row in zip([n for n in nodes if n in scored_nodes], decoded):
            rows.setdefault(node, row)
        return first

    # -- grammar-constrained generation ------------------------------------------------------
    def propose(self, state: PolicyState, candidates: list[Candidate], max_tokens: int = 96) -> tuple[str, Candidate | None]:
        """Greedy decoding under the candidates' GBNF grammar: the text the model writes and its candidate."""
        if not candidates:
            return "", None
        engine = self.load()
        texts = candidate_texts(candidates)
        grammar = choice_grammar(texts)
        with self._run_lock:
            prompt_tokens = engine.tokenize(self.prompt(state, texts), special=True)
            slot, dist = self._eval_prompt(prompt_tokens)
            try:
                text = self._generate(grammar, dist, slot, len(prompt_tokens), max_tokens)
            finally:
                engine.forget(slot, len(prompt_tokens))
        chosen = next((c for c, t in zip(candidates, texts) if t == text), None)
        return text, chosen

    def _grammar_sampler(self, grammar: str):
        engine = self._engine
        sampler = engine.llama_cpp.llama_sampler_init_grammar(engine.model.vocab, grammar.encode("utf-8"), b"root")
        if not sampler:
            raise ValueError("llama.cpp rejected the grammar")
        return sampler

    def _allowed(self, sampler, logits: np.ndarray) -> np.ndarray:
        """The logits after the grammar sampler masked what it forbids (-inf)."""
        from llama_cpp._internals import LlamaTokenDataArray

        data = LlamaTokenDataArray(n_vocab=len(logits))
        data.copy_logits(logits.astype(np.single))
        self._engine.llama_cpp.llama_sampler_apply(sampler, ctypes.byref(data.candidates))
        masked = np.full(len(logits), -np.inf, dtype=np.float64)
        size = data.candidates.size
        masked[data.candidates_data.id[:size]] = data.candidates_data.logit[:size]
        return masked

    def _generate(self, grammar: str, dist: np.ndarray, seq: int, n_past: int, max_tokens: int) -> str:
        engine = self._engine
        lib = engine.llama_cpp
        sampler = self._grammar_sampler(grammar)
        out: list[int] = []
        try:
            for _ in range(max_tokens):
                masked = self._allowed(sampler, dist)
                token = int(np.argmax(masked))
                if not np.isfinite(masked[token]) or lib.llama_vocab_is_eog(engine.model.vocab, token):
                    break
                lib.llama_sampler_accept(sampler, token)
                out.append(token)
                engine.forget(seq, n_past)
                dist = engine.decode([token], [n_past], [[seq]], [True])[0]
                n_past += 1
        finally:
            lib.llama_sampler_free(sampler)
        return engine.model.detokenize(out, special=False).decode("utf-8", errors="replace")

    def grammar_accepts(self, grammar: str, text: str) -> bool:
        """Whether llama.cpp's grammar sampler lets the model write exactly ``text`` and then stop."""
        engine = self.load()
        with self._run_lock:
            sampler = self._grammar_sampler(grammar)
            try:
                flat = np.zeros(engine.n_vocab)
                for token in engine.tokenize(text, special=False):
                    if not np.isfinite(self._allowed(sampler, flat)[token]):
                        return False
                    engine.llama_cpp.llama_sampler_accept(sampler, token)
                return bool(np.isfinite(self._allowed(sampler, flat)[engine.model.token_eos()]))
            finally:
                engine.llama_cpp.llama_sampler_free(sampler)


def _chat_formatter(engine: _Engine):
    """A Jinja chat formatter from the GGUF's template, or None for base models without one."""
    template = engine.metadata.get("tokenizer.chat_template")
    if not template:
        return None
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    def piece(token: int) -> str:
        return engine.model.token_get_text(token) if token >= 0 else ""

    return Jinja2ChatFormatter(template, eos_token=piece(engine.model.token_eos()), bos_token=piece(engine.model.token_bos()))
