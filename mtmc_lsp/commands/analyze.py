"""``mtmc analyze FILE... [--target h100] [--json] [--compile]``: kernels and diagnostics of Triton files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MAX_FILE_BYTES = 20 * 1024 * 1024  # larger files are refused, not read


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="Triton source files (.py)")
    parser.add_argument("--target", default="", help="target GPU (h100, a100, ...); default: the local GPU, else h100")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--compile", action="store_true",
                        help="also compile every launch/autotune config for the target (slow: seconds per config)")
    parser.add_argument("--compile-timeout", type=float, default=120, help="seconds per compiled config (default 120)")


def _read(path: Path) -> tuple[str | None, str | None]:
    """The file's text, or a one-line reason it cannot be analysed."""
    try:
        if path.is_dir():
            return None, "is a directory"
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            return None, f"file too large ({size:,} bytes; the limit is {MAX_FILE_BYTES:,})"
        data = path.read_bytes()
    except FileNotFoundError:
        return None, "no such file"
    except PermissionError:
        return None, "permission denied"
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return None, f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}, line {line})"


def _kernel_json(kernel, analysis) -> dict:
    return {
        "name": kernel.name,
        "line": kernel.name_span.start.line + 1,
        "params": [{"name": p.name, "kind": p.kind, "default": p.default} for p in kernel.params],
        "autotune": None if kernel.autotune is None else {
            "key": kernel.autotune.key,
            "configs": [
                {"kwargs": c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages, "line": c.span.start.line + 1}
                for c in kernel.autotune.configs
            ],
            "literal": kernel.autotune.configs_are_literal,
            "known": kernel.autotune.configs_known,  # evaluated statically when not literal
            "unknown_reason": kernel.autotune.configs_unknown_reason,
        },
        "heuristics": dict(kernel.heuristics),
        "nested_in": kernel.enclosing_function,
        "launches": [
            {
                "line": launch.span.start.line + 1,
                "host": launch.host_function,
                "grid": launch.grid_source,
                "grid_value": list(launch.grid_value) if launch.grid_value else None,
                "constexprs": launch.constexpr_values(kernel),
                "num_warps": launch.num_warps,
                "num_stages": launch.num_stages,
                "file": launch.file,
            }
            for launch in analysis.launches_of(kernel.name)
            + [f for f in analysis.foreign_launches if f.kernel == kernel.name]
        ],
    }


def _finding_json(finding) -> dict:
    data = finding.to_json()
    data["line"] = finding.span.start.line + 1
    data["column"] = finding.span.start.character + 1
    data["data"] = {k: v for k, v in data["data"].items() if k != "report"}
    return data


def analyze_file(path: Path, target, compile_configs: bool, compile_timeout: float) -> dict:
    """Everything ``mtmc analyze`` knows about one file, as JSON-able data."""
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.analysis.workspace import with_foreign_launches
    from mtmc_lsp.optimizer.checks import run_checks

    text, problem = _read(path)
    if problem is not None:
        return {"file": str(path), "error": problem, "kernels": [], "diagnostics": []}
    analysis = with_foreign_launches(analyze(text, path=str(path)))
    findings = run_checks(analysis, target)
    reports = []
    if compile_configs and analysis.kernels and analysis.syntax_error is None:
        from mtmc_lsp.optimizer.compile import compile_file_findings

        compiled, reports = compile_file_findings(analysis, target, timeout_s=compile_timeout)
        findings = sorted(findings + compiled, key=lambda f: (f.span.start_offset, f.code))
    return {
        "file": str(path),
        "error": None,
        "imports_triton": analysis.imports_triton,
        "kernels": [_kernel_json(k, analysis) for k in analysis.kernels],
        "diagnostics": [_finding_json(f) for f in findings],
        "compile": [r.to_json() for r in reports],
    }


def _print_text(result: dict, out) -> None:
    path = result["file"]
    if result["error"]:
        print(f"{path}: error: {result['error']}", file=out)
        return
    kernels = result["kernels"]
    print(f"{path}: {len(kernels)} kernel{'s' if len(kernels) != 1 else ''}", file=out)
    for kernel in kernels:
        params = ", ".join(
            f"{p['name']}{'*' if p['kind'] == 'pointer' else ''}{': constexpr' if p['kind'] == 'constexpr' else ''}"
            + (f"={p['default']}" if p["default"] else "")
            for p in kernel["params"]
        )
        nested = f" (inside {kernel['nested_in']})" if kernel["nested_in"] else ""
        print(f"  kernel {kernel['name']} (line {kernel['line']}){nested}: {params}", file=out)
        if kernel["autotune"]:
            tune = kernel["autotune"]
            print(f"    autotune key={tune['key']}: {len(tune['configs'])} config(s)"
                  + ("" if tune["literal"] else " (not all literal)"), file=out)
            for config in tune["configs"]:
                print(f"      {config['kwargs']} num_warps={config['num_warps']} num_stages={config['num_stages']}", file=out)
        if kernel["heuristics"]:
            print(f"    heuristics: {', '.join(kernel['heuristics'])}", file=out)
        for launch in kernel["launches"]:
            value = tuple(launch["grid_value"]) if launch["grid_value"] else None
            grid = launch["grid"] + (f" = {value}" if value and str(value) != launch["grid"] else "")
            options = "".join(f" {k}={launch[k]}" for k in ("num_warps", "num_stages") if launch[k] is not None)
            where = f"{Path(launch['file']).name} " if launch["file"] else ""
            print(f"    launch {where}line {launch['line']} in {launch['host'] or '<module>'}: grid {grid}"
                  f" {launch['constexprs'] or ''}{options}", file=out)
    for diagnostic in result["diagnostics"]:
        print(f"{path}:{diagnostic['line']}:{diagnostic['column']}: {diagnostic['code']} {diagnostic['severity']} "
              f"{diagnostic['message']}", file=out)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except BrokenPipeError:  # `mtmc analyze ... | head`: the reader left, stop quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run(args: argparse.Namespace) -> int:
    from mtmc_lsp.optimizer.hardware import resolve_target

    try:
        target = resolve_target(args.target)
    except KeyError as exc:
        print(f"mtmc analyze: {exc.args[0]}", file=sys.stderr)
        return 2
    results = []
    failed = False
    for name in args.files:
        result = analyze_file(Path(name), target, args.compile, args.compile_timeout)
        results.append(result)
        failed |= bool(result["error"]) or any(d["severity"] == "error" for d in result["diagnostics"])
        if not args.json:
            _print_text(result, sys.stdout)
    if args.json:
        json.dump({"target": target.key, "targetName": target.name, "files": results}, sys.stdout, indent=2, default=str)
        print()
    return 1 if failed else 0
