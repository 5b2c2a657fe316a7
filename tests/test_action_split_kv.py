"""split_kv (flash decoding): where it is offered, why it is refused, and that the split kernels compute the same."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.actions import _common as c
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus.kernels import kernel_path  # noqa: E402
from test_actions_semantics import job, run_jobs  # noqa: E402

H100 = get_profile("h100")
SPLIT = ACTIONS["split_kv"]
DOC = sys.modules[type(SPLIT).__module__].__doc__
PRELUDE = "import torch\nimport triton\nimport triton.language as tl\n\n\n"
BEFORE = PRELUDE + re.search(r"```python before\n(.*?)```", DOC, re.S).group(1)
HARNESS = '''

ENTRY = "decode"


def get_inputs(device: str = "cpu", heads: int = 3, n_keys: int = 150, d: int = 16):
    return [torch.randn(heads, d, device=device), torch.randn(heads, n_keys, d, device=device),
            torch.randn(heads, n_keys, d, device=device)]


def reference(q, k, v):
    s = (k @ q[:, :, None]).squeeze(-1) * q.shape[-1] ** -0.5
    return (torch.softmax(s, -1)[:, None, :] @ v).squeeze(1)
'''


def why_refused(text: str, kernel: str = "decode_kernel") -> str:
    analysis = analyze(text)
    with pytest.raises(ActionError) as caught:
        SPLIT._plan(c.parse(text), analysis, analysis.kernel(kernel))
    return str(caught.value)


def test_offered_on_decode_loops_and_the_merge_uses_the_loops_exponential():
    offered = [cand.params for cand in applicable(analyze(BEFORE), "decode_kernel", H100) if cand.action == "split_kv"]
    assert offered == [{"NUM_SPLITS": 8}, {"NUM_SPLITS": 4}, {"NUM_SPLITS": 16}]
    corpus = kernel_path("decode_attention").read_text()  # a (sequence, head) grid, base-2 softmax, lse stored
    cand = next(cand for cand in applicable(analyze(corpus), "decode_kernel", H100) if cand.action == "split_kv")
    after = apply_candidate(corpus, cand, H100).new_text
    assert "weight = tl.exp2(" in after and "split = tl.program_id(2)" in after
    assert "(tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * NUM_SPLITS" in after
    assert "decode_kernel[(seqs, heads, 8)](" in after and "decode_kernel_merge[(seqs, heads)](" in after
    assert "tl.store(lse_ptr + row, m_i + tl.log2(l_i))" in after  # the epilogue runs on the merged state


@pytest.mark.parametrize("change, why", [
    (("        m_i = m_new\n", "        m_i = m_new\n        q += 1.0\n"), "the loop carries 4 values"),
    (("        m_i = m_new\n", "        m_i = m_new\n        tl.store(out_ptr + head, m_i)\n"), "stored before or inside"),
    (("tl.exp(s - m_new)", "tl.exp2(s - m_new)"), "neither or both"),
    (("    acc = tl.zeros([D], dtype=tl.float32)\n", "    acc = tl.zeros([D], dtype=tl.float32) + 1.0\n"),
     "not a -inf maximum"),
    (("    tl.store(out_ptr + head * D + offs_d, acc / l_i)", "    tl.store(out_ptr + head * D + offs_d, acc / l_i + p[0])"),
     "last iteration"),
    (("    decode_kernel[(heads,)](", "    return decode_kernel[(heads,)]("), "statement of its own"),
    (("decode_kernel[(heads,)]", "decode_kernel[lambda META: (heads,)]"), "not a tuple"),
])
def test_refused_with_a_reason(change, why):
    text = BEFORE.replace(*change)
    assert text != BEFORE
    assert why in why_refused(text)


def test_split_kv_stays_equivalent(tmp_path):
    text = BEFORE + HARNESS
    tol = (2e-3, 2e-3)
    jobs = []
    for cand in applicable(analyze(text), "decode_kernel", H100):
        if cand.action == "split_kv" and cand.params["NUM_SPLITS"] in (4, 16):  # 16 splits leave some empty
            jobs.append(job(tmp_path, f"doc:{cand.key()}", text, apply_candidate(text, cand, H100).new_text, tol))
    short = text.replace("n_keys: int = 150", "n_keys: int = 5")  # one block: every split but the first is empty
    cand = next(cand for cand in applicable(analyze(short), "decode_kernel", H100) if cand.action == "split_kv")
    jobs.append(job(tmp_path, "short:split_kv", short, apply_candidate(short, cand, H100).new_text, tol))
    corpus = kernel_path("decode_attention").read_text()
    cand = next(cand for cand in applicable(analyze(corpus), "decode_kernel", H100) if cand.action == "split_kv")
    jobs.append(job(tmp_path, "corpus:split_kv", corpus, apply_candidate(corpus, cand, H100).new_text, (1e-2, 1e-2)))
    results = run_jobs(jobs, tmp_path)
    assert len(results) == 4 and all(r["ok"] for r in results), [r for r in results if not r["ok"]]
