"""The endpoint policy against a real local HTTP server that speaks the OpenAI completions/chat APIs."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions.base import Candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.policy import HeuristicPolicy, PolicyState, make_policy
from mtmc_lsp.optimizer.policy.endpoint import EndpointPolicy
from mtmc_lsp.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples"


def tokens_with_offsets(text: str):
    return [(m.group(0), m.start()) for m in re.finditer(r"\w+|[^\w\s]|\s+", text)]


def fake_logprob(token: str) -> float:
    """The fake model likes 'pipelining' and the digit 4, dislikes everything else a little."""
    if token == "pipelining":
        return -0.05
    if token == "4":
        return -0.2
    return -1.0


class FakeOpenAI(BaseHTTPRequestHandler):
    requests: list = []
    completions_enabled = True

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body, self.headers.get("Authorization")))
        if self.path == "/v1/completions" and type(self).completions_enabled:
            assert body["echo"] is True and body["logprobs"] >= 1
            choices = []
            for i, prompt in enumerate(body["prompt"]):
                toks = tokens_with_offsets(prompt) + [("<gen>", len(prompt))]
                choices.append({"index": i, "text": prompt + "<gen>", "logprobs": {
                    "tokens": [t for t, _ in toks], "text_offset": [o for _, o in toks],
                    # The first prompt token has no log-probability (null), as real servers answer.
                    "token_logprobs": [None] + [fake_logprob(t) for t, _ in toks[1:-1]] + [-9.0],
                }})
            self._reply(200, {"object": "text_completion", "choices": choices})
        elif self.path == "/v1/chat/completions":
            user = body["messages"][-1]["content"]
            numbers = re.findall(r"^(\d+)\. (.*)$", user, re.M)
            wanted = next(n for n, text in numbers if text.startswith("warps"))
            top = [{"token": wanted, "logprob": -0.1}, {"token": "1", "logprob": -2.5}, {"token": "Sure", "logprob": -3.0}]
            self._reply(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": wanted},
                                           "logprobs": {"content": [{"token": wanted, "logprob": -0.1, "top_logprobs": top}]}}]})
        else:
            self._reply(404, {"error": {"message": "not found"}})

    def _reply(self, code, data):
        raw = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def server():
    FakeOpenAI.requests = []
    FakeOpenAI.completions_enabled = True
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def matmul_state():
    analysis = analyze((EXAMPLES / "matmul.py").read_text())
    return PolicyState(analysis, analysis.kernel("matmul_kernel"), get_profile("h100"))


CANDIDATES = [
    Candidate("tiling", "Tiling", "matmul_kernel", {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, "t", 8),
    Candidate("warps", "Warps", "matmul_kernel", {"num_warps": 8}, "w", 8),
    Candidate("pipelining", "Pipelining", "matmul_kernel", {"num_stages": 3}, "p3", 8),
    Candidate("pipelining", "Pipelining", "matmul_kernel", {"num_stages": 4}, "p4", 8),
]


def test_completions_echo_logprobs_rank_candidates(server):
    policy = make_policy(Settings(policy="endpoint", policy_endpoint=server, policy_endpoint_model="fake-1"))
    assert isinstance(policy, EndpointPolicy)
    ranked = policy.rank(matmul_state(), CANDIDATES)
    assert [r.candidate.params for r in ranked[:2]] == [{"num_stages": 4}, {"num_stages": 3}]
    assert all(r.metadata["api"] == "completions" for r in ranked)
    assert abs(sum(r.score for r in ranked) - 1.0) < 1e-9
    path, body, _ = FakeOpenAI.requests[-1]
    assert path == "/v1/completions" and body["model"] == "fake-1" and len(body["prompt"]) == 4
    assert "H100" in body["prompt"][0] and body["prompt"][2].endswith("\npipelining(num_stages=3)")
    # The candidate's own tokens only: the prompt and the generated token are not counted.
    pipelining4 = next(r for r in ranked if r.candidate.params == {"num_stages": 4})
    expected = sum(fake_logprob(t) for t, _ in tokens_with_offsets("pipelining(num_stages=4)"))
    assert pipelining4.logprob == pytest.approx(expected)


def test_chat_fallback_uses_top_logprobs_of_the_number(server):
    FakeOpenAI.completions_enabled = False
    policy = EndpointPolicy(server, model="fake-chat", api_key="secret")
    ranked = policy.rank(matmul_state(), CANDIDATES)
    assert ranked[0].candidate.action == "warps"
    assert ranked[0].metadata["api"] == "chat"
    assert ranked[1].candidate.action == "tiling"  # "1" had the second-best log-probability
    assert ranked[-1].score == 0.0 and ranked[-1].logprob is None
    paths = [p for p, _, _ in FakeOpenAI.requests]
    assert paths == ["/v1/completions", "/v1/chat/completions"]
    assert FakeOpenAI.requests[-1][2] == "Bearer secret"
    policy.rank(matmul_state(), CANDIDATES)  # remembers that completions is refused
    assert [p for p, _, _ in FakeOpenAI.requests][-1] == "/v1/chat/completions" and len(FakeOpenAI.requests) == 3


def test_unreachable_endpoint_falls_back_to_the_heuristic():
    policy = EndpointPolicy("http://127.0.0.1:9/v1", timeout_s=2)
    ranked = policy.rank(matmul_state(), CANDIDATES)
    assert len(ranked) == len(CANDIDATES)
    assert "failed" in ranked[0].metadata["fallback"]
    assert [r.candidate for r in ranked] == [r.candidate for r in HeuristicPolicy().rank(matmul_state(), CANDIDATES)]
