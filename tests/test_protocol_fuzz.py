"""Property-based protocol fuzzing (hypothesis): random session sequences and broken framing (issue 16).

The framing reader and the position conversion are checked against independent reference
implementations on random input; then random sequences of open / incremental change / close /
code action / resolve / execute command / cancel, with malformed text, params and frames, go to
a real server (in this process, over pipes) and after each sequence: the server's text and version
of every open document equal the client's, every request got an answer or a JSON-RPC error, no
edit was offered for a version other than the one asked for, the server still answers, and its
memory stays bounded. Bounded to well under a minute on two cores.
"""

from __future__ import annotations

import gc
import os
import json
import random
import resource
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types

from mtmc_lsp.server.positions import TextIndex
from mtmc_lsp.server.framing import FrameReader

from lsp.raw_client import REPO, RawClient, carries_traceback, frame, offset_of, replace_range

MATMUL = (REPO / "mtmc_lsp" / "examples" / "matmul.py").read_text()
# Characters that matter for positions and lines: LSP breaks (\n, \r\n, \r), separators str.splitlines
# also breaks at (\x0c, \u2028), astral characters (two UTF-16 units), multi-byte UTF-8.
ALPHABET = list("ab (){}:=.#\t\n\r") + ["\r\n", "😀", "é", "\u2028", "\x0c", "\ufffd", "𝔘"]
texts = st.lists(st.sampled_from(ALPHABET), max_size=30).map("".join)


FUZZ = settings(max_examples=int(os.environ.get("MTMC_FUZZ_EXAMPLES", "300")), deadline=None, database=None, suppress_health_check=list(HealthCheck))


# ---- framing ------------------------------------------------------------------------------------
messages = st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params", "x"]),
                           st.one_of(st.integers(), st.text(max_size=20), st.none(),
                                     st.lists(st.integers(), max_size=3)), max_size=5)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


@FUZZ
@given(st.lists(messages, min_size=1, max_size=6), st.lists(st.integers(0, 10_000), max_size=12))
def test_frames_split_anywhere_come_out_whole(batch, cuts):
    reader = FrameReader()
    out = []
    for chunk in _split(b"".join(frame(m) for m in batch), cuts):
        reader.feed(chunk)
        out += list(reader.frames())
    assert [f.message for f in out] == batch and all(f.ok and not f.note for f in out)


garbage = st.binary(max_size=60).filter(lambda b: b"content-length" not in b.lower())


# Text that looks like a header inside a JSON string (escaped line breaks: the JSON cannot hold a raw one).
header_like = st.sampled_from(["", "Content-Length: 12", "content-length:7\r\n\r\n", "Content-Type: x\r\n"])
wrong_by = st.one_of(st.integers(-60, 60), st.sampled_from([200, 1_000, 100_000]))


@FUZZ
@given(st.lists(st.tuples(messages, wrong_by, garbage, header_like), min_size=1, max_size=6),
       st.lists(st.integers(0, 10_000), max_size=8))
def test_wrong_lengths_and_garbage_lose_only_the_broken_frames(batch, cuts):
    """A length too large (by a few bytes or by 100,000) still yields its message as soon as the next
    header arrives, without waiting; one too small is one parse error, even when the body holds the
    text "Content-Length:"; garbage between frames is skipped; nothing else is lost."""
    reader = FrameReader(max_content_length=1 << 20)
    data = b""
    for message, off, junk, text in batch:
        body = json.dumps({**message, "text": text} if text else message).encode()
        data += junk + b"Content-Length: %d\r\n\r\n" % max(len(body) + off, 0) + body
    batch = [({**m, "text": text} if text else m, off, junk) for m, off, junk, text in batch]
    sentinel = {"jsonrpc": "2.0", "method": "sentinel"}
    data += frame(sentinel)
    out = []
    for chunk in _split(data, cuts):
        reader.feed(chunk)
        out += list(reader.frames())
    assert [f.message for f in out if f.ok] == [m for m, off, _ in batch if off >= 0] + [sentinel]
    assert sum(f.error_code == -32700 for f in out) == sum(off < 0 for _, off, _ in batch)
    assert not reader.waiting_for_body and not reader._buffer


def test_a_huge_length_is_refused_without_waiting_for_the_body():
    reader = FrameReader()
    reader.feed(b"Content-Length: 1000000000000\r\n\r\n" + frame({"jsonrpc": "2.0", "method": "x"}))
    problem, message = list(reader.frames())
    assert problem.error_code == -32600 and "over the limit" in problem.problem
    assert message.message == {"jsonrpc": "2.0", "method": "x"}


def test_internal_errors_reach_the_client_without_their_traceback():
    """pygls puts the traceback of a handler's exception into the -32603 reply's data; a SyntaxError's
    text carries File/line lines and the source: the client gets one line, the log the rest."""
    import sys

    from pygls.exceptions import JsonRpcInternalError

    from mtmc_lsp.server.protocol import client_safe_error

    for failing in (lambda: {}["missing"], lambda: compile("x = (", "k.py", "exec")):
        try:
            failing()
        except Exception:  # noqa: BLE001 - any handler exception
            error = JsonRpcInternalError.of(sys.exc_info()).to_response_error()
        assert carries_traceback([error.message, error.data])
        safe = client_safe_error(error)
        assert safe.code == -32603 and safe.data is None and "\n" not in safe.message
        assert not carries_traceback(safe.message) and safe.message.split(":")[0] in ("KeyError", "SyntaxError")


# ---- positions ----------------------------------------------------------------------------------
@FUZZ
@given(texts, st.integers(0, 12), st.integers(0, 40))
def test_offsets_match_a_per_character_reference(text, line, character):
    index = TextIndex(text, types.PositionEncodingKind.Utf16)
    assert index.offset_at(types.Position(line=line, character=character)) == offset_of(text, line, character)


@FUZZ
@given(texts, st.integers(0, 40), st.sampled_from([types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf16,
                                                    types.PositionEncodingKind.Utf32]))
def test_positions_round_trip_in_every_encoding(text, offset, encoding):
    index = TextIndex(text, encoding)
    offset = min(offset, len(text))
    if 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n":
        offset -= 1  # inside a \r\n: not a position
    assert index.offset_at(index.position_at(offset)) == offset


# ---- a real server ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    client = RawClient.in_process()
    client.initialize(root)
    client.root = root
    client.sent = 0
    yield client
    client.close()


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


positions = st.tuples(st.integers(0, 8), st.integers(0, 30))
operation = st.one_of(
    st.tuples(st.just("open"), st.integers(0, 2), st.one_of(texts, st.just(MATMUL))),
    st.tuples(st.just("change"), st.integers(0, 2), positions, positions, texts),
    st.tuples(st.just("close"), st.integers(0, 2)),
    st.tuples(st.just("code_action"), st.integers(0, 2), positions),
    st.tuples(st.just("resolve"), st.integers(0, 2)),
    st.tuples(st.just("apply"), st.integers(0, 2), st.sampled_from(["current", "stale", "null", "string"])),
    st.tuples(st.just("command"), st.sampled_from(["mtmc.stepHistory", "mtmc.acceptStep", "mtmc.rejectStep",
                                                   "mtmc.selectTarget", "mtmc.nope"]),
              st.lists(st.one_of(st.text(max_size=8), st.integers(), st.none()), max_size=3)),
    st.tuples(st.just("cancel"), st.integers(0, 50)),
    st.tuples(st.just("bad_params"), st.sampled_from(["position", "no_range", "not_object"])),
    st.tuples(st.just("bad_frame"), st.sampled_from(["json", "short", "garbage", "utf8", "huge", "batch", "long200",
                                                     "long100000", "short40_text", "no_length"])),
    st.tuples(st.just("ghost_change"), texts),
)


@settings(max_examples=int(os.environ.get("MTMC_FUZZ_SESSIONS", "50")), deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(operation, min_size=1, max_size=25))
def test_random_sessions_keep_server_and_client_in_step(server, ops):
    client = server
    client.sent += 1
    uris = [(client.root / f"s{client.sent}_{i}.py").as_uri() for i in range(3)]
    pending: list[int] = []  # ids that must be answered
    parse_errors_expected = invalid_requests_expected = 0
    offered: dict[int, dict] = {}  # code action request id -> the version asked about
    actions: dict[str, list] = {u: [] for u in uris}
    rng = random.Random(len(ops))
    errors_before = len(client.null_id_errors)
    edits_before = len(client.server_requests)

    for op in ops:
        kind = op[0]
        if kind == "open":
            client.open(uris[op[1]], op[2], version=1)
            actions[uris[op[1]]] = []
        elif kind == "change" and uris[op[1]] in client.buffers:
            client.change(uris[op[1]], op[2], op[3], op[4])
        elif kind == "close" and uris[op[1]] in client.buffers:
            client.close_document(uris[op[1]])
        elif kind == "code_action" and uris[op[1]] in client.buffers:
            uri = uris[op[1]]
            msg_id = client.request("textDocument/codeAction", {
                "textDocument": {"uri": uri}, "context": {"diagnostics": []},
                "range": {"start": {"line": op[2][0], "character": op[2][1]},
                          "end": {"line": op[2][0], "character": op[2][1]}}})
            reply = client.wait(msg_id)
            for action in reply.get("result") or []:
                if isinstance(action, dict) and action.get("data"):
                    actions[uri].append(action)
        elif kind == "resolve" and uris[op[1]] in client.buffers and actions[uris[op[1]]]:
            uri = uris[op[1]]
            action = rng.choice(actions[uri])
            asked = action["data"].get("version")
            current = client.buffers[uri][1]
            reply = client.call("codeAction/resolve", action)
            if "result" in reply and (reply["result"] or {}).get("edit"):
                (change,) = reply["result"]["edit"].get("documentChanges") or [{"textDocument": {"version": asked}}]
                # An edit is only ever offered for the version the action was made for, and that
                # is the current one (nothing changed in between here).
                assert change["textDocument"]["version"] == asked == current
            else:
                assert asked != current or "error" in reply or reply.get("result") is not None
        elif kind == "apply" and uris[op[1]] in client.buffers:
            uri = uris[op[1]]
            text, version = client.buffers[uri]
            from mtmc_lsp.optimizer.actions import applicable
            from mtmc_lsp.optimizer.analysis import analyze
            from mtmc_lsp.optimizer.hardware import get_profile

            found = applicable(analyze(MATMUL), "matmul_kernel", get_profile("h100"))
            candidate = found[0].to_json()
            asked = {"current": version, "stale": version - 1, "null": None, "string": str(version)}[op[2]]
            requests_before = len(client.server_requests)
            reply = client.call("workspace/executeCommand", {"command": "mtmc.applyCandidate",
                                                             "arguments": [uri, asked, candidate]})
            new_edits = [r for r in client.server_requests[requests_before:] if r["method"] == "workspace/applyEdit"]
            if op[2] != "current":
                assert not new_edits, "an edit was sent for a stale or missing version"
                assert "error" in reply or reply["result"]["applied"] is False
            for request in new_edits:
                (change,) = request["params"]["edit"]["documentChanges"]
                assert change["textDocument"]["version"] == version
        elif kind == "command":
            pending.append(client.request("workspace/executeCommand", {"command": op[1], "arguments": op[2]}))
        elif kind == "cancel":
            client.notify("$/cancelRequest", {"id": op[1]})
        elif kind == "bad_params":
            uri = uris[0]
            params = {"position": {"textDocument": {"uri": uri}, "position": "x"},
                      "no_range": {"textDocument": {"uri": uri}, "context": {"diagnostics": []}},
                      "not_object": [1, 2]}[op[1]]
            method = "textDocument/hover" if op[1] == "position" else "textDocument/codeAction"
            reply = client.call(method, params)
            assert reply["error"]["code"] == -32602
        elif kind == "bad_frame":
            if op[1] == "json":
                client.send_raw(b"Content-Length: 5\r\n\r\n{nope")
                parse_errors_expected += 1
            elif op[1] == "short":
                body = json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"k": "v" * 10}}).encode()
                client.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) - 3) + body)
                parse_errors_expected += 1
            elif op[1] == "garbage":
                client.send_raw(b"\x00garbage\xff\r\n")
            elif op[1] == "utf8":
                body = b'{"jsonrpc":"2.0","method":"x\xff","params":null}  '
                client.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            elif op[1] == "huge":
                client.send_raw(b"Content-Length: 99999999999999\r\n\r\n")
            elif op[1] in ("long200", "long100000", "short40_text", "no_length"):
                msg_id = next(client._ids)
                body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "workspace/executeCommand", "params": {
                    "command": "mtmc.listTargets", "arguments": ["see Content-Length: 12 here", "pad" * 6]}}).encode()
                if op[1].startswith("long"):  # the next header ends the body: it is read and answered
                    client.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) + int(op[1][4:])) + body)
                    pending.append(msg_id)
                elif op[1] == "short40_text":
                    client.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) - 40) + body)
                    parse_errors_expected += 1
                else:
                    client.send_raw(b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + body)
                    invalid_requests_expected += 1
            else:
                client.send_raw(frame([{"jsonrpc": "2.0", "method": "x"}]))
        elif kind == "ghost_change":
            client.notify("textDocument/didChange", {"textDocument": {"uri": client.root.as_uri() + "/ghost.py",
                                                                      "version": 9},
                                                     "contentChanges": [{"text": op[1]}]})

    # Everything asked got an answer (a result or a JSON-RPC error), and the server still answers.
    replies = [client.wait(msg_id, timeout=20) for msg_id in pending]
    for reply in replies:
        assert "result" in reply or reply["error"]["code"] in (-32602, -32603, -32800, -32601, -32803)
    assert client.alive() and client.thread.is_alive()
    new_errors = client.null_id_errors[errors_before:]
    assert sum(e["error"]["code"] == -32700 for e in new_errors) >= parse_errors_expected
    assert sum(e["error"]["code"] == -32600 for e in new_errors) >= invalid_requests_expected
    # No error the client receives carries a Python traceback (the server's log has them).
    for error in [r["error"] for r in replies if "error" in r] + [e["error"] for e in new_errors]:
        assert not carries_traceback(error), error
    # The server's view of every open document is the client's.
    for uri, (text, version) in client.buffers.items():
        if uri in uris:
            document = client.server.workspace.get_text_document(uri)
            assert (document.source, document.version) == (text, version), uri
    popups = [n for n in client.notifications if n["method"] == "window/showMessage"]
    assert not [p for p in popups if "KeyError" in p["params"]["message"] or "Traceback" in p["params"]["message"]]
    for uri in uris:
        if uri in client.buffers:
            client.close_document(uri)
    del edits_before


def test_memory_and_state_stay_bounded_after_the_sessions(server):
    """Run after the sessions (same server): nothing is left open and memory did not run away."""
    client = server
    assert client.alive()
    gc.collect()
    before = _rss_mb()
    for round_ in range(30):
        uri = (client.root / f"mem{round_}.py").as_uri()
        client.open(uri, MATMUL * 20)
        for i in range(10):
            client.change(uri, (i, 0), (i, 0), "# edit\n")
        client.close_document(uri)
    assert client.alive()
    deadline = time.monotonic() + 10
    while client.server.documents._docs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not client.server.workspace.text_documents and not list(client.server.documents)
    assert len(client.server.steps._proposals) <= 128
    # pygls kept a future per notification (a leak of ~7 KB per edit); only running requests may be held.
    assert len(client.server.protocol._request_futures) < 10
    gc.collect()
    assert _rss_mb() - before < 60, f"RSS grew {_rss_mb() - before:.0f} MB over 30 open/edit/close rounds"
