"""Fusion removes the consumer's definition once nothing in the file refers to it, and keeps it otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.history import StepHistory

ROOT = Path(__file__).resolve().parents[1]
GELU_BIAS = (ROOT / "mtmc_lsp" / "examples" / "gelu_bias.py").read_text()
H100 = get_profile("h100")
CONSUMER_DEF = "def gelu_kernel(y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):"


def fuse(text: str):
    """Apply fusion of gelu_kernel into scale_bias_kernel to ``text``."""
    (candidate,) = [c for c in applicable(analyze(text), "scale_bias_kernel", H100) if c.action == "fusion"]
    assert candidate.params == {"consumer": "gelu_kernel"}
    return candidate, apply_candidate(text, candidate, H100)


def test_an_unreferenced_consumer_is_removed_with_its_decorator():
    assert GELU_BIAS.count("@triton.jit") == 2 and CONSUMER_DEF in GELU_BIAS
    _candidate, edit = fuse(GELU_BIAS)
    assert "gelu_kernel" not in edit.new_text
    assert edit.new_text.count("@triton.jit") == 1  # the consumer's decorator went with it
    assert [k.name for k in analyze(edit.new_text).kernels] == ["scale_bias_kernel"]
    assert "\n\n\n\n" not in edit.new_text  # no blank lines piled up where the definition was
    assert any("definition is removed" in note for note in edit.notes)


def test_a_comment_naming_the_consumer_is_not_a_reference():
    text = GELU_BIAS.replace("    return out\n", "    # gelu_kernel used to run as a second pass here\n    return out\n", 1)
    assert text != GELU_BIAS
    _candidate, edit = fuse(text)
    assert CONSUMER_DEF not in edit.new_text


REFERENCES = {
    "__all__": '\n__all__ = ["scale_bias_kernel", "gelu_kernel"]\n',
    "a registry": "\nKERNELS = {'gelu': gelu_kernel}\n",
    "an attribute": "\n\ndef kernel_name(module):\n    return module.gelu_kernel.__name__\n",
    "getattr with a string": '\n\ndef lookup(module):\n    return getattr(module, "gelu_kernel")\n',
    "an import alias": "\ntry:\n    from fast_kernels import gelu_kernel as _compiled_gelu\nexcept ImportError:\n    pass\n",
}


@pytest.mark.parametrize("reference", sorted(REFERENCES))
def test_a_consumer_the_file_still_refers_to_is_kept(reference):
    text = GELU_BIAS + REFERENCES[reference]
    _candidate, edit = fuse(text)
    assert CONSUMER_DEF in edit.new_text and edit.new_text.count("@triton.jit") == 2
    assert "gelu_kernel[grid]" not in edit.new_text  # the launch still goes: the fusion itself is unchanged
    assert any("stays defined" in note for note in edit.notes)
    # Same fused producer and host function as without the reference: only the definition differs.
    _candidate, plain = fuse(GELU_BIAS)
    producer = plain.new_text.split("def gelu_bias(")[1]
    assert producer in edit.new_text


def test_the_comment_above_the_consumer_goes_with_it_and_a_section_header_stays():
    text = GELU_BIAS.replace(
        "@triton.jit\ndef gelu_kernel(",
        "# ---- second pass ----\n\n# gelu (erf form) of the intermediate\n@triton.jit\ndef gelu_kernel(",
        1,
    )
    assert text != GELU_BIAS
    _candidate, edit = fuse(text)
    assert CONSUMER_DEF not in edit.new_text and "erf form" not in edit.new_text
    assert "\n\n\n# ---- second pass ----\n\n\ndef gelu_bias(" in edit.new_text


def test_history_reverts_a_fusion_that_removed_a_definition_keeping_a_later_edit(tmp_path):
    """The removal is part of the step's text edit: rejecting it brings the definition back, later edits stay."""
    doc = tmp_path / "gelu_bias.py"
    doc.write_text(GELU_BIAS)
    candidate, edit = fuse(GELU_BIAS)
    history = StepHistory(tmp_path, doc)
    step = history.record(candidate, GELU_BIAS, edit.new_text, edit.summary)
    later = edit.new_text.replace("BLOCK_SIZE = 128", "BLOCK_SIZE = 256")
    assert later != edit.new_text
    reverted = history.reject(step.id, later)
    assert reverted == GELU_BIAS.replace("BLOCK_SIZE = 128", "BLOCK_SIZE = 256")
    assert CONSUMER_DEF in reverted
