"""Harness discovery: what to run, on which inputs, against which reference (statically, no import).

Three styles, tried in this order:
- KernelBench: ``Model`` / ``ModelNew`` classes with ``get_inputs()`` (and ``get_init_inputs()``);
  the candidate is ``ModelNew`` (else ``Model``), the reference ``Model``.
- function: ``get_inputs()`` plus the host function that launches the kernels, optionally
  ``reference(*inputs)``.
Either style may add ``eager(*inputs)`` (in a KernelBench file a function or a class built like ``Model``): the
call a PyTorch user would write in the inputs' own precision, timed as the baseline in place of a reference
that computes wider than its inputs (``reference_casts_to``); the reference stays the correctness check.
- test: module-level ``test_*`` functions whose returned tensors are compared between versions; failing
  those, the file's ``if __name__ == "__main__":`` block run as one test (``MAIN_TEST``): the tensors it
  binds are compared, and its own asserts count.
When none fits, ``HarnessMissing`` says what is missing and, when a host function exists, carries a
``Scaffold`` that inserts a ``get_inputs()`` built from the wrapper's signature.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..analysis import FileAnalysis, HostFunction, analyze
from .report import Scaffold
from .runtime.names import MAIN_TEST, main_block

INPUTS = "get_inputs"
INIT_INPUTS = "get_init_inputs"
REFERENCE = "reference"
EAGER = "eager"
NOT_ENTRIES = {INPUTS, INIT_INPUTS, REFERENCE, EAGER}
# What ``.float()`` / ``.double()`` and the torch dtype names convert to, for ``reference_casts_to``.
_CAST_METHODS = {"float": "float32", "double": "float64"}
_CAST_DTYPES = {"float32": "float32", "float": "float32", "float64": "float64", "double": "float64"}


@dataclass
class Harness:
    """How to verify one file; ``to_job`` is what the worker receives."""

    style: str  # "kernelbench" | "function" | "test"
    entry: str | None  # host function or model class the candidate is called through
    reference: str | None = None  # reference function or class
    inputs: str | None = INPUTS
    init_inputs: str | None = None
    tests: list[str] = field(default_factory=list)
    # Tests whose body checks its own result (an assert, assert_close, allclose ...): with no previous
    # version to compare against, their passing is the correctness check.
    self_checking: list[str] = field(default_factory=list)
    line: int = 0  # 0-based line of the entry (or first test), for messages
    input_count: int | None = None  # items get_inputs returns, when visible statically
    notes: list[str] = field(default_factory=list)
    eager: str | None = None  # the native-precision baseline timed in the reference's place
    reference_casts_to: str | None = None  # widest float dtype the reference converts to ("float32"/"float64")

    def describe(self) -> str:
        if self.style == "kernelbench":
            ref = f" vs {self.reference}" if self.reference else ""
            return f"KernelBench harness: {self.entry}{ref} on {self.inputs}()"
        if self.style == "function":
            ref = f", reference {self.reference}()" if self.reference else ""
            return f"{self.entry}(*{self.inputs}()){ref}"
        return f"tests: {test_names(self.tests)}"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class HarnessMissing:
    """No way to run the file: ``reason`` is the diagnostic text, ``line`` where to show it."""

    reason: str
    line: int = 0
    host_function: str | None = None
    scaffold: Scaffold | None = None


def _top_level(text: str) -> tuple[dict, dict]:
    tree = ast.parse(text)
    top = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    functions = {k: v for k, v in top.items() if isinstance(v, (ast.FunctionDef, ast.AsyncFunctionDef))}
    classes = {k: v for k, v in top.items() if isinstance(v, ast.ClassDef)}
    return functions, classes


def discover_harness(text: str, path: str | None = None, analysis: FileAnalysis | None = None,
                     entry: str | None = None, problem_text: str | None = None) -> Harness | HarnessMissing:
    """Find the harness of a file (``entry`` forces the host function or class to call).

    ``problem_text`` is a KernelBench problem file (``Model``, ``get_inputs``, ``get_init_inputs``)
    for a solution file that defines only ``ModelNew``.
    """
    try:
        functions, classes = _top_level(text)
    except SyntaxError as exc:
        return HarnessMissing(f"the file does not parse ({exc.msg}, line {exc.lineno})", max(0, (exc.lineno or 1) - 1))
    analysis = analysis or analyze(text, path)
    has_inputs = INPUTS in functions
    input_count = _returned_items(functions[INPUTS]) if has_inputs else None

    problem_functions: dict = {}
    problem_classes: dict = {}
    if problem_text is not None:
        try:
            problem_functions, problem_classes = _top_level(problem_text)
        except SyntaxError as exc:
            return HarnessMissing(f"the problem file does not parse ({exc.msg}, line {exc.lineno})")
    if ("ModelNew" in classes or "Model" in classes) and (has_inputs or INPUTS in problem_functions):
        name = entry if entry in classes else ("ModelNew" if "ModelNew" in classes else "Model")
        has_model = "Model" in classes or "Model" in problem_classes
        reference = "Model" if has_model and (name != "Model" or "Model" in problem_classes) else None
        notes = [] if reference else ["no Model class to compare against: checked against the previous version only"]
        if INPUTS in problem_functions:
            input_count = _returned_items(problem_functions[INPUTS])
            notes.append("inputs and the reference come from the problem file")
        init = INIT_INPUTS if INIT_INPUTS in functions or INIT_INPUTS in problem_functions else None
        eager = EAGER if EAGER in functions or EAGER in classes else None
        casts = widest_cast(problem_text if "Model" in problem_classes else text, reference) if reference else None
        return Harness("kernelbench", name, reference, INPUTS, init, line=classes[name].lineno - 1,
                       input_count=input_count, notes=notes, eager=eager, reference_casts_to=casts)
    if "ModelNew" in classes:
        return HarnessMissing(
            f"ModelNew found but no {INPUTS}(): give the KernelBench problem file (mtmc verify --problem FILE) "
            f"or add {INPUTS}() and get_init_inputs()", classes["ModelNew"].lineno - 1)

    kernels_here = bool(analysis.kernels)
    hosts = [h for h in analysis.host_functions if h.name in functions and h.name not in NOT_ENTRIES
             and not h.name.startswith("test_")]
    if entry is not None and entry in functions:
        chosen = entry
    else:
        chosen = _pick_entry(hosts, functions, input_count, path)
    tests = [name for name in functions if name.startswith("test_")]

    if has_inputs and chosen is not None:
        reference = REFERENCE if REFERENCE in functions else None
        notes = [] if reference else ["no reference(): checked against the previous version only"]
        return Harness("function", chosen, reference, INPUTS, line=functions[chosen].lineno - 1,
                       input_count=input_count, notes=notes, eager=EAGER if EAGER in functions else None,
                       reference_casts_to=widest_cast(text, reference) if reference else None)
    if tests:
        return Harness("test", None, None, None, tests=tests, line=functions[tests[0]].lineno - 1,
                       self_checking=[t for t in tests if t in _self_checking(functions)],
                       notes=["test style: each test_*() result is compared with the previous version's"])
    main = main_block(ast.parse(text))  # parsed again only for a file with no other harness
    if main is not None and kernels_here and _calls_a_host(main, {h.name for h in hosts} | set(functions)):
        checks = _checks_itself(ast.FunctionDef(name=MAIN_TEST, args=ast.arguments(), body=main.body, decorator_list=[]))
        return Harness("test", None, None, None, tests=[MAIN_TEST], line=main.lineno - 1,
                       self_checking=[MAIN_TEST] if checks else [],
                       notes=['test style: the `if __name__ == "__main__":` block runs as one test; the tensors it '
                              "binds are compared with the previous version's"])
    if not kernels_here and chosen is None:
        return HarnessMissing("no Triton kernel and no harness in this file: nothing to verify")
    if has_inputs:
        return HarnessMissing(
            f"{INPUTS}() found, but no function that launches a kernel to call with its result "
            "(define a wrapper that launches the kernel, or a ModelNew class)", functions[INPUTS].lineno - 1)
    host = next((h for h in hosts if h.name == chosen), None)
    if host is None:
        first = analysis.kernels[0]
        return HarnessMissing(
            f"kernel {first.name} is never launched from a Python function: verification needs a wrapper that "
            f"launches it and {INPUTS}() that builds its arguments", first.name_span.start.line)
    signature = ", ".join(host.params)
    return HarnessMissing(
        f"no {INPUTS}(): verification cannot build inputs for {host.name}({signature}); add {INPUTS}() "
        f"returning its arguments (the quick fix scaffolds one), optionally reference(*inputs)",
        host.span.start.line, host.name, scaffold_get_inputs(text, host.name))


def widest_cast(text: str, name: str) -> str | None:
    """The widest float dtype that ``name`` (a function or class of the file, with the file's functions it
    calls) converts to: ``.float()``, ``.double()``, ``torch.float32`` / ``torch.float64`` in its body."""
    tree = ast.parse(text)
    top = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    seen, todo, found = set(), [name], set()
    while todo:
        node = top.get(todo.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and not sub.args \
                    and sub.func.attr in _CAST_METHODS:
                found.add(_CAST_METHODS[sub.func.attr])
            elif (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "torch"
                  and sub.attr in _CAST_DTYPES):
                found.add(_CAST_DTYPES[sub.attr])
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
                todo.append(sub.func.id)
    return "float64" if "float64" in found else ("float32" if found else None)


def test_names(tests: list[str]) -> str:
    """Tests as a message names them: ``test_add()``, or the ``__main__`` block the verifier runs as a test."""
    return ", ".join('the `if __name__ == "__main__":` block' if t == MAIN_TEST else f"{t}()" for t in tests)


def _calls_a_host(block: ast.If, names: set[str]) -> bool:
    """Whether the block calls a function of the file (a wrapper that launches a kernel, directly or not)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in names for n in ast.walk(block))


def _returned_items(fn: ast.FunctionDef) -> int | None:
    """How many items ``return [a, b]`` hands back, when the function returns a literal list/tuple."""
    counts = {len(node.value.elts) for node in ast.walk(fn)
              if isinstance(node, ast.Return) and isinstance(node.value, (ast.List, ast.Tuple))}
    return counts.pop() if len(counts) == 1 else None


def _pick_entry(hosts: list[HostFunction], functions: dict, input_count: int | None, path: str | None) -> str | None:
    """The wrapper a user calls: not called by another wrapper, arity matching get_inputs, named like the file."""
    if not hosts:
        return None
    names = {h.name for h in hosts}
    called = set()
    for name in names:
        for node in ast.walk(functions[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names - {name}:
                called.add(node.func.id)
    # Wrappers calling other wrappers are also entries, even when they launch nothing themselves.
    outer = [n for n, fn in functions.items() if n not in names and n not in NOT_ENTRIES and not n.startswith("test_")
             and any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in names
                     for c in ast.walk(fn))]
    candidates = [n for n in outer if n not in called] + [h.name for h in hosts if h.name not in called]
    candidates = candidates or [h.name for h in hosts]

    def arity_ok(name: str) -> bool:
        args = functions[name].args
        required = len(args.args) - len(args.defaults)
        return input_count is None or required <= input_count <= len(args.args) or args.vararg is not None

    stem = Path(path).stem if path else ""
    ranked = sorted(candidates, key=lambda n: (not arity_ok(n), n != stem, -functions[n].lineno))
    return ranked[0]


# -- scaffold --------------------------------------------------------------------------------------

_INT_NAMES = re.compile(r"^(n|m|k|size|numel|n_.*|num_.*|.*_size|dim|rows|cols|batch|seq_len|.*_dim|[MNKBHDLST])$")
_FLOAT_NAMES = re.compile(r"^(eps|epsilon|scale|alpha|beta|p|momentum|temperature)$")


def scaffold_get_inputs(text: str, function: str) -> Scaffold | None:
    """A ``get_inputs(device=...)`` for ``function`` from its signature (annotations and use of ``.shape``)."""
    tree = ast.parse(text)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if fn is None:
        return None
    lines: list[str] = []
    knobs: dict[str, int] = {}
    names = []
    for arg in fn.args.args:
        kind, ndim = _param_kind(arg, fn)
        names.append(arg.arg)
        if kind == "int":
            knobs.setdefault("n", 4096)
            lines.append(f"    {arg.arg} = n  # TODO: the value {function}() is called with")
        elif kind == "float":
            lines.append(f"    {arg.arg} = 1.0  # TODO: the value {function}() is called with")
        elif ndim == 2:
            knobs.setdefault("size", 256)
            lines.append(f"    {arg.arg} = torch.randn(size, size, device=device, dtype=torch.float32)  # TODO: shape, dtype")
        elif ndim and ndim > 2:
            knobs.setdefault("size", 256)
            shape = ", ".join(["4"] * (ndim - 2) + ["size", "size"])
            lines.append(f"    {arg.arg} = torch.randn({shape}, device=device, dtype=torch.float32)  # TODO: shape, dtype")
        else:
            knobs.setdefault("n", 4096)
            lines.append(f"    {arg.arg} = torch.randn(n, device=device, dtype=torch.float32)  # TODO: shape, dtype")
    params = ", ".join(['device: str = "cuda"'] + [f"{k}: int = {v}" for k, v in knobs.items()])
    body = "\n".join(lines) if lines else "    pass"
    code = (
        f"\n\ndef get_inputs({params}):\n"
        f'    """Arguments for {function}() in MTMC verification: random, seeded by the verifier; sizes are knobs."""\n'
        f"{body}\n"
        f"    return [{', '.join(names)}]\n"
    )
    end_line = (fn.end_lineno or fn.lineno)  # 1-based last line of the function = 0-based line after it
    edits = []
    if not _imports_torch(tree):
        edits.append({"line": 0, "character": 0, "text": "import torch\n"})
    edits.append({"line": end_line, "character": 0, "text": code})
    return Scaffold(edits=edits, function=function, title=f"Add get_inputs() for {function}() (verification)")


def _param_kind(arg: ast.arg, fn: ast.FunctionDef) -> tuple[str, int | None]:
    """("tensor", ndim or None) | ("int", None) | ("float", None) from annotation, name and use."""
    ann = ast.unparse(arg.annotation) if arg.annotation is not None else ""
    if ann in ("int",) or (not ann and _INT_NAMES.match(arg.arg)):
        return "int", None
    if ann == "float" or (not ann and _FLOAT_NAMES.match(arg.arg)):
        return "float", None
    ndim = None
    for node in ast.walk(fn):
        # ``M, K = a.shape`` -> 2-D
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
                and isinstance(node.value.value, ast.Name) and node.value.value.id == arg.arg
                and isinstance(node.targets[0], ast.Tuple)):
            ndim = len(node.targets[0].elts)
        # ``a.stride(1)`` / ``a.shape[1]`` -> at least 2-D
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("stride", "size")
                and isinstance(node.func.value, ast.Name) and node.func.value.id == arg.arg and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int)):
            ndim = max(ndim or 1, node.args[0].value + 1)
    return "tensor", ndim


def _imports_torch(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name == "torch" and a.asname is None for a in node.names):
            return True
    return False


_CHECKING_CALLS = ("assert", "allclose", "assert_close", "isclose", "array_equal")


def _checks_itself(fn: ast.FunctionDef) -> bool:
    """Whether a function compares a result itself: an ``assert`` or a call like ``torch.testing.assert_close``."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            target = node.func
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if any(word in name.lower() for word in _CHECKING_CALLS):
                return True
    return False


def _self_checking(functions: dict) -> set[str]:
    """Top-level functions that check a result themselves or through a helper of the file they call."""
    checking = {name for name, fn in functions.items() if _checks_itself(fn)}
    calls = {name: {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
             for name, fn in functions.items()}
    grew = True
    while grew:
        grew = False
        for name, called in calls.items():
            if name not in checking and called & checking:
                checking.add(name)
                grew = True
    return checking
