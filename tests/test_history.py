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
    # Without the example's num_stages=1 pin, tiling leaves the stages to the pipelining step (three separate edits).
    doc.write_text(doc.read_text().replace(" num_stages=1,", ""))
    t0 = doc.read_text()
    c1, t1 = step(t0, "matmul_kernel", "tiling", {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64})
    c2, t2 = step(t1, "matmul_kernel", "reordering", {"GROUP_M": 8})
    c3, t3 = step(t2, "matmul_kernel", "pipelining", {"num_stages": 4})
    history = StepHistory(root, doc)
    s1, s2, s3 = (history.record(c, b, a) for c, b, a in ((c1, t0, t1), (c2, t1, t2), (c3, t2, t3)))
    reverted = history.reject(s2.id, t3)
    # Exactly step 2 is gone: the tiling and the stages stay, the grouped order is undone.
    assert "GROUP_M" not in reverted and "BLOCK_M = 64" in reverted and "num_stages=4" in reverted
    assert reverted == step(t1, "matmul_kernel", "pipelining", {"num_stages": 4})[1]
    # Then step 1 too; then step 3: back to the original text.
    reverted = history.reject(s1.id, reverted)
    assert "BLOCK_M = 32" in reverted and "num_stages=4" in reverted
    assert history.reject(s3.id, reverted) == t0


def test_reject_explains_when_a_later_step_rewrote_its_lines(matmul_doc):
    root, doc = matmul_doc
    t0 = doc.read_text()
    c1, t1 = step(t0, "matmul_kernel", "tiling", {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 3})
    c2, t2 = step(t1, "matmul_kernel", "warps", {"num_warps": 8})
    c3, t3 = step(t2, "matmul_kernel", "tiling", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64})
    history = StepHistory(root, doc)
    s1 = history.record(c1, t0, t1)
    history.record(c2, t1, t2)
    history.record(c3, t2, t3)
    with pytest.raises(HistoryError, match=r"cannot revert step 1 .*changed by step 3"):
        history.reject(s1.id, t3)
    assert history.get(s1.id).status == "applied"  # nothing changed


CORRUPTIONS = {
    "not json": "{not json",
    "a json array": "[1, 2, 3]",
    "nested 100,000 deep": "[" * 100_000 + "]" * 100_000,
    "steps not a list": '{"steps": 7}',
    "a step of the wrong shape": '{"steps": [{"id": 1}]}',
    "steps holding strings": '{"steps": ["x"]}',
    "invalid utf-8": b"\xff\xfe{".decode("latin-1"),
}


@pytest.mark.parametrize("content", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_any_corrupted_history_is_set_aside_and_reported(matmul_doc, content):
    root, doc = matmul_doc
    history = StepHistory(root, doc)
    history.path.parent.mkdir(parents=True)
    history.path.write_bytes(content.encode("latin-1"))
    damaged = StepHistory(root, doc)
    assert damaged.steps() == [] and "unreadable" in damaged.problem and "moved to" in damaged.problem
    (broken,) = history.path.parent.glob("*.broken-*.json")
    assert broken.read_bytes() == content.encode("latin-1")  # kept for the user, byte for byte
    # The document's history works again at once: record, reload.
    text = doc.read_text()
    cand, after = step(text, "matmul_kernel", "reordering")
    damaged.record(cand, text, after)
    again = StepHistory(root, doc)
    assert again.problem is None and len(again.steps()) == 1


def test_a_symlinked_history_file_is_not_followed(matmul_doc, tmp_path_factory):
    root, doc = matmul_doc
    outside = tmp_path_factory.mktemp("outside") / "secret.json"
    outside.write_text('{"steps": []}')
    history = StepHistory(root, doc)
    history.path.parent.mkdir(parents=True)
    history.path.symlink_to(outside)
    linked = StepHistory(root, doc)
    assert "symlink" in linked.problem
    text = doc.read_text()
    cand, after = step(text, "matmul_kernel", "reordering")
    linked.record(cand, text, after)
    assert outside.read_text() == '{"steps": []}' and not history.path.is_symlink()


def test_a_mtmc_symlink_out_of_the_workspace_keeps_history_in_memory(matmul_doc, tmp_path_factory):
    root, doc = matmul_doc
    outside = tmp_path_factory.mktemp("elsewhere")
    (root / ".mtmc").symlink_to(outside, target_is_directory=True)
    history = StepHistory(root, doc)
    assert not history.persistent and "leads out of the workspace" in history.problem
    text = doc.read_text()
    cand, after = step(text, "matmul_kernel", "reordering")
    recorded = history.record(cand, text, after)
    assert history.get(recorded.id).text_after == after
    assert list(outside.rglob("*")) == []


def test_a_mtmc_symlink_inside_the_workspace_is_fine(matmul_doc):
    root, doc = matmul_doc
    (root / "state").mkdir()
    (root / ".mtmc").symlink_to(root / "state", target_is_directory=True)
    history = StepHistory(root, doc)
    text = doc.read_text()
    cand, after = step(text, "matmul_kernel", "reordering")
    history.record(cand, text, after)
    assert history.persistent and list((root / "state" / "history").glob("*.json"))


def test_in_memory_history_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "mtmc_lsp" / "examples" / "matmul.py").read_text()
    history = StepHistory(None, "Untitled-1")
    cand, after = step(text, "matmul_kernel", "reordering")
    recorded = history.record(cand, text, after)
    history.set_verification(recorded.id, {"status": "verified"})
    assert history.reject(recorded.id, after) == text
    assert list(tmp_path.rglob("*")) == []


_WRITER = """
import sys
from mtmc_lsp.optimizer.actions.base import Candidate
from mtmc_lsp.optimizer.history import StepHistory
history = StepHistory(sys.argv[1], sys.argv[2])
cand = Candidate("tiling", "tiling", "k", {"BLOCK": 64}, "Apply tiling", 0)
big = ("y = '" + "z" * 2000 + "'\\n") * 100  # 200 KB per text: kills land mid-write
start = len(history.steps())
print("ready", flush=True)
for i in range(start, start + 10_000):
    history.record(cand, big + f"# {i}\\n", big + f"# {i + 1}\\n")
"""


def test_history_survives_a_kill_at_any_point(tmp_path):
    """SIGKILL a process saving its history over and over at random moments: the file always loads."""
    import random
    import subprocess
    import sys
    import time

    doc = tmp_path / "k.py"
    doc.write_text("x = 1\n")
    rng = random.Random(16)
    counts = []
    for _ in range(6):
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), str(doc)], stdout=subprocess.PIPE,
                                  text=True, cwd=ROOT)
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.1, 0.8))
        writer.kill()
        writer.wait()
        history = StepHistory(tmp_path, doc)
        assert history.problem is None
        steps = history.steps()
        assert [s.index for s in steps] == list(range(1, len(steps) + 1))
        assert all(s.text_after.endswith(f"# {s.index}\n") for s in steps)
        counts.append(len(steps))
    assert counts == sorted(counts) and counts[-1] > counts[0]  # every kill kept all earlier steps


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
