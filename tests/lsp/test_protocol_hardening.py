"""The server over real stdio keeps answering whatever the editor sends (issue 16, item 5).

Framing (a huge or a slightly wrong Content-Length, garbage, invalid JSON), params of the wrong
type, the lifecycle (before initialize, after shutdown), changes to documents that are not open,
invalid UTF-8, ``mtmc.applyCandidate`` without a version, and settings out of range.
"""

from __future__ import annotations

import time

import pytest

from .raw_client import LIST_TARGETS, REPO, RawClient, frame, request_body


def test_requests_before_initialize_and_after_shutdown_get_errors(tmp_path):
    client = RawClient.subprocess(cwd=tmp_path)
    try:
        early = client.call("textDocument/hover", {"textDocument": {"uri": "file:///a.py"},
                                                   "position": {"line": 0, "character": 0}})
        assert early["error"]["code"] == -32002
        client.initialize(tmp_path)
        assert client.call("initialize", {"processId": None, "rootUri": None, "capabilities": {}})["error"]["code"] == -32600
        assert client.call("shutdown")["result"] is None
        late = client.call("workspace/executeCommand", LIST_TARGETS)
        assert late["error"]["code"] == -32600 and "shutting down" in late["error"]["message"]
        client.notify("exit")
        assert client.process.wait(timeout=10) == 0
    finally:
        if client.process.poll() is None:
            client.process.kill()


def test_a_huge_content_length_is_refused_and_the_server_lives(server):
    server.send_raw(b"Content-Length: 1000000000000\r\n\r\n")
    assert server.wait_for(lambda: server.null_id_errors)
    assert server.null_id_errors[0]["error"]["code"] == -32600
    assert "over the limit" in server.null_id_errors[0]["error"]["message"]
    assert server.alive() and server.process.poll() is None


@pytest.mark.parametrize("off", [1, 3, 8])
def test_a_content_length_too_large_recovers_both_messages(server, off):
    first, second = request_body(501), request_body(502)
    server.send_raw(b"Content-Length: %d\r\n\r\n" % (len(first) + off) + first)
    server.send_raw(b"Content-Length: %d\r\n\r\n" % len(second) + second)
    assert "result" in server.wait(501, timeout=10) and "result" in server.wait(502, timeout=10)


def test_a_content_length_too_large_with_nothing_after_it_is_answered(server):
    body = request_body(601)
    server.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) + 4) + body)  # then the editor waits
    assert "result" in server.wait(601, timeout=10)
    assert server.alive()


@pytest.mark.parametrize("off", [1, 5, 40])
def test_a_content_length_too_small_is_a_parse_error_and_the_next_message_works(server, off):
    body = request_body(701)
    server.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) - off) + body)
    server.send_raw(frame({"jsonrpc": "2.0", "id": 702, "method": "workspace/executeCommand", "params": LIST_TARGETS}))
    assert "result" in server.wait(702, timeout=10)
    assert [e["error"]["code"] for e in server.null_id_errors] == [-32700]


def test_invalid_json_garbage_and_bad_headers_get_errors_and_do_not_stop_the_server(server):
    server.send_raw(b"Content-Length: 9\r\n\r\n{\"a\": tru")
    server.send_raw(b"random bytes \x00\xff between messages\r\n")
    server.send_raw(b"Content-Length: abc\r\n\r\n")
    server.send_raw(b"Content-Type: text/plain\r\nX: y\r\n\r\n")  # no Content-Length at all
    server.send_raw(frame([1, 2, 3]))  # a batch: not part of LSP
    server.send_raw(frame({"jsonrpc": "1.0", "id": 9, "method": "x"}))
    assert server.alive()
    codes = [e["error"]["code"] for e in server.null_id_errors]
    assert codes.count(-32700) == 1 and codes.count(-32600) >= 2
    assert server.responses.pop(9)["error"]["code"] == -32600


def test_params_of_the_wrong_type_get_invalid_params(server, tmp_path):
    uri = (tmp_path / "k.py").as_uri()
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": "x = 1\n"}})
    hover = server.call("textDocument/hover", {"textDocument": {"uri": uri}, "position": "x"})
    assert hover["error"]["code"] == -32602 and "$.params.position" in hover["error"]["message"]
    action = server.call("textDocument/codeAction", {"textDocument": {"uri": uri}, "context": {"diagnostics": []}})
    assert action["error"]["code"] == -32602 and "$.params.range" in action["error"]["message"]
    history = server.call("workspace/executeCommand", {"command": "mtmc.stepHistory", "arguments": []})
    assert history["error"]["code"] == -32602
    history = server.call("workspace/executeCommand", {"command": "mtmc.stepHistory", "arguments": [7]})
    assert history["error"]["code"] == -32602
    unknown = server.call("textDocument/notAMethod", {})
    assert unknown["error"]["code"] == -32601


def test_apply_candidate_without_a_version_is_refused(server, tmp_path):
    from mtmc_lsp.optimizer.actions import applicable
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import get_profile

    text = (REPO / "mtmc_lsp" / "examples" / "matmul.py").read_text()
    uri = (tmp_path / "matmul.py").as_uri()
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})
    candidate = applicable(analyze(text), "matmul_kernel", get_profile("h100"))[0].to_json()
    for version in (None, "1", True):
        reply = server.call("workspace/executeCommand", {"command": "mtmc.applyCandidate",
                                                         "arguments": [uri, version, candidate]})
        assert reply["error"]["code"] == -32602 and "version" in reply["error"]["message"]
    stale = server.call("workspace/executeCommand", {"command": "mtmc.applyCandidate", "arguments": [uri, 0, candidate]})
    assert stale["result"]["applied"] is False
    assert not [r for r in server.server_requests if r["method"] == "workspace/applyEdit"]


def test_a_change_to_an_unopened_document_is_ignored_without_an_error_popup(server):
    server.notify("textDocument/didChange", {"textDocument": {"uri": "file:///not/open.py", "version": 2},
                                             "contentChanges": [{"text": "y = 2\n"}]})
    assert server.alive()
    popups = [n for n in server.notifications if n["method"] == "window/showMessage"]
    assert not [p for p in popups if "KeyError" in p["params"]["message"]]


def test_invalid_utf8_in_a_change_is_applied_with_replacement_and_reported(tmp_path):
    client = RawClient.in_process()
    try:
        client.initialize(tmp_path)
        uri = (tmp_path / "u.py").as_uri()
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                "text": "a = 1\n"}})
        body = (b'{"jsonrpc":"2.0","method":"textDocument/didChange","params":{"textDocument":{"uri":"%s",'
                b'"version":2},"contentChanges":[{"range":{"start":{"line":0,"character":4},"end":{"line":0,'
                b'"character":5}},"text":"\xff2"}]}}' % uri.encode())
        client.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        assert client.alive()
        document = client.server.workspace.get_text_document(uri)
        assert (document.source, document.version) == ("a = \ufffd2\n", 2)
        warnings = [n["params"]["message"] for n in client.notifications if n["method"] == "window/logMessage"]
        assert any("invalid UTF-8" in w for w in warnings)
    finally:
        client.close()


def test_settings_out_of_range_are_reported_and_diagnostics_still_come(tmp_path):
    settings = {"diagnosticsDebounceMs": 1e300, "verification": {"seeds": 1e12, "enabled": False}, "policy": "heuristic",
                "compileDiagnostics": False, "trusted": True}
    client = RawClient.subprocess(cwd=tmp_path, settings=settings)
    try:
        client.initialize(tmp_path)
        uri = (tmp_path / "k.py").as_uri()
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                "text": "x = (\n"}})
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                                 "contentChanges": [{"text": "x = ((\n"}]})
        assert client.wait_for(lambda: any(n["method"] == "textDocument/publishDiagnostics"
                                           and n["params"].get("version") == 2 for n in client.notifications), 10)
        shown = " ".join(n["params"]["message"] for n in client.notifications if n["method"] == "window/showMessage")
        assert "mtmc.diagnosticsDebounceMs: 1e+300 is out of range" in shown
        assert "mtmc.verification.seeds: 1000000000000.0 is out of range" in shown
    finally:
        client.close()


def test_history_of_untitled_and_outside_documents_stays_in_memory(tmp_path, tmp_path_factory):
    client = RawClient.in_process()
    try:
        client.initialize(tmp_path)
        outside = tmp_path_factory.mktemp("outside") / "k.py"
        assert client.server.history_location("untitled:Untitled-1")[0] is None
        assert client.server.history_location(outside.as_uri()) == (None, outside)
        inside = tmp_path / "sub" / "k.py"
        assert client.server.history_location(inside.as_uri()) == (tmp_path, inside)
        history = client.server.steps.history("untitled:Untitled-1")
        assert not history.persistent
    finally:
        client.close()


def test_the_server_answers_quickly_after_a_burst_of_broken_frames(server):
    started = time.monotonic()
    for i in range(200):
        server.send_raw(b"Content-Length: %d\r\n\r\n{" % (i % 7 + 1) + b"x" * (i % 7))
    assert server.alive(timeout=20)
    assert time.monotonic() - started < 20
