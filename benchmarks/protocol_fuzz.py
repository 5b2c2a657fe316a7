"""Protocol fuzz figures: thousands of random messages, well-formed and broken, to the real stdio server.

``python -m mtmc_lsp serve`` runs in its own process (the editor's command, over pipes) and a seeded
random mix goes to it: requests (hover, code action, code lens, commands with random arguments,
unknown methods, params of the wrong type), document notifications (open, incremental change,
close, change of a document that is not open) and broken frames (invalid JSON, bodies too short,
too short by 40 bytes holding the text "Content-Length:", too large by 3, 200 or 100,000 bytes,
garbage, invalid UTF-8, a 100 TB length, a header without Content-Length, a batch).

Counted: frames sent; requests whose answer is owed (sent whole, or in a frame too large, whose
body the next header ends) and how many were answered exactly once, twice or never; requests in
frames that cannot be read (too short, no Content-Length) that were answered anyway (must be 0);
errors by code, internal errors (-32603), and errors or ``window/showMessage`` popups that carry a
Python traceback.

    python benchmarks/protocol_fuzz.py --messages 3253 --out benchmarks/results/reliability --name fuzz_round2

Then the framing attacks of issue 33 one by one, each against a fresh server: a Content-Length too
large by 200 and by 100,000 bytes followed by 50 requests, a body 40 bytes short holding the text
"Content-Length:" followed by a request, a header block without Content-Length.

``--pythonpath DIR`` runs the server from another checkout's package (a folder holding
``mtmc_lsp`` with ``server`` and ``optimizer`` inside), e.g. the landed main before a change.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from lsp.raw_client import SETTINGS, RawClient, carries_traceback, frame  # noqa: E402

MATMUL = (REPO / "mtmc_lsp" / "examples" / "matmul.py").read_text()
COMMANDS = ["mtmc.stepHistory", "mtmc.acceptStep", "mtmc.rejectStep", "mtmc.listTargets", "mtmc.selectTarget",
            "mtmc.stepApplied", "mtmc.applyCandidate", "mtmc.nope"]
TEXT_PIECES = ["a", "b ", "(", ")", "{", ":", "=", ".", "#", "\t", "\n", "\r\n", "\r", "😀", "é", "\u2028", "\x0c"]



class CountingClient(RawClient):
    """RawClient that counts every response per id (a request answered twice shows) and answers the
    server's requests from its own thread: the reading thread never blocks on a write, so a server
    that writes while this process writes thousands of messages cannot deadlock the pipes."""

    def __init__(self, *args, **kwargs):
        self.answers: Counter = Counter()
        self.errors: list[dict] = []
        self._replies: queue.Queue = queue.Queue()
        super().__init__(*args, **kwargs)
        threading.Thread(target=self._reply_loop, daemon=True).start()

    def _received(self, message: dict) -> None:
        if "method" in message and "id" in message:
            self.server_requests.append(message)
            self._replies.put(message)
            return
        if message.get("id") is not None:
            self.answers[message["id"]] += 1
        if "error" in message:
            self.errors.append(message)
        super()._received(message)

    def _reply_loop(self) -> None:
        while True:
            request = self._replies.get()
            try:
                self.send_raw(frame({"jsonrpc": "2.0", "id": request["id"], "result": self._answer(request)}))
            except (OSError, ValueError):
                return


def start_server(workspace: Path, pythonpath: str | None, stderr) -> CountingClient:
    env = dict(os.environ, PYTHONPATH=pythonpath or str(REPO))
    process = subprocess.Popen([sys.executable, "-m", "mtmc_lsp", "serve"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=stderr, cwd=workspace, env=env)

    def write(data: bytes) -> None:
        process.stdin.write(data)
        process.stdin.flush()

    client = CountingClient(write, process.stdout, dict(SETTINGS))
    client.process = process
    return client


def random_value(rng: random.Random):
    return rng.choice([None, 0, -1, 7, True, "", "x", "file:///nope.py", [], {}, [1, "a"], {"k": None}, 1e300])


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(TEXT_PIECES) for _ in range(rng.randrange(0, 30)))


def run(messages: int, seed: int, pythonpath: str | None) -> dict:
    rng = random.Random(seed)
    workspace = Path(tempfile.mkdtemp(prefix="mtmc-fuzz-"))
    with open(workspace / "server.log", "wb") as stderr:
        client = start_server(workspace, pythonpath, stderr)
        client.initialize(workspace)
        uris = [(workspace / f"k{i}.py").as_uri() for i in range(3)]
        owed: list = []        # request ids that must be answered once
        unreadable: list = []  # request ids sent in frames that cannot be read: no answer by id
        kinds: Counter = Counter()
        sent = 0
        next_id = 10_000
        started = time.perf_counter()

        def body_of(method: str, params, with_id: bool = True) -> tuple[bytes, int | None]:
            nonlocal next_id
            next_id += 1
            message = {"jsonrpc": "2.0", "method": method, "params": params}
            if with_id:
                message["id"] = next_id
            return json.dumps(message).encode(), next_id if with_id else None

        while sent < messages:
            kind = rng.choice(["open", "change", "change", "close", "hover", "code_action", "code_lens", "command",
                               "command", "unknown", "bad_params", "ghost_change", "broken", "broken"])
            uri = rng.choice(uris)
            open_ = uri in client.buffers
            if kind == "open":
                client.open(uri, rng.choice([MATMUL, random_text(rng)]), version=rng.randrange(1, 5))
            elif kind == "change" and open_:
                line, character = rng.randrange(0, 8), rng.randrange(0, 30)
                client.change(uri, (line, character), (line + rng.randrange(0, 2), rng.randrange(0, 30)), random_text(rng))
            elif kind == "close" and open_:
                client.close_document(uri)
            elif kind == "ghost_change":
                client.notify("textDocument/didChange", {"textDocument": {"uri": uri + ".ghost", "version": 3},
                                                         "contentChanges": [{"text": random_text(rng)}]})
            elif kind in ("hover", "code_action", "code_lens"):
                position = {"line": rng.randrange(0, 40), "character": rng.randrange(0, 40)}
                method, params = {
                    "hover": ("textDocument/hover", {"textDocument": {"uri": uri}, "position": position}),
                    "code_action": ("textDocument/codeAction", {"textDocument": {"uri": uri}, "context": {"diagnostics": []},
                                                                "range": {"start": position, "end": position}}),
                    "code_lens": ("textDocument/codeLens", {"textDocument": {"uri": uri}}),
                }[kind]
                owed.append(client.request(method, params))
            elif kind == "command":
                arguments = [rng.choice([uri, random_value(rng)]) for _ in range(rng.randrange(0, 4))]
                owed.append(client.request("workspace/executeCommand", {"command": rng.choice(COMMANDS),
                                                                         "arguments": arguments}))
            elif kind == "unknown":
                owed.append(client.request("textDocument/notAMethod", {"x": random_value(rng)}))
            elif kind == "bad_params":
                owed.append(client.request("textDocument/hover", rng.choice([
                    {"textDocument": {"uri": uri}, "position": "x"}, [1, 2], {"textDocument": 5}, None])))
            elif kind == "broken":
                attack = rng.choice(["json", "short", "short40_text", "long3", "long200", "long100000", "garbage",
                                     "utf8", "huge", "no_length", "batch"])
                kinds[attack] += 1
                body, msg_id = body_of("workspace/executeCommand", {
                    "command": "mtmc.listTargets", "arguments": ["see Content-Length: 12 here", "pad" * 4]})
                if attack == "json":
                    client.send_raw(b"Content-Length: 5\r\n\r\n{nope")
                elif attack in ("short", "short40_text"):
                    cut = 40 if attack == "short40_text" else rng.randrange(1, 20)
                    client.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) - cut) + body)
                    unreadable.append(msg_id)
                elif attack.startswith("long"):
                    client.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) + int(attack[4:])) + body)
                    owed.append(msg_id)  # the next header ends its body: it is read and answered
                elif attack == "garbage":
                    client.send_raw(b"\x00garbage\xff\r\n" + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))
                elif attack == "utf8":
                    bad = b'{"jsonrpc":"2.0","method":"x\xff","params":null}'
                    client.send_raw(b"Content-Length: %d\r\n\r\n" % len(bad) + bad)
                elif attack == "huge":
                    client.send_raw(b"Content-Length: 99999999999999\r\n\r\n")
                elif attack == "no_length":
                    client.send_raw(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + body)
                    unreadable.append(msg_id)
                else:
                    client.send_raw(frame([{"jsonrpc": "2.0", "method": "x"}]))
            else:
                continue
            sent += 1
        # A last request proves the stream is in step; a too-large frame just before it is then read too.
        owed.append(client.request("workspace/executeCommand", {"command": "mtmc.listTargets", "arguments": []}))
        sent += 1
        deadline = time.monotonic() + 120
        client.wait_for(lambda: all(client.answers[i] for i in owed), max(0.0, deadline - time.monotonic()))
        time.sleep(1.0)  # late duplicates would show up here
        seconds = time.perf_counter() - started
        alive = client.alive()
        client.close()
    log_text = (workspace / "server.log").read_text(errors="replace")

    popups = [n["params"].get("message", "") for n in client.notifications if n["method"] == "window/showMessage"]
    with_traceback = [e for e in client.errors if carries_traceback(e["error"])]
    codes = Counter(e["error"]["code"] for e in client.errors)
    replacements = {str(workspace): "<workspace>", str(REPO): "<checkout>", **({pythonpath: "<pythonpath>"} if pythonpath else {})}
    return without_local_paths({
        "seed": seed, "messages_sent": sent, "seconds": round(seconds, 1),
        "requests_owed": len(owed),
        "answered_once": sum(client.answers[i] == 1 for i in owed),
        "answered_more_than_once": sum(client.answers[i] > 1 for i in owed),
        "unanswered": sum(client.answers[i] == 0 for i in owed),
        "unreadable_frames_answered": sum(client.answers[i] > 0 for i in unreadable),
        "errors_by_code": {str(code): count for code, count in sorted(codes.items())},
        "internal_errors": codes.get(-32603, 0),
        "errors_with_traceback": len(with_traceback),
        "popups_with_traceback": sum(carries_traceback(p) for p in popups),
        "tracebacks_in_server_log": len(re.findall(r"Traceback \(most recent call last\)", log_text)),
        "broken_frames": dict(sorted(kinds.items())),
        "server_alive_after": alive,
        "examples_with_traceback": [e["error"] for e in with_traceback[:3]],
        "internal_error_messages": sorted({e["error"]["message"] for e in client.errors if e["error"]["code"] == -32603}),
    }, replacements)


def framing_attacks(pythonpath: str | None) -> list[dict]:
    """The framing attacks as issue 33 describes them, each against a fresh server: what came back."""
    listing = {"command": "mtmc.listTargets", "arguments": []}

    def request(msg_id: int, arguments=None) -> bytes:
        params = dict(listing, arguments=arguments) if arguments else listing
        return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "workspace/executeCommand", "params": params}).encode()

    def fresh() -> CountingClient:
        workspace = Path(tempfile.mkdtemp(prefix="mtmc-attack-"))
        client = start_server(workspace, pythonpath, subprocess.DEVNULL)
        client.initialize(workspace)
        return client

    outcomes = []
    for too_large_by in (200, 100_000):
        client, first = fresh(), request(100)
        client.send_raw(b"Content-Length: %d\r\n\r\n" % (len(first) + too_large_by) + first)
        later = range(101, 151)
        for msg_id in later:
            client.send_raw(frame(json.loads(request(msg_id))))
        client.wait_for(lambda: all(client.answers[i] for i in later), 10)
        outcomes.append({"attack": f"Content-Length too large by {too_large_by:,}, then 50 requests",
                         "outcome": f"{sum(client.answers[i] == 1 for i in later)} of 50 answered within 10 s"})
        client.process.kill()
    client, body = fresh(), request(300, ["see Content-Length: 12 below", "x" * 8])
    client.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) - 40) + body)
    client.send_raw(frame(json.loads(request(301))))
    answered = client.wait_for(lambda: client.answers[301], 5)
    outcomes.append({"attack": 'a body 40 bytes short holding the text "Content-Length:", then a request',
                     "outcome": f"next request {'answered' if answered else 'lost (no answer in 5 s)'}; "
                                f"errors {[e['error']['code'] for e in client.null_id_errors]}"})
    client.process.kill()
    client = fresh()
    client.send_raw(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + request(400))
    client.wait_for(lambda: client.null_id_errors, 5)
    outcomes.append({"attack": "a header block without Content-Length",
                     "outcome": f"errors {[e['error']['code'] for e in client.null_id_errors]} within 5 s"})
    client.process.kill()
    return outcomes


def without_local_paths(value, replacements: dict[str, str]):
    """``value`` with this machine's folders (workspace, checkout, site-packages) named by role, not path."""
    if isinstance(value, str):
        for path, role in replacements.items():
            value = value.replace(path, role)
        return re.sub(r"/[^\s\"']*/site-packages/", "<site-packages>/", value)
    if isinstance(value, dict):
        return {key: without_local_paths(item, replacements) for key, item in value.items()}
    if isinstance(value, list):
        return [without_local_paths(item, replacements) for item in value]
    return value


def markdown(result: dict, label: str) -> str:
    rows = [("frames sent", result["messages_sent"]), ("requests owed an answer", result["requests_owed"]),
            ("answered exactly once", result["answered_once"]),
            ("answered more than once", result["answered_more_than_once"]), ("unanswered", result["unanswered"]),
            ("requests in unreadable frames answered by id", result["unreadable_frames_answered"]),
            ("internal errors (-32603)", result["internal_errors"]),
            ("errors carrying a Python traceback", result["errors_with_traceback"]),
            ("popups carrying a Python traceback", result["popups_with_traceback"]),
            ("tracebacks in the server's own log (stderr)", result["tracebacks_in_server_log"]),
            ("server answers afterwards", result["server_alive_after"])]
    lines = [f"# Protocol fuzz: {label}", "",
             f"`python benchmarks/protocol_fuzz.py --messages ... --seed {result['seed']}`; {result['seconds']} s.", "",
             "| figure | value |", "|---|---:|", *(f"| {name} | {value} |" for name, value in rows), "",
             "Errors by code: " + ", ".join(f"{code}: {count}" for code, count in result["errors_by_code"].items()), "",
             "Broken frames sent: " + ", ".join(f"{kind} {count}" for kind, count in result["broken_frames"].items()), "",
             "Framing attacks (issue 33), each against a fresh server:", "", "| attack | outcome |", "|---|---|",
             *(f"| {a['attack']} | {a['outcome']} |" for a in result.get("framing_attacks", [])), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--pythonpath", default=None, help="run the server from this package folder instead")
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--out", type=Path, default=None, help="folder for <name>.json and <name>.md")
    parser.add_argument("--name", default="fuzz")
    args = parser.parse_args()
    result = run(args.messages, args.seed, args.pythonpath)
    result["framing_attacks"] = framing_attacks(args.pythonpath)
    result["label"] = args.label
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / f"{args.name}.md").write_text(markdown(result, args.label))


if __name__ == "__main__":
    main()
