"""LLM goals in the MTMC loop: ranked with the rule actions, written by the coder, verified like any step."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from coder_fake_endpoint import SOFTMAX_RETILE, FakeChatEndpoint

from mtmc_lsp.cli import main
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.coder import EndpointChat, LlmCoder
from mtmc_lsp.optimizer.coder.loop import goal_candidates, loop_hooks
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.policy import HeuristicPolicy
from mtmc_lsp.optimizer.search import make_verifier, optimize

EXAMPLES = Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples"
H100 = get_profile("h100")
GOAL = "retile the softmax: BLOCK_SIZE 32 and one warp"


class GoalsFirst(HeuristicPolicy):
    """The heuristic's order with the LLM goals moved to the front (so a one-step loop tries them)."""

    def rank(self, state, candidates):
        ranked = super().rank(state, candidates)
        return sorted(ranked, key=lambda r: r.candidate.action != "llm")


def test_each_goal_becomes_one_candidate_for_the_kernel():
    analysis = analyze((EXAMPLES / "softmax.py").read_text())
    found = goal_candidates(analysis, "softmax_kernel", [GOAL, f"  {GOAL} ", "", "use two warps"])
    assert [c.params["goal"] for c in found] == [GOAL, "use two warps"]
    assert [c.kind for c in found] == ["Tiling", "Warps"] and all(c.action == "llm" for c in found)
    assert goal_candidates(analysis, "no_such_kernel", [GOAL]) == []


@pytest.fixture
def chat_server():
    with FakeChatEndpoint() as server:
        yield server


def optimize_softmax(tmp_path, url, tries=1):
    path = tmp_path / "softmax.py"
    shutil.copy(EXAMPLES / "softmax.py", path)
    text = path.read_text()
    hooks = loop_hooks(LlmCoder(EndpointChat(url)), [GOAL], file_name=path.name)
    return text, optimize(text, str(path), "softmax_kernel", H100, GoalsFirst(), make_verifier(str(path), H100),
                          steps=1, tries=tries, **hooks)


@pytest.mark.slow
def test_the_loop_keeps_a_verified_llm_step(tmp_path, chat_server):
    chat_server.answers = [SOFTMAX_RETILE]
    text, result = optimize_softmax(tmp_path, chat_server.url)
    assert len(chat_server.requests) == 1 and GOAL in str(chat_server.requests[0][1]["messages"])
    (step,) = result.steps
    assert step.candidate.action == "llm" and step.correct and step.status == "kept"
    assert "BLOCK_SIZE = 32" in result.final_text and "num_warps=1" in result.final_text and result.final_text != text


@pytest.mark.slow
def test_a_refused_answer_lets_the_next_candidate_try(tmp_path, chat_server):
    chat_server.answers = ["I would make the block smaller, but here is no diff."]
    text, result = optimize_softmax(tmp_path, chat_server.url, tries=2)
    first, second = result.attempts[:2]
    assert first.candidate.action == "llm" and first.status == "not_applied"
    assert "LLM coder's answer was refused" in first.reason and "no unified diff" in first.reason
    assert second.candidate.action != "llm" and second.compiled is not None  # a rule action was verified next


def test_coder_options_without_a_goal_are_refused(capsys):
    softmax = str(EXAMPLES / "softmax.py")
    assert main(["optimize", softmax, "--coder-endpoint", "http://127.0.0.1:9/v1"]) == 2
    assert "only work with --llm-goal" in capsys.readouterr().err
    assert main(["optimize", softmax, "--llm-goal", GOAL, "--coder-endpoint", "http://x/v1",
                 "--coder-model-path", "m.gguf"]) == 2
    assert "choose one coder model" in capsys.readouterr().err
