"""The pool's writes to a worker are bounded: a worker that stops reading fails its job, never hangs the pool."""

from __future__ import annotations

import os
import time

from mtmc_lsp.optimizer.verify.pool import Worker


def test_a_worker_that_never_reads_its_pipe_fails_the_write_within_the_deadline():
    worker = Worker(None)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    worker._job_w = write_end  # a worker process that never reads: nothing drains the pipe
    try:
        started = time.monotonic()
        error = worker.send({"verdict": "x" * (4 << 20)}, timeout_s=0.5)  # far more than a pipe holds
        assert error is not None and "did not read its pipe" in error
        assert time.monotonic() - started < 5
        # A reader that drains the pipe gets the whole line.
        os.set_blocking(read_end, False)
        while True:
            try:
                if not os.read(read_end, 1 << 20):
                    break
            except BlockingIOError:
                break
        assert worker.send({"event": "small"}, timeout_s=0.5) is None
        assert os.read(read_end, 1 << 16).endswith(b'{"event": "small"}\n')
    finally:
        os.close(read_end)
        os.close(write_end)
        worker.log_path.unlink(missing_ok=True)
