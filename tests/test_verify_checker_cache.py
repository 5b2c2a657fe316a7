"""The checker process stays up between jobs and keeps what it computed for later candidates of one file.

The optimize loop judges many candidates against one previous version: the checker keeps, per seed and
sizes, the inputs it made and the reference's and the previous version's outputs, keyed by the texts
that decide them (the previous version, the problem file) and the harness's choice of functions, so a
later candidate's trial is a load and a comparison. A changed previous version must never be served
from that cache; the candidate's process holds none of it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.verify import VerifyOptions, WorkerPool, verify_file
from mtmc_lsp.optimizer.verify.runtime import checker
from mtmc_lsp.optimizer.verify.runtime import job as jobmod
from mtmc_lsp.optimizer.verify.runtime.lru import ByteBoundedLRU

FAULTS = Path(__file__).resolve().parent / "corpus" / "faults"
BASE = (FAULTS / "base.py").read_text()
# The same function with its entry two lines further down (most edits move it): the same expectations.
MOVED = BASE.replace('"""The correct kernel', '# a candidate\n# of the same file\n"""The correct kernel', 1)
# Another previous version (and its reference): out = 3 * x + y.
THRICE = BASE.replace("2.0 * x", "3.0 * x")


def _job(harness: dict, old_text: str | None = BASE, problem_text: str | None = None) -> dict:
    return {"harness": harness, "old_text": old_text, "problem_text": problem_text, "mode": "interpreter"}


HARNESS = {"style": "function", "entry": "scale_add", "reference": "reference", "inputs": "get_inputs",
           "init_inputs": None, "tests": [], "line": 17, "notes": [], "input_count": 2}


def test_the_expectation_key_follows_what_decides_the_expected_outputs():
    key = jobmod.expectation_key(_job(HARNESS), "")
    assert jobmod.expectation_key(_job({**HARNESS, "line": 19, "notes": ["moved"], "input_count": 3}), "") == key
    assert jobmod.expectation_key(_job(HARNESS, THRICE), "") != key
    assert jobmod.expectation_key(_job(HARNESS, problem_text="class Model: ..."), "") != key
    assert jobmod.expectation_key(_job({**HARNESS, "reference": "other_reference"}), "") != key
    assert jobmod.expectation_key(_job({**HARNESS, "inputs": "get_other_inputs"}), "") != key
    assert jobmod.expectation_key(_job({**HARNESS, "old_entry": "scale_add_v0"}), "") != key
    assert jobmod.expectation_key(_job(HARNESS), "the new text, where the inputs come from it") != key


def test_kept_judging_stays_within_its_byte_budget(monkeypatch):
    import torch

    monkeypatch.setattr(checker, "_kept_judging", type(checker._kept_judging)())
    monkeypatch.setitem(checker.KEPT_JUDGING_BYTES, "cpu", 8000)
    for seed in range(5):  # 1000 bytes of inputs and 1000 of outputs each: four entries fit, the oldest goes
        checker._keep_judging(("key", seed, "{}"), [torch.zeros(250)], {"reference": torch.zeros(250)}, "cpu")
    assert list(checker._kept_judging) == [("key", seed, "{}") for seed in (1, 2, 3, 4)]
    checker._keep_judging(("key", "big", "{}"), [torch.zeros(500)], {"reference": torch.zeros(250)}, "cpu")
    assert ("key", "big", "{}") not in checker._kept_judging  # over a quarter of the budget: not kept
    assert len(checker._kept_judging) == 4


def test_the_kept_store_drops_the_least_recently_used_and_counts_a_replaced_entry_once():
    store = ByteBoundedLRU()
    for key in "abcd":
        store.keep(key, key.upper(), 2000, 8000)
    store.touch("a")  # used: "b" is now the oldest
    store.keep("b", "B2", 2000, 8000)  # replaced, not counted twice: nothing dropped
    assert list(store) == ["c", "d", "a", "b"] and store.get("b") == "B2"
    store.keep("e", "E", 2000, 8000)
    assert list(store) == ["d", "a", "b", "e"] and store.get("c") is None
    store.keep("f", "F", 2001, 8000)  # over a quarter of the budget: not kept, nothing dropped
    assert "f" not in store and len(store) == 4


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool("interpreter")
    yield p
    p.close()


def verify(pool, new_text: str, old_text: str):
    options = VerifyOptions(pool=pool, compile_for_target=False, compile_timeout_s=60, run_timeout_s=60)
    return verify_file(new_text, old_text, "scale_add.py", "h100", options)


def _checker_pid(pool) -> int:
    return pool._workers[0].checker.proc.pid


@pytest.mark.slow
def test_a_second_candidate_reuses_the_checker_and_its_kept_inputs_and_outputs(pool):
    first = verify(pool, BASE, BASE)
    assert first.status == "verified", first.summary
    assert first.raw["runtime"]["isolation"] == "checker process"
    pid = _checker_pid(pool)
    second = verify(pool, MOVED, BASE)
    assert second.status == "verified", second.summary
    assert _checker_pid(pool) == pid  # the same checker process, not a fresh one
    judged = second.raw["runtime"]["judge_s"]
    # Every trial was judged from what the checker kept: no inputs made, no reference or previous version run.
    assert judged["checker_reused"] == judged["trials"] == len(second.raw["trials"])
    assert "checker_inputs" not in judged and "checker_expected" not in judged
    assert all(t.get("expected_reused") == ["old", "reference"] for t in second.raw["trials"])


@pytest.mark.slow
def test_a_changed_previous_version_is_not_served_from_the_cache(pool):
    assert verify(pool, BASE, BASE).status == "verified"
    report = verify(pool, BASE, THRICE)  # 2x + y judged against a previous version computing 3x + y
    assert report.status == "incorrect", report.summary
    judged, trials = report.raw["runtime"]["judge_s"], report.raw["trials"]
    assert judged["checker_expected"] > 0
    # Only a same-storage trial reuses what this job's own fresh trial of its seed computed.
    assert judged.get("checker_reused", 0) == len([t for t in trials if t.get("kind") == "same_storage"])
    assert not any(t.get("expected_reused") for t in trials if t.get("kind") == "fresh")
    assert verify(pool, THRICE, THRICE).status == "verified"
    again = verify(pool, BASE, BASE)  # the first previous version's outputs are still kept, and still right
    assert again.status == "verified" and again.raw["runtime"]["judge_s"].get("checker_reused")


@pytest.mark.slow
def test_legacy_settings_keep_nothing_between_jobs(pool):
    options = VerifyOptions(pool=pool, compile_for_target=False, compile_timeout_s=60, run_timeout_s=60,
                            reuse_results=False)
    verify(pool, BASE, BASE)
    report = verify_file(MOVED, BASE, "scale_add.py", "h100", options)
    assert report.status == "verified", report.summary
    assert "checker_reused" not in report.raw["runtime"]["judge_s"]


def test_the_candidates_outputs_cross_through_a_private_folder_that_goes_with_the_job(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(jobmod, "SHARED_MEMORY", tmp_path)
    monkeypatch.setattr(jobmod, "_stale_transfers_removed", False)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    stale = tmp_path / f"{jobmod.TRANSFER_PREFIX}{ended.stdout.strip()}-abc"  # a killed worker's
    stale.mkdir()
    (stale / "outputs-3-1.pt").write_bytes(b"left behind")
    alive = tmp_path / f"{jobmod.TRANSFER_PREFIX}1-abc"  # pid 1: alive
    alive.mkdir()
    seen = []

    def judge(request):
        path = Path(request["outputs"])
        seen.append((path.parent, oct(path.parent.stat().st_mode & 0o777)))
        sent = torch.load(path, weights_only=True)
        assert torch.equal(sent["got"], 2.0 * sent["args"][0] + sent["args"][1])
        return {"trial": {"ok": True, "checks": {}}, "findings": {}, "judge_id": str(len(seen))}

    options = VerifyOptions(seeds=2, compile_for_target=False)
    from mtmc_lsp.optimizer.verify import build_job, discover_harness

    job = build_job(discover_harness(BASE), BASE, BASE, "interpreter", options)
    runner = jobmod.Job({**job, "side": "candidate"}, lambda message: None, judge)
    runner.device = "cpu"
    result = runner.run()
    assert all(t["ok"] for t in result["trials"]) and len(seen) == 3
    folders = {folder for folder, _ in seen}
    assert len(folders) == 1 and next(iter(folders)).parent == tmp_path  # in shared memory, one per job
    assert {mode for _, mode in seen} == {"0o700"}  # only this user's processes can open it
    assert list(tmp_path.iterdir()) == [alive]  # gone with the job; a dead worker's removed, a live one's kept


TEST_STYLE = '''import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 64),)](x, y, out, x.numel(), BLOCK=64)
    return out


def test_add(device="cpu"):
    x, y = torch.randn(200, device=device), torch.randn(200, device=device)
    return add(x, y)
'''


@pytest.mark.slow
def test_a_later_candidate_of_a_test_style_file_is_judged_from_the_kept_test_results(pool):
    assert verify(pool, TEST_STYLE, TEST_STYLE).status == "verified"
    moved = TEST_STYLE.replace("import torch\n", "# a candidate\nimport torch\n", 1)
    report = verify(pool, moved, TEST_STYLE)
    assert report.status == "verified", report.summary
    assert all(t.get("expected_reused") == ["old"] for t in report.raw["trials"])
    assert report.raw["runtime"]["precision"] == "float32"  # the floor comes back with the kept result
    wrong = moved.replace("tl.load(x_ptr + offs, mask=m) + tl.load", "tl.load(x_ptr + offs, mask=m) - tl.load")
    assert verify(pool, wrong, TEST_STYLE).status == "incorrect"  # a kept result still judges


def test_the_checker_judges_a_trial_while_the_candidate_runs_the_next(monkeypatch):
    """After the first trial (whose verdict decides how the job goes on), each trial's verdict is read only
    when the next trial has run: the checker's work overlaps the candidate's, verdicts stay in order."""
    from mtmc_lsp.optimizer.verify import build_job, discover_harness

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    events: list[tuple] = []
    original_call = jobmod.Job._call

    def recorded_call(self, impl, args, poison):
        events.append(("run", impl.role))
        return original_call(self, impl, args, poison)

    monkeypatch.setattr(jobmod.Job, "_call", recorded_call)

    class Judge:
        def __init__(self):
            self.queue: list[dict] = []

        def send(self, request):
            events.append(("send", request["seed"], request["kind"]))
            self.queue.append({"trial": {"ok": request["seed"] != 2, "checks": {}}, "findings": {},
                               "judge_id": str(len(events))})

        def receive(self):
            events.append(("receive",))
            return self.queue.pop(0)

        def __call__(self, request):
            self.send(request)
            return self.receive()

    job = build_job(discover_harness(BASE), BASE, BASE, "interpreter", VerifyOptions(seeds=3, compile_for_target=False))
    runner = jobmod.Job({**job, "side": "candidate"}, lambda message: None, Judge())
    runner.device = "cpu"
    result = runner.run()
    kinds = [e[0] for e in events]
    assert kinds == ["run", "send", "receive",  # seed 0: waited for
                     "run", "send", "run", "receive", "send", "run", "receive", "send", "run", "receive", "send",
                     "receive"]  # seed 1 fresh, same storage; seed 2 fresh, same storage; the last one settled
    # Each verdict went to its own trial, in order: seed 2's were the failing ones.
    assert [(t["seed"], t["ok"]) for t in result["trials"]] == [(0, True), (1, True), (1, True), (2, False), (2, False)]
    assert not runner.pending


def test_outputs_saved_without_a_crc_read_back_as_the_checker_reads_them(tmp_path):
    """``save_outputs`` skips the archive's CRC32; ``torch.load(weights_only=True)`` reads the file back, also
    memory-mapped as the checker does on a GPU, with non-tensor inputs intact."""
    import torch

    sent = {"got": torch.arange(6.0).reshape(2, 3), "args": [torch.ones(4, dtype=torch.float16), torch.float32,
                                                               ("label", 3), {"k": torch.zeros(2, dtype=torch.int64)}]}
    path = tmp_path / "outputs-0-1.pt"
    jobmod.save_outputs(sent, path)
    for mmap in (False, True):
        back = torch.load(path, weights_only=True, map_location="cpu", mmap=mmap)
        assert torch.equal(back["got"], sent["got"]) and torch.equal(back["args"][0], sent["args"][0])
        assert back["args"][1] is torch.float32 and back["args"][2] == ("label", 3)
        assert torch.equal(back["args"][3]["k"], sent["args"][3]["k"])


AUTOTUNED = '''import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=2), triton.Config({"BLOCK": 64}, num_warps=4)],
                 key=["n"])
@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''


def test_the_previous_versions_autotune_choices_cross_from_the_checker_to_the_candidate(tmp_path, monkeypatch):
    """On a GPU the checker has autotuned the previous version's kernels by the time of the first verdict; the
    candidate's copy of the same text takes those configs (its own objects) instead of benchmarking again."""
    import json

    from mtmc_lsp.optimizer.verify.runtime import launches
    from mtmc_lsp.optimizer.verify.runtime.versions import Version

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    in_checker, in_candidate = (Version("old", AUTOTUNED, tmp_path, tag) for tag in ("checker", "candidate"))
    in_checker.load()
    in_candidate.load()
    tuned = launches._autotuner(in_checker.module.double_kernel)
    tuned.cache[(96, "torch.float32")] = tuned.configs[1]  # what benchmarking picked there
    choices = json.loads(json.dumps(launches.autotune_choices(in_checker.module)))  # through the pipes
    assert list(choices) == ["double_kernel"]
    mine = launches._autotuner(in_candidate.module.double_kernel)
    mine.cache[(48, "torch.float32")] = mine.configs[0]  # a key it tuned itself stays its own
    forged = {"double_kernel": [[[48, "torch.float32"], choices["double_kernel"][0][1]],
                                [[7, "torch.float32"], {**choices["double_kernel"][0][1], "BLOCK": 4096}]]}
    assert launches.adopt_autotune_choices(in_candidate.module, choices) == 1
    assert mine.cache[(96, "torch.float32")] is mine.configs[1]  # one of its own configs, not the checker's object
    assert launches.adopt_autotune_choices(in_candidate.module, forged) == 0  # tuned key; a config it lacks
    assert mine.cache[(48, "torch.float32")] is mine.configs[0] and (7, "torch.float32") not in mine.cache
    assert getattr(mine, "_mtmc_adopted", False)  # nothing compiled ahead for a benchmark that will not run
    in_checker.unload()
    in_candidate.unload()
