"""The LLM coder's diff reading and content-matched application (no model, no server)."""

from __future__ import annotations

import pytest

from mtmc_lsp.optimizer.coder.patch import PatchError, apply_hunks, extract_diff, parse_diff

TEXT = """def f(x):
    a = x + 1
    b = a * 2
    return b


def g(x):
    a = x + 1
    b = a * 3
    return b
"""


def patch(text: str, answer: str) -> str:
    diff = extract_diff(answer)
    assert diff is not None
    return apply_hunks(text, parse_diff(diff))


def test_fenced_diff_with_prose_and_wrong_header_numbers_applies_by_content():
    answer = """Here is the change you asked for:

```diff
--- a/k.py
+++ b/k.py
@@ -90,3 +90,3 @@ def g(x):
     a = x + 1
-    b = a * 3
+    b = a * 4
     return b
```
It multiplies by four now."""
    assert patch(TEXT, answer) == TEXT.replace("a * 3", "a * 4")


def test_bare_hunk_header_without_fence_and_several_hunks():
    answer = """@@
 def f(x):
-    a = x + 1
+    a = x + 10
     b = a * 2
@@
     b = a * 3
-    return b
+    return b - 1
"""
    assert patch(TEXT, answer) == TEXT.replace("x + 1\n    b = a * 2", "x + 10\n    b = a * 2").replace(
        "a * 3\n    return b", "a * 3\n    return b - 1")


def test_whitespace_insensitive_match_keeps_the_files_context_and_shifts_new_lines():
    # The model lost the function's indentation: context matches after collapsing whitespace,
    # the file's own context lines are kept and the added line gets the file's indentation.
    answer = "```diff\n@@\n def g(x):\n a = x  +  1\n-b = a * 3\n+b = a * 5\n```\n"
    out = patch(TEXT, answer)
    assert out == TEXT.replace("a * 3", "a * 5")


def test_line_numbers_copied_from_the_prompt_are_stripped():
    answer = "```diff\n@@ -8,2 +8,2 @@\n  8 |     a = x + 1\n- 9 |     b = a * 3\n+ 9 |     b = a * 6\n```"
    assert patch(TEXT, answer) == TEXT.replace("a * 3", "a * 6")


def test_windows_line_endings_are_kept():
    text = TEXT.replace("\n", "\r\n")
    answer = "@@\n     a = x + 1\n-    b = a * 3\n+    b = a * 7\n"
    assert patch(text, answer) == text.replace("a * 3", "a * 7")


def test_form_feeds_mixed_endings_and_a_missing_final_newline_survive():
    text = "x = 1\x0c  # page\r\ny = 2\nz = 3"
    answer = "@@\n y = 2\n-z = 3\n+z = 4\n+w = 5\n"
    assert patch(text, answer) == "x = 1\x0c  # page\r\ny = 2\nz = 4\r\nw = 5"
    answer = "@@\n-x = 1\x0c  # page\n+x = 0\x0c  # page\n y = 2\n"
    assert patch(text, answer) == "x = 0\x0c  # page\r\ny = 2\nz = 3"


def test_blank_context_line_without_its_space_and_trailing_blank_lines():
    answer = "```diff\n@@\n     return b\n\n\n-def g(x):\n+def g(x):  # second\n\n```"
    assert patch(TEXT, answer) == TEXT.replace("def g(x):", "def g(x):  # second")


@pytest.mark.parametrize("answer, message", [
    ("@@\n     a = x + 1\n-    b = a * 9\n+    b = a * 4\n", "hunk 1 does not apply"),
    ("@@\n     a = x + 1\n-    b = a * 2\n+    b = a * 4\n", None),  # unique thanks to the removed line
    ("@@\n-    a = x + 1\n+    a = x + 2\n", "hunk 1 is ambiguous: its old lines match at lines 2, 8"),
    ("@@\n+    c = 1\n", "hunk 1 has no context or removed lines"),
    ("@@\n     a = x + 1\n     b = a * 2\n", "the diff changes nothing"),
    ("--- a/k.py\n+++ b/k.py\n@@\n-    b = a * 2\n+    b = 0\n--- a/other.py\n+++ b/other.py\n@@\n-x\n+y\n",
     "the diff changes 2 files"),
    ("@@\n     a = x + 1\n-    b = a * 2\n+    b = 0\nI also think\n@@\n-    b = a * 3\n+    b = 1\n",
     "the diff is malformed: line 5 is not a diff line ('I also think') but more hunks follow"),
    ("--- a/k.py\n+++ b/k.py\n", "the diff has no hunks"),
    ("@@\n     def f(x):\n-    a = x + 1\n+    a = 2\n@@\n-    a = x + 1\n     b = a * 2\n+    q = 1\n",
     "hunks 1 and 2 overlap"),
])
def test_refusals_name_the_problem(answer, message):
    if message is None:
        assert "a * 4" in patch(TEXT, answer)
        return
    with pytest.raises(PatchError) as info:
        patch(TEXT, answer)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_no_diff_in_the_answer():
    assert extract_diff("I would increase the block size to 1024 and use 8 warps.") is None
    assert extract_diff("```python\nx = 1\n```") is None
