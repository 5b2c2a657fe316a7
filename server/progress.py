"""Work-done progress for background jobs, with the client's cancel button wired to a threading.Event."""

from __future__ import annotations

import asyncio
import threading
import uuid

from lsprotocol import types


class JobProgress:
    """One background job's progress; safe to ``report`` from worker threads."""

    def __init__(self, ls, title: str):
        self.ls = ls
        self.title = title
        self.cancel = threading.Event()
        self.token: str | None = None
        self._loop = asyncio.get_running_loop()

    async def begin(self, message: str = "") -> "JobProgress":
        self.ls.job_started()
        self.ls.active_jobs.add(self)
        if not self.ls.client_supports("window.work_done_progress"):
            return self
        token = f"mtmc-{uuid.uuid4().hex[:12]}"
        try:
            await self.ls.work_done_progress.create_async(token)
        except Exception as exc:  # the client refused: run without a progress bar
            self.ls.log(f"no progress bar for {self.title}: {exc}", types.MessageType.Log)
            return self
        self.token = token
        self.ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(
            title=self.title, cancellable=True, message=message or None, percentage=0))
        future = self.ls.work_done_progress.tokens.get(token)
        if future is not None:  # window/workDoneProgress/cancel cancels this future
            future.add_done_callback(lambda f: self.cancel.set() if f.cancelled() else None)
        return self

    def report(self, message: str, percentage: int | None = None) -> None:
        """Thread-safe: forwards to the event loop."""
        if self.token is None or self.ls.closing:
            return
        value = types.WorkDoneProgressReport(message=message, percentage=percentage)
        try:
            self._loop.call_soon_threadsafe(self.ls.work_done_progress.report, self.token, value)
        except RuntimeError:  # the event loop is closed: the server is exiting
            pass

    def end(self, message: str) -> None:
        """Call on the event loop."""
        if self.token is not None and not self.ls.closing:
            self.ls.work_done_progress.end(self.token, types.WorkDoneProgressEnd(message=message))
            self.ls.work_done_progress.tokens.pop(self.token, None)
            self.token = None
        self.ls.active_jobs.discard(self)
        self.ls.job_finished()
