"""Broken framing costs only the broken frame, over the real stdio server (issue 33, framing).

The attacks as the issue describes them: a Content-Length too large by 200 or 100,000 bytes with
requests after it, a body 40 bytes short holding the text "Content-Length:", a header block with no
Content-Length; and no error the client receives carries a Python traceback.
"""

from __future__ import annotations

import json
import time

import pytest

from .raw_client import LIST_TARGETS, frame, request_body


@pytest.mark.parametrize("too_large_by", [200, 100_000])
def test_a_length_too_large_never_stalls_the_requests_after_it(server, too_large_by):
    first = request_body(100)
    server.send_raw(b"Content-Length: %d\r\n\r\n" % (len(first) + too_large_by) + first)
    started = time.monotonic()
    later = list(range(101, 151))
    for msg_id in later:  # 50 requests, then the editor waits for their answers
        server.send_raw(frame({"jsonrpc": "2.0", "id": msg_id, "method": "workspace/executeCommand",
                               "params": LIST_TARGETS}))
    answers = [server.wait(msg_id, timeout=15) for msg_id in later]
    assert all("result" in answer for answer in answers)
    assert time.monotonic() - started < 10
    # The broken frame's own request is recovered too: the next header ended its body.
    assert "result" in server.wait(100, timeout=5)


def test_one_request_after_a_length_too_large_by_200_is_answered_without_more_input(server):
    first, second = request_body(200), request_body(201)
    server.send_raw(b"Content-Length: %d\r\n\r\n" % (len(first) + 200) + first)
    server.send_raw(b"Content-Length: %d\r\n\r\n" % len(second) + second)
    assert "result" in server.wait(201, timeout=5) and "result" in server.wait(200, timeout=5)


@pytest.mark.parametrize("short_by", [40, 25, 3])
def test_a_short_body_holding_the_text_content_length_loses_only_itself(server, short_by):
    body = request_body(300, params={"command": "mtmc.listTargets", "arguments": ["see Content-Length: 12 below", "x" * 8]})
    server.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) - short_by) + body)
    server.send_raw(frame({"jsonrpc": "2.0", "id": 301, "method": "workspace/executeCommand", "params": LIST_TARGETS}))
    assert "result" in server.wait(301, timeout=10)
    assert [e["error"]["code"] for e in server.null_id_errors] == [-32700]
    assert 300 not in server.responses


def test_a_header_without_content_length_gets_an_error_and_the_next_request_works(server):
    server.send_raw(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + request_body(400))
    server.send_raw(frame({"jsonrpc": "2.0", "id": 401, "method": "workspace/executeCommand", "params": LIST_TARGETS}))
    assert "result" in server.wait(401, timeout=10)
    assert server.wait_for(lambda: server.null_id_errors, 5)
    (error,) = server.null_id_errors
    assert error["error"]["code"] == -32600 and "without Content-Length" in error["error"]["message"]
    assert 400 not in server.responses  # its body was skipped with it, not run as a request


def test_errors_from_failing_handlers_carry_no_traceback(server, tmp_path):
    uri = (tmp_path / "k.py").as_uri()
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": "x = 1\n"}})
    replies = [server.call("workspace/executeCommand", {"command": command, "arguments": arguments})
               for command, arguments in [("mtmc.acceptStep", [uri, "no-such-step"]),
                                          ("mtmc.rejectStep", [uri, "no-such-step"]),
                                          ("mtmc.verifyKernel", [uri + "-not-open"])]]
    errors = [reply["error"] for reply in replies]
    assert len(errors) == 3
    for error in errors:
        text = json.dumps(error)
        assert "Traceback" not in text and 'File \\"' not in text and "traceback" not in text.lower(), error
        assert error["message"]  # still says what went wrong, on one line
        assert "\n" not in error["message"]


def _fuzz_module():
    import importlib.util

    from .raw_client import REPO

    spec = importlib.util.spec_from_file_location("mtmc_protocol_fuzz", REPO / "benchmarks" / "protocol_fuzz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_short_random_stream_answers_every_request_once_without_tracebacks():
    """300 random messages, a quarter of them broken frames, to the stdio server (benchmarks/protocol_fuzz.py)."""
    result = _fuzz_module().run(messages=300, seed=7, pythonpath=None)
    assert result["answered_once"] == result["requests_owed"] and result["unanswered"] == 0
    assert result["answered_more_than_once"] == result["unreadable_frames_answered"] == 0
    assert result["internal_errors"] == result["errors_with_traceback"] == result["popups_with_traceback"] == 0
    assert result["server_alive_after"]


@pytest.mark.slow  # about 25 s: the round's figures (benchmarks/results/reliability/fuzz_round2.md)
def test_the_long_random_stream_answers_every_request_once_without_tracebacks():
    result = _fuzz_module().run(messages=3253, seed=33, pythonpath=None)
    assert result["answered_once"] == result["requests_owed"] and result["unanswered"] == 0
    assert result["internal_errors"] == result["errors_with_traceback"] == result["popups_with_traceback"] == 0
