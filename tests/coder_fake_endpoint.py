"""A real OpenAI-compatible chat endpoint for tests: an http.server in a thread with scripted answers.

``with FakeChatEndpoint() as endpoint:`` serves ``endpoint.url`` (``http://127.0.0.1:PORT/v1``);
each POST gets the next of ``endpoint.answers`` (an answer text, or ``(status, JSON or bytes)``)
and is recorded in ``endpoint.requests`` as ``(path, body, Authorization header)``. While
``endpoint.hold`` is cleared, answers wait for it (a slow model).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOLD_LIMIT_S = 30.0


def chat_completion(content: str) -> dict:
    """The JSON an OpenAI-compatible server answers for one assistant message."""
    return {"id": "fake", "object": "chat.completion", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]}


def fenced(diff: str) -> str:
    """A diff the way chat models answer: prose around a ```diff fence."""
    return f"Here is the change.\n\n```diff\n{diff}```\n\nThis keeps the kernel's semantics."


# A good answer for the bundled softmax example: a smaller block and one warp (same results).
SOFTMAX_RETILE = fenced("""--- a/softmax.py
+++ b/softmax.py
@@ -34,4 +34,4 @@ def softmax(x: torch.Tensor) -> torch.Tensor:
     y = torch.empty_like(x)
-    BLOCK_SIZE = 128
-    softmax_kernel[(n_rows,)](y, x, n_rows, n_cols, x.stride(0), y.stride(0), BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
+    BLOCK_SIZE = 32
+    softmax_kernel[(n_rows,)](y, x, n_rows, n_cols, x.stride(0), y.stride(0), BLOCK_SIZE=BLOCK_SIZE, num_warps=1)
     return y
""")


class FakeChatEndpoint:
    """``/v1/chat/completions`` on a local port, answering from a script."""

    def __init__(self) -> None:
        self.answers: list = []
        self.requests: list[tuple[str, dict, str | None]] = []
        self.hold = threading.Event()
        self.hold.set()
        self.answered = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append((self.path, body, self.headers.get("Authorization")))
                endpoint.hold.wait(HOLD_LIMIT_S)
                answer = endpoint.answers.pop(0) if endpoint.answers else (500, {"error": {"message": "no answer scripted"}})
                status, reply = answer if isinstance(answer, tuple) else (200, answer)
                if isinstance(reply, str):
                    reply = chat_completion(reply)
                raw = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
                endpoint.answered.set()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeChatEndpoint":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.hold.set()
        self._httpd.shutdown()
        self._httpd.server_close()
