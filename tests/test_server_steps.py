"""StepStore: proposals recorded by the command or by the document change, once; bounded memory."""

from __future__ import annotations

from pathlib import Path

from mtmc_lsp.optimizer.actions import Candidate, Edit
from mtmc_lsp.server.steps import MAX_PROPOSALS, StepStore


def _store(tmp_path: Path) -> StepStore:
    return StepStore(lambda uri: (tmp_path, tmp_path / "k.py"))


def _candidate() -> Candidate:
    return Candidate(action="fix-mtmc105", kind="Fix", kernel="k", params={"num_warps": 4}, title="Use num_warps=4",
                     line=0)


def _propose(store: StepStore, before: str, after: str, on_change: bool = True):
    return store.propose("file:///k.py", 1, _candidate(), before, Edit(after, 1, "fix"), record_on_change=on_change)


def test_change_records_the_newest_matching_proposal_once_and_the_command_finds_it(tmp_path):
    store = _store(tmp_path)
    first, second = _propose(store, "a = 1\n", "a = 2\n"), _propose(store, "a = 1\n", "a = 2\n")
    server_applied = _propose(store, "a = 1\n", "a = 2\n", on_change=False)
    other = _propose(store, "a = 1\n", "a = 3\n")
    assert store.record_changed("file:///k.py", "a = 9\n") is None
    step = store.record_changed("file:///k.py", "a = 2\n")
    assert step is not None and len(store.steps("file:///k.py")) == 1
    assert store.record_changed("file:///k.py", "a = 2\n") is None  # nothing left to record
    for token in (first.token, second.token):
        again, reason = store.record(token, "a = 2\n")
        assert again.id == step.id and reason == "already recorded"
    # A server-applied proposal is recorded by its own flow, not by the change.
    recorded, reason = store.record(server_applied.token, "a = 2\n")
    assert reason == "applied" and recorded.id != step.id
    assert store.record(other.token, "a = 2\n") == (None, "the document does not hold the step's edit (declined or partly applied)")


def test_proposals_are_bounded(tmp_path):
    store = _store(tmp_path)
    tokens = [_propose(store, "a = 1\n", f"a = {i + 2}\n").token for i in range(MAX_PROPOSALS + 10)]
    assert store.record(tokens[0], "a = 2\n") == (None, "unknown or expired step")
    step, reason = store.record(tokens[-1], f"a = {MAX_PROPOSALS + 11}\n")
    assert step is not None and reason == "applied"
