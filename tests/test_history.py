"""Step history: persisted under .mtmc/history, accept, reject with a 3-way revert, explanations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.history import HistoryError, StepHistory

ROOT = Path(__file__).resolve().parents[1]
TARGET = get_profile("h100")


def step(text: str, kernel: str, action: str, params: dict | None = None):
    cands = [c for c in applicable(analyze(text), kernel, TARGET) if c.action == action]
    cand = next(c for c in cands if params is None or c.params == params)
    return cand, apply_candidate(text, cand, TARGET).new_text


@pytest.fixture
def matmul_doc(tmp_path):
    doc = tmp_path / "kernels" / "matmul.py"
    doc.parent.mkdir()
    doc.write_text((ROOT / "mtmc_lsp" / "examples" / "matmul.py").read_text())
    return tmp_path, doc


def test_steps_survive_a_restart(matmul_doc):
    root, doc = matmul_doc
    text = doc.read_text()
    cand, after = step(text, "matmul_kernel", "tiling")
    history = StepHistory(root, doc)
    recorded = history.record(cand, text, after, "tiling")
    history.set_verification(recorded.id, {"status": "verified", "speedup": 1.5})
    files = list((root / ".mtmc" / "history").glob("*.json"))
    assert len(files) == 1 and "kernels__matmul.py" in files[0].name
    again = StepHistory(root, "kernels/matmul.py")  # relative path: the same document
    (loaded,) = again.steps()
    assert (loaded.id, loaded.index, loaded.status, loaded.kernel) == (recorded.id, 1, "applied", "matmul_kernel")
    assert loaded.candidate == cand and loaded.text_before == text and loaded.text_after == after
    assert loaded.verification == {"status": "verified", "speedup": 1.5}
    assert again.accept(loaded.id).status == "accepted"
    assert StepHistory(root, doc).steps()[0].status == "accepted"
    assert "accepted" in StepHistory(root, doc).show()


def test_reject_the_only_step_restores_the_text_byte_for_byte(matmul_doc):
    root, doc = matmul_doc
    text = doc.read_text()
    cand, after = step(text, "matmul_kernel", "reordering")
    history = StepHistory(root, doc)
    s = history.record(cand, text, after)
    assert history.reject(s.id, after) == text
    assert StepHistory(root, doc).get(s.id).status == "rejected"
    with pytest.raises(HistoryError, match="already rejected"):
        history.reject(s.id, text)


def test_reject_a_middle_step_keeps_later_steps(matmul_doc):
    root, doc = matmul_doc
    t0 = doc.read_text()
    c1, t1 = step(t0, "matmul_kernel", "tiling", {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64})
    c2, t2 = step(t1, "matmul_kernel", "reordering", {"GROUP_M": 8})
    c3, t3 = step(t2, "matmul_kernel", "pipelining", {"num_stages": 3})
    history = StepHistory(root, doc)
    s1, s2, s3 = (history.record(c, b, a) for c, b, a in ((c1, t0, t1), (c2, t1, t2), (c3, t2, t3)))
    reverted = history.reject(s2.id, t3)
    # Exactly step 2 is gone: the tiling and the stages stay, the grouped order is undone.
    assert "GROUP_M" not in reverted and "BLOCK_M = 64" in reverted and "num_stages=3" in reverted
    assert reverted == step(t1, "matmul_kernel", "pipelining", {"num_stages": 3})[1]
    # Then step 1 too; then step 3: back to the original text.
    reverted = history.reject(s1.id, reverted)
    assert "BLOCK_M = 32" in reverted and "num_stages=3" in reverted
    assert history.reject(s3.id, reverted) == t0


def test_reject_explains_when_a_later_step_rewrote_its_lines(matmul_doc):
    root, doc = matmul_doc
    t0 = doc.read_text()
    c1, t1 = step(t0, "matmul_kernel", "tiling", {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64})
    c2, t2 = step(t1, "matmul_kernel", "warps", {"num_warps": 8})
    c3, t3 = step(t2, "matmul_kernel", "tiling", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64})
    history = StepHistory(root, doc)
    s1 = history.record(c1, t0, t1)
    history.record(c2, t1, t2)
    history.record(c3, t2, t3)
    with pytest.raises(HistoryError, match=r"cannot revert step 1 .*changed by step 3"):
        history.reject(s1.id, t3)
    assert history.get(s1.id).status == "applied"  # nothing changed


def test_unreadable_history_is_set_aside(matmul_doc):
    root, doc = matmul_doc
    history = StepHistory(root, doc)
    history.path.parent.mkdir(parents=True)
    history.path.write_text("{not json")
    with pytest.raises(HistoryError, match="unreadable"):
        StepHistory(root, doc)
    assert not history.path.exists() and list(history.path.parent.glob("*.broken-*.json"))
    assert StepHistory(root, doc).steps() == []


def test_history_json_shape(matmul_doc):
    root, doc = matmul_doc
    text = doc.read_text()
    cand, after = step(text, "matmul_kernel", "tiling")
    StepHistory(root, doc).record(cand, text, after)
    data = json.loads(next((root / ".mtmc" / "history").glob("*.json")).read_text())
    (s,) = data["steps"]
    assert {"id", "index", "kernel", "candidate", "textBefore", "textAfter", "status", "verification",
            "created", "updated", "changedLines"} <= set(s)
    assert s["changedLines"] == 4  # BLOCK_M/N/K and num_warps at the launch


def test_three_way_revert_units():
    from mtmc_lsp.optimizer.edits import three_way_revert

    before = "a = 1\nb = 2\nc = 3\n"
    after = "a = 1\nb = 20\nc = 3\n"
    # Unchanged since: exact inverse.
    assert three_way_revert(before, after, after) == (before, "reverted")
    # A later edit elsewhere (line added at the top, line changed at the end) is kept.
    current = "import x\na = 1\nb = 20\nc = 30\n"
    assert three_way_revert(before, after, current)[0] == "import x\na = 1\nb = 2\nc = 30\n"
    # A later edit of the same value: refused with the reason.
    text, reason = three_way_revert(before, after, "a = 1\nb = 200\nc = 3\n")
    assert text is None and "changed since" in reason
    # A step that deleted a line: the line comes back at its place.
    deleted = "a = 1\nc = 3\n"
    assert three_way_revert(before, deleted, "a = 1\nc = 3\nd = 4\n")[0] == "a = 1\nb = 2\nc = 3\nd = 4\n"
    # Same line, different tokens: the token-level retry keeps the later change.
    step_before, step_after = "f(x, s=1)\n", "f(x, s=1, g=8)\n"
    assert three_way_revert(step_before, step_after, "f(x, s=3, g=8)\n")[0] == "f(x, s=3)\n"
