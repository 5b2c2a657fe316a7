"""Collecting training data: explore action sequences per kernel with the MTMC loop and real verification.

Each work unit is one (file, kernel, seed): ``search.optimize`` runs a beam search with the
heuristic policy plus seeded random jitter (so equal scores break differently and seeds explore
different siblings), verifying every step with the given verifier. Results are cached by source
(target, previous text, new text, verify options): a state reached again, by another seed or after a
restart, costs nothing. Every finished episode is appended to ``episodes.jsonl`` in the run folder as
one block of trajectory records (``mtmc.trajectory.v1`` plus the actions offered in each state), so a
run stopped at any point resumes by skipping the units already there. Backends: ``LocalBackend``
(threads in this process; the verifier's pool has one worker per GPU) and ``RayBackend`` (one task per
GPU on a Ray cluster; the driver owns the files).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..analysis import analyze
from ..hardware import GpuProfile, get_profile
from ..policy.base import Policy, PolicyState, Ranked, sort_ranked
from ..policy.heuristic import HeuristicPolicy
from ..trajectories import SCHEMA, TrajectoryRecorder
from .dataset import VERIFIED, provenance, refuse_heldout

EPISODES_FILE = "episodes.jsonl"
CACHE_FILE = "verify_cache.jsonl"
RUN_FILE = "run.json"
UNCACHED_STATUSES = ("cancelled", "superseded", "timeout", "error")  # may not happen again: measure anew

VerifierFactory = Callable[[str, GpuProfile], Callable]


class ExplorationPolicy(Policy):
    """A base policy's scores plus seeded Gumbel noise (``jitter`` scale); no base: uniformly random."""

    name = "explore"

    def __init__(self, base: Policy | None = None, jitter: float = 0.05, seed: int = 0):
        self.base, self.jitter, self.rng = base, jitter, random.Random(seed)

    def rank(self, state: PolicyState, candidates: list) -> list[Ranked]:
        ranked = self.base.rank(state, candidates) if self.base is not None else [Ranked(c, 0.0) for c in candidates]
        scale = self.jitter if self.base is not None else 1.0
        noisy = []
        for r in ranked:
            gumbel = -_log(-_log(self.rng.random()))
            noisy.append(dataclasses.replace(r, score=r.score + scale * gumbel,
                                             metadata={**r.metadata, "base_score": r.score}))
        return sort_ranked(noisy)

    def describe(self) -> str:
        base = self.base.describe() if self.base is not None else "uniformly random"
        return f"exploration: {base} + Gumbel noise x{self.jitter if self.base is not None else 1.0}"


def _log(x: float) -> float:
    import math

    return math.log(max(x, 1e-300))


# -- the result cache ----------------------------------------------------------------------------------
def cache_key(target: str, old_text: str | None, new_text: str, options: str) -> str:
    """Source-keyed: the same edit of the same text, for the same target and checks, is the same result."""
    digest = hashlib.sha256()
    for part in (target, options, old_text or "", new_text):
        digest.update(part.encode("utf-8") + b"\0")
    return digest.hexdigest()


class ResultCache:
    """Verification reports by ``cache_key``; appended to a JSONL file when it has one."""

    def __init__(self, path: str | Path | None = None, entries: dict[str, dict] | None = None):
        self.path = Path(path) if path else None
        self.entries: dict[str, dict] = dict(entries or {})
        self.new: dict[str, dict] = {}
        self.hits = 0
        self._lock = threading.Lock()
        if self.path is not None and self.path.is_file():
            with self.path.open(encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        try:
                            row = json.loads(line)
                        except json.JSONDecodeError:  # a line cut by a stop: the rest is good
                            continue
                        self.entries[row["key"]] = row["report"]

    def get(self, key: str) -> dict | None:
        with self._lock:
            found = self.entries.get(key)
            self.hits += found is not None
            return found

    def put(self, key: str, report: dict) -> None:
        with self._lock:
            self.entries[key] = report
            self.new[key] = report
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"key": key, "report": report}, default=str) + "\n")

    def of_file(self, path: str) -> dict[str, dict]:
        """The entries of one file (the key holds the texts): what a unit run elsewhere may hit."""
        with self._lock:
            return {k: v for k, v in self.entries.items() if v.get("path") == path}

    def merge(self, found: dict[str, dict]) -> None:
        """Entries a unit run elsewhere verified: the new ones are kept (and appended to the file)."""
        for key, report in found.items():
            if key not in self.entries:
                self.put(key, report)


class CachedVerifier:
    """A verifier whose reports are looked up by source first (``ResultCache``)."""

    def __init__(self, inner: Callable, cache: ResultCache, target: str, options: str = ""):
        self.inner, self.cache, self.target, self.options = inner, cache, target, options

    def __call__(self, new_text: str, old_text: str, cancel=None):
        from ..verify.report import VerificationReport

        key = cache_key(self.target, old_text, new_text, self.options)
        found = self.cache.get(key)
        if found is not None:
            return VerificationReport.from_json(found)
        report = self.inner(new_text, old_text, cancel)
        if report.status not in UNCACHED_STATUSES:
            self.cache.put(key, report.to_json())
        return report


def default_verifier(path: str, target: GpuProfile, seeds: int = 3, mode: str = "auto"):
    """``verify_file`` for ``path`` and ``target`` (GPU when there is one, else the interpreter)."""
    from ..search import make_verifier
    from ..verify import VerifyOptions

    return make_verifier(path, target, VerifyOptions(seeds=seeds, mode=mode))


# -- recording: trajectories plus what each state offered --------------------------------------------
class _Offers:
    """Captures the actions listed for each state and which of them the policy was asked to rank."""

    def __init__(self, allow_precision: bool):
        self.allow_precision = allow_precision
        self.listed: list = []
        self.offered: list = []

    def candidates(self, analysis, kernel: str, target: GpuProfile) -> list:
        from ..actions import applicable

        self.listed = applicable(analysis, kernel, target, self.allow_precision)
        return self.listed

    def on_rank(self, depth: int, ranked: list[Ranked]) -> None:
        keys = {r.candidate.key() for r in ranked}
        self.offered = [c for c in self.listed if c.key() in keys]  # the order the policy was given them in


class EpisodeRecorder(TrajectoryRecorder):
    """A ``TrajectoryRecorder`` that keeps its records in memory and adds each state's offered actions."""

    def __init__(self, offers: _Offers, folder: Path):
        self.offers = offers
        self.records: list[dict[str, Any]] = []
        self.problem = None
        self.folder, self.enabled, self.path, self.episode, self._step = folder, True, None, None, 0
        self._state: PolicyState | None = None

    def step(self, state, attempt) -> None:
        self._state = state
        super().step(state, attempt)

    def _write(self, record: dict[str, Any]) -> None:
        from ..policy.prompt import user_message

        record = {"schema": SCHEMA, "episode": self.episode, "time": round(time.time(), 3), **record}
        if record["type"] == "step":
            record["offered"] = [c.to_json() for c in self.offers.offered]
            record["user"] = user_message(self._state, [])
        self.records.append(json.loads(json.dumps(record, default=str)))


# -- work units ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkUnit:
    """One episode to collect: a kernel of a file, explored with one seed."""

    file: str
    kernel: str
    seed: int

    def key(self) -> tuple[str, str, int]:
        return (self.file, self.kernel, self.seed)


@dataclass
class CollectSettings:
    """How each episode explores and verifies."""

    target: str = "h200"
    steps: int = 4  # kept steps per chain at most (depth)
    beam: int = 3  # states kept per depth; each state tries until `beam` steps are kept
    tries: int | None = 6  # verifications per state at most
    kernel_budget_s: float = 600.0
    jitter: float = 0.05
    allow_precision: bool = False
    options: str = "seeds=3"  # part of the cache key: results under other checks are other results


@dataclass
class UnitResult:
    """What one episode produced: its trajectory records, new cache entries and counts."""

    unit: WorkUnit
    records: list[dict[str, Any]]
    new_cache: dict[str, dict]
    verified: int
    cache_hits: int
    seconds: float
    error: str | None = None


def run_unit(unit: WorkUnit, settings: CollectSettings, verifier_for: VerifierFactory,
             cache: ResultCache | dict, budget_s: float, folder: str = ".") -> UnitResult:
    """Explore one kernel: the loop with the exploration policy, every attempt recorded."""
    from ..search import SearchConfig, optimize

    started = time.monotonic()
    refuse_heldout(unit.file)
    store = cache if isinstance(cache, ResultCache) else ResultCache(entries=cache)
    hits_before = store.hits
    target = get_profile(settings.target)
    text = Path(unit.file).read_text(encoding="utf-8")
    offers = _Offers(settings.allow_precision)
    recorder = EpisodeRecorder(offers, Path(folder))
    verify = CachedVerifier(verifier_for(unit.file, target), store, target.key, settings.options)
    config = SearchConfig(steps=settings.steps, beam=settings.beam, tries=settings.tries,
                          budget_s=min(settings.kernel_budget_s, budget_s), allow_precision=settings.allow_precision,
                          candidates=offers.candidates, on_rank=offers.on_rank, record=recorder)
    policy = ExplorationPolicy(HeuristicPolicy(), settings.jitter, seed=_seed(unit))
    error = None
    try:
        optimize(text, unit.file, unit.kernel, target, policy, verify, config)
    except Exception as exc:  # one kernel's failure must not end a long collection run
        error = f"{type(exc).__name__}: {exc}"
    verified = sum(1 for r in recorder.records if r.get("type") == "step" and r.get("status") in VERIFIED)
    return UnitResult(unit, recorder.records, dict(store.new) if not isinstance(cache, ResultCache) else {},
                      verified, store.hits - hits_before, time.monotonic() - started, error)


def _seed(unit: WorkUnit) -> int:
    return int(hashlib.sha256(f"{unit.file}|{unit.kernel}|{unit.seed}".encode()).hexdigest()[:8], 16)


def work_units(files: Iterable[str | Path], seeds: int = 1) -> list[WorkUnit]:
    """Every (file, kernel, seed), in file order; held-out files are refused."""
    units = []
    for file in files:
        refuse_heldout(file)
        text = Path(file).read_text(encoding="utf-8")
        for kernel in analyze(text, str(file)).kernels:
            units.extend(WorkUnit(str(file), kernel.name, s) for s in range(seeds))
    return units


def done_units(folder: Path) -> set[tuple[str, str, int]]:
    """Units with a complete episode (begin ... end) in the run's episodes file."""
    path = folder / EPISODES_FILE
    done: set[tuple[str, str, int]] = set()
    if not path.is_file():
        return done
    begins: dict[str, dict] = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # the last line of a run stopped while writing
                continue
            if record.get("type") == "begin":
                begins[record["episode"]] = record
            elif record.get("type") == "end" and record.get("episode") in begins and record.get("stopped") != "budget":
                # An episode the budget cut short is kept but run again on resume: its verified
                # steps come from the cache and it goes further (the dataset keeps the last one).
                begin = begins[record["episode"]]
                done.add((begin["file"], begin["kernel"], int(begin.get("collectSeed", 0))))
    return done


# -- backends ------------------------------------------------------------------------------------------
class LocalBackend:
    """Units on ``workers`` threads of this process (verification runs in the pool's worker processes)."""

    name = "local"

    def __init__(self, workers: int = 1):
        self.workers = max(1, workers)

    def run(self, units: list[WorkUnit], settings: CollectSettings, verifier_for: VerifierFactory,
            cache: ResultCache, budget_left: Callable[[], float], folder: str) -> Iterator[UnitResult]:
        todo = list(units)
        with ThreadPoolExecutor(self.workers, thread_name_prefix="mtmc-collect") as pool:
            running = set()
            while todo or running:
                while todo and len(running) < self.workers and budget_left() > 0:
                    running.add(pool.submit(run_unit, todo.pop(0), settings, verifier_for, cache, budget_left(), folder))
                if not running:
                    return
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    yield future.result()


class RayBackend:
    """One Ray task per unit, each holding ``gpus_per_task`` GPUs (0 on a CPU cluster); the driver writes."""

    name = "ray"

    def __init__(self, address: str | None = None, gpus_per_task: float = 1.0, cpus_per_task: float = 1.0,
                 max_in_flight: int | None = None, init_kwargs: dict | None = None):
        self.address, self.gpus_per_task, self.cpus_per_task = address, gpus_per_task, cpus_per_task
        self.max_in_flight, self.init_kwargs = max_in_flight, dict(init_kwargs or {})

    def run(self, units: list[WorkUnit], settings: CollectSettings, verifier_for: VerifierFactory,
            cache: ResultCache, budget_left: Callable[[], float], folder: str) -> Iterator[UnitResult]:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, **self.init_kwargs)
        task = ray.remote(num_gpus=self.gpus_per_task, num_cpus=self.cpus_per_task)(run_unit)
        slots = self.max_in_flight or max(1, int(ray.cluster_resources().get("GPU" if self.gpus_per_task else "CPU", 1)
                                                 / (self.gpus_per_task or self.cpus_per_task)))
        todo, running = list(units), {}
        while todo or running:
            while todo and len(running) < slots and budget_left() > 0:
                unit = todo.pop(0)
                running[task.remote(unit, settings, verifier_for, cache.of_file(unit.file), budget_left(), folder)] = unit
            if not running:
                return
            finished, _ = ray.wait(list(running), num_returns=1)
            for ref in finished:
                running.pop(ref)
                result = ray.get(ref)
                cache.merge(result.new_cache)
                yield result


class ProcessBackend:
    """Units on ``processes`` child processes sharing one GPU (``verify/shared_gpu.py``); the driver writes.

    Each child has its own verifier pool, so imports, compiles and correctness trials of several
    candidates overlap on the machine's cores while timing rounds run alone on the GPU.
    """

    name = "process"

    def __init__(self, processes: int = 4):
        self.processes = max(1, processes)

    def run(self, units: list[WorkUnit], settings: CollectSettings, verifier_for: VerifierFactory,
            cache: ResultCache, budget_left: Callable[[], float], folder: str) -> Iterator[UnitResult]:
        from ..verify.shared_gpu import map_on_one_gpu

        run = functools.partial(_run_task, settings=settings, verifier_for=verifier_for, budget_left=budget_left,
                                folder=folder)
        # Each child gets the cached results of its unit's file as they are when the unit is handed out.
        tasks = ((unit, cache.of_file(unit.file)) for unit in units)
        for (unit, _), result in map_on_one_gpu(run, tasks, self.processes, lambda: budget_left() > 0):
            if isinstance(result, BaseException):
                result = UnitResult(unit, [], {}, 0, 0, 0.0, f"{type(result).__name__}: {result}")
            cache.merge(result.new_cache)
            yield result


def _run_task(task: tuple, settings: CollectSettings, verifier_for: VerifierFactory,
              budget_left: Callable[[], float], folder: str) -> UnitResult:
    unit, entries = task
    return run_unit(unit, settings, verifier_for, entries, budget_left(), folder)


# -- the run -------------------------------------------------------------------------------------------
@dataclass
class CollectSummary:
    """How a collection run went: units done and skipped, verifications, cache hits, rate."""

    folder: str
    units: int
    skipped: int
    episodes: int
    verified: int
    cache_hits: int
    seconds: float
    gpus: int
    errors: list[str] = field(default_factory=list)

    @property
    def verified_per_gpu_minute(self) -> float:
        return self.verified / max(self.gpus, 1) / max(self.seconds / 60.0, 1e-9)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "verifiedPerGpuMinute": round(self.verified_per_gpu_minute, 2)}


def collect(files: Iterable[str | Path], target: str = "h200", budget_s: float = 3600.0,
            verifier: VerifierFactory | None = None, out: str | Path = "runs/collect", seeds: int = 1,
            settings: CollectSettings | None = None, backend: LocalBackend | ProcessBackend | RayBackend | None = None,
            gpus: int = 1, on_result: Callable[[UnitResult], None] | None = None, order: int = 0) -> CollectSummary:
    """Explore every kernel of ``files`` (``seeds`` episodes each) within ``budget_s``; resumable in ``out``.

    ``order`` 0 takes the units in file order; another value shuffles them under that seed, so that a window
    shorter than the corpus samples every kind of kernel instead of the first files.
    """
    started = time.monotonic()
    settings = dataclasses.replace(settings or CollectSettings(), target=target)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    run_file = folder / RUN_FILE
    files = list(files)
    this_start = {"settings": dataclasses.asdict(settings),
                  "provenance": provenance(corpus=sorted({str(Path(f).parent) for f in files}))}
    if not run_file.exists():  # provenance of the first start
        run_file.write_text(json.dumps(this_start, indent=1, default=str) + "\n")
    else:  # a resumed run keeps the first start's and adds each later start, whose settings may differ
        run = json.loads(run_file.read_text())
        run.setdefault("resumed", []).append(this_start)
        run_file.write_text(json.dumps(run, indent=1, default=str) + "\n")
    units = work_units(files, seeds)
    done = done_units(folder)
    todo = [u for u in units if u.key() not in done]
    if order:
        random.Random(order).shuffle(todo)
    cache = ResultCache(folder / CACHE_FILE)
    backend = backend or LocalBackend()
    verifier_for = verifier or functools.partial(default_verifier)
    summary = CollectSummary(str(folder), len(units), len(units) - len(todo), 0, 0, 0, 0.0, gpus)

    def budget_left() -> float:
        return budget_s - (time.monotonic() - started)

    with (folder / EPISODES_FILE).open("a", encoding="utf-8") as fh:
        for result in backend.run(todo, settings, verifier_for, cache, budget_left, str(folder)):
            if result.error:
                summary.errors.append(f"{result.unit.file}:{result.unit.kernel}: {result.error}")
            # Only a finished episode is written, in one block: a stop never leaves half an episode.
            if result.records and result.records[-1].get("type") == "end":
                for record in result.records:
                    if record.get("type") == "begin":
                        record["collectSeed"] = result.unit.seed
                fh.write("".join(json.dumps(r) + "\n" for r in result.records))
                fh.flush()
                summary.episodes += 1
            summary.verified += result.verified
            summary.cache_hits += result.cache_hits
            if on_result is not None:
                on_result(result)
    summary.seconds = time.monotonic() - started
    return summary
