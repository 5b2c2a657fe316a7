"""The candidate runs where it cannot reach the checker: its outputs are judged in another process.

An isolated job (a previous version or a problem file to judge by) runs the new version in the
candidate worker, which holds no expected output and compares nothing; the checker worker regenerates
the inputs, runs the reference and the previous version, and compares; the pool believes only the
checker's verdicts. The planted faults below beat a verifier that judges in the candidate's process
(they patch its comparison module, read its kept outputs, or forge its trial results); here each is
incorrect. The unit tests pin the pool's rules for what the candidate may claim.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.verify import VerifyOptions, WorkerPool, verify_file
from mtmc_lsp.optimizer.verify.pool import Worker, _Relay, judged_result

FAULTS = Path(__file__).resolve().parent / "corpus" / "faults"
BASE = (FAULTS / "base.py").read_text()


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool("interpreter")
    yield p
    p.close()


def verify(pool, name: str, old_text: str | None = BASE):
    options = VerifyOptions(pool=pool, compile_for_target=False, compile_timeout_s=60, run_timeout_s=60)
    return verify_file((FAULTS / f"{name}.py").read_text(), old_text, f"{name}.py", "h100", options)


@pytest.mark.slow
@pytest.mark.parametrize("name, named", [
    ("patch_checker_module", "from the reference"),  # 3x + y judged as it is, whatever it patched at home
    ("sealed_kept", "from the reference"),  # nothing kept in its process: it finds no answer, returns zeros
    ("forge_verdict", "never reached the checker"),  # its own claim of passing is not believed
])
def test_an_attack_from_the_candidates_process_cannot_change_the_verdict(pool, name, named):
    assert verify(pool, "base").status == "verified"  # expected outputs kept from an earlier job
    report = verify(pool, name)
    assert report.status == "incorrect", report.summary
    assert named in report.summary + json.dumps(report.to_json()["checks"]), report.summary
    assert report.raw["runtime"]["isolation"] == "checker process"
    assert verify(pool, "base").status == "verified"  # a patched worker was replaced, the next job is judged


@pytest.mark.slow
def test_without_anything_to_judge_by_the_job_says_it_judged_itself(pool):
    report = verify(pool, "base", old_text=None)  # its own reference(): nothing outside its file
    assert report.status == "verified"
    assert report.raw["runtime"]["isolation"].startswith("none")


# -- the pool's rules, without workers -------------------------------------------------------------

JOB = {"harness": {"style": "function"}, "seeds": [0, 1], "new_text": "print('candidate')", "old_text": "old"}


class _FakeChecker:
    def log_tail(self) -> str:
        return ""


def _relay(verdicts: dict) -> _Relay:
    relay = _Relay(_FakeChecker(), JOB)
    relay.verdicts = verdicts
    return relay


def _verdict(seed: int, ok: bool, kind: str = "fresh") -> dict:
    check = {"ok": ok, "max_abs": 0.0 if ok else 1.0, "max_rel": 0.0, "mismatch": None if ok else {"index": [0]}}
    return {"request": {"seed": seed, "kind": kind}, "trial": {"ok": ok, "checks": {"reference": check}}}


def _result(*trials: dict) -> dict:
    return {"compile": {"new": {"ok": True}}, "runtime": {}, "trials": list(trials)}


def test_the_checker_never_receives_the_new_version():
    assert "new_text" not in _Relay(_FakeChecker(), JOB).job


def test_judged_trials_take_the_checkers_verdict_not_the_candidates_claim():
    relay = _relay({"a": _verdict(0, True), "b": _verdict(1, False)})
    claimed = _result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a", "checks": {}},
                      {"seed": 1, "kind": "fresh", "ok": True, "judge_id": "b",
                       "checks": {"reference": {"ok": True}}})
    trials = judged_result(claimed, relay, JOB)["trials"]
    assert [t["ok"] for t in trials] == [True, False]
    assert trials[1]["checks"]["reference"]["ok"] is False
    assert claimed["runtime"]["isolation"] == "checker process"


def test_a_trial_the_checker_never_saw_fails():
    relay = _relay({"a": _verdict(0, True)})
    result = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"},
                                   {"seed": 1, "kind": "fresh", "ok": True, "checks": {"reference": {"ok": True}}}),
                           relay, JOB)
    assert result["trials"][1]["ok"] is False and result["trials"][1]["error"]["type"] == "NotJudged"


def test_one_verdict_cannot_vouch_for_two_trials():
    relay = _relay({"a": _verdict(0, True)})
    result = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"},
                                   {"seed": 1, "kind": "fresh", "ok": True, "judge_id": "a"}), relay, JOB)
    assert [t["ok"] for t in result["trials"]] == [True, False]


def test_a_failing_verdict_left_out_of_the_result_is_added_back():
    relay = _relay({"a": _verdict(0, True), "b": _verdict(1, True), "c": _verdict(1, False, "same_storage")})
    result = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"},
                                   {"seed": 1, "kind": "fresh", "ok": True, "judge_id": "b"}), relay, JOB)
    assert not all(t["ok"] for t in result["trials"])
    assert result["trials"][-1]["kind"] == "same_storage"


def test_a_candidate_claiming_more_than_the_checker_said_is_marked_for_replacement():
    relay = _relay({"a": _verdict(0, True), "b": _verdict(1, False)})
    honest = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"},
                                   {"seed": 1, "kind": "fresh", "ok": False, "judge_id": "b"}), relay, JOB)
    assert "candidate_misreported" not in honest["runtime"]
    relay = _relay({"a": _verdict(0, True), "b": _verdict(1, False)})
    lying = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"},
                                  {"seed": 1, "kind": "fresh", "ok": True, "judge_id": "b"}), relay, JOB)
    assert lying["runtime"]["candidate_misreported"] is True


def test_the_worker_notices_its_verifier_code_was_changed():
    from mtmc_lsp.optimizer.verify.runtime import compare, tamper

    tamper.snapshot_runtime()
    assert tamper.runtime_intact()
    original = compare.compare
    compare.compare = lambda *a, **k: {"ok": True}
    try:
        assert not tamper.runtime_intact()
    finally:
        compare.compare = original
    code = compare.nonfinite.__code__
    compare.nonfinite.__code__ = (lambda value: None).__code__
    try:
        assert not tamper.runtime_intact()
    finally:
        compare.nonfinite.__code__ = code
    assert tamper.runtime_intact()


def test_every_seed_must_be_judged():
    relay = _relay({"a": _verdict(0, True)})
    result = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"}), relay, JOB)
    assert not all(t["ok"] for t in result["trials"])
    assert "seed 1" in result["trials"][-1]["error"]["message"]


def test_a_self_judged_job_keeps_its_own_trials_and_says_so():
    relay = _relay({})
    relay.self_judged = "the inputs come only from the candidate's own file"
    result = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "checks": {"reference": {"ok": True}}}),
                           relay, JOB)
    assert result["trials"][0]["ok"] is True
    assert result["runtime"]["isolation"].startswith("none: the inputs")


def test_only_lines_the_checker_signed_are_read_from_its_pipe():
    checker = Worker(None, role="checker")
    checker._key = os.urandom(32)
    read, write = os.pipe()
    checker._res_r = read
    try:
        body = json.dumps({"event": "verdict", "rid": "x", "trial": {"ok": True}})
        forged = json.dumps({"mac": "0" * 64, "body": body})
        os.write(write, (forged + "\n").encode())
        message, status = checker._next_message(float("inf"), lambda: False)
        assert message is None and "did not sign" in status
        mac = hmac.new(checker._key, body.encode(), hashlib.sha256).hexdigest()
        os.write(write, (json.dumps({"mac": mac, "body": body}) + "\n").encode())
        message, status = checker._next_message(float("inf"), lambda: False)
        assert status is None and message["trial"] == {"ok": True}
    finally:
        os.close(read)
        os.close(write)
        checker.close()
