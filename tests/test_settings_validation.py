"""Every setting from the editor is validated: a bad value keeps the default and says why (issue 16, item 4)."""

from __future__ import annotations

import pytest

from mtmc_lsp.settings import Settings

BAD = [
    ({"diagnosticsDebounceMs": 1e300}, "mtmc.diagnosticsDebounceMs: 1e+300 is out of range (0 to 10000); using 200"),
    ({"diagnosticsDebounceMs": -5}, "mtmc.diagnosticsDebounceMs: -5 is out of range"),
    ({"diagnosticsDebounceMs": float("nan")}, "mtmc.diagnosticsDebounceMs: nan is not a finite number"),
    ({"diagnosticsDebounceMs": "fast"}, "mtmc.diagnosticsDebounceMs: expected a number, got 'fast'"),
    ({"diagnosticsDebounceMs": 2.5}, "mtmc.diagnosticsDebounceMs: expected a whole number, got 2.5"),
    ({"verification": {"seeds": 1e12}}, "mtmc.verification.seeds: 1000000000000.0 is out of range (1 to 64); using 3"),
    ({"verification": {"seeds": 0}}, "mtmc.verification.seeds: 0 is out of range"),
    ({"verification": {"compileTimeoutS": float("inf")}}, "mtmc.verification.compileTimeoutS: inf is not a finite number"),
    ({"verification": {"runTimeoutS": True}}, "mtmc.verification.runTimeoutS: expected a number, got True"),
    ({"verification": [1]}, "mtmc.verification: expected an object, got a JSON array"),
    ({"verification": {"enabled": "yes"}}, "mtmc.verification.enabled: expected true or false, got 'yes'"),
    ({"policy": "magic"}, "mtmc.policy: 'magic' is not one of embedded, heuristic, endpoint"),
    ({"targetGpu": "tpu9"}, "mtmc.targetGpu: unknown GPU 'tpu9'"),
    ({"policyEndpoint": "ftp://x"}, "mtmc.policyEndpoint: 'ftp://x' is not an http(s) URL"),
    ({"coderModelPath": "/no/such/model.gguf"}, "mtmc.coderModelPath: '/no/such/model.gguf' is not a file"),
    ({"compileDiagnostics": 1}, "mtmc.compileDiagnostics: expected true or false, got 1"),
]


@pytest.mark.parametrize("raw, message", BAD, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD)])
def test_a_bad_value_keeps_the_default_and_says_why(raw, message):
    settings = Settings.from_client(raw)
    assert any(p.startswith(message) for p in settings.problems), settings.problems
    defaults = Settings()
    assert settings.to_client() == defaults.to_client()


def test_good_values_are_taken_without_problems(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    raw = {"targetGpu": "H200", "policy": "endpoint", "policyEndpoint": "http://localhost:8000/v1",
           "diagnosticsDebounceMs": 0, "verification": {"seeds": 64, "compileTimeoutS": 1, "runTimeoutS": 3600.0},
           "coderModelPath": str(model), "unknownKey": 1, "python": "/usr/bin/python3"}
    settings = Settings.from_client(raw)
    assert settings.problems == []
    assert (settings.target_gpu, settings.policy, settings.diagnostics_debounce_ms, settings.verification.seeds) == (
        "H200", "endpoint", 0, 64)
    assert "problems" not in settings.to_client()


def test_problems_are_not_settings():
    assert Settings.from_client({"problems": ["x"]}).problems == []
    assert Settings.from_client(None).problems == [] and Settings.from_client([1]).problems == []
