"""The server's scratch folders when several servers of one process open and close in any order (a test's threads)."""

from __future__ import annotations

import os
import tempfile

from mtmc_lsp.server.scratch import ScratchSpace


def test_servers_that_stop_out_of_order_keep_each_others_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    first, second = ScratchSpace(), ScratchSpace()
    a = first.enter()
    b = second.enter()
    assert a.parent == tmp_path and b.parent == tmp_path  # never one inside the other
    assert tempfile.gettempdir() == str(b)
    first.leave()  # the older server stops first: the newer one's folder stays, and stays the temporary folder
    assert not a.exists() and b.is_dir()
    assert tempfile.gettempdir() == str(b) and os.environ["TMPDIR"] == str(b)
    second.leave()
    assert not b.exists()
    assert tempfile.gettempdir() == str(tmp_path) and os.environ["TMPDIR"] == str(tmp_path)


def test_the_newest_open_folder_is_the_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("TMPDIR", raising=False)
    first, second = ScratchSpace(), ScratchSpace()
    a = first.enter()
    b = second.enter()
    second.leave()
    assert tempfile.gettempdir() == str(a) and os.environ["TMPDIR"] == str(a)
    first.leave()
    assert tempfile.gettempdir() == str(tmp_path) and "TMPDIR" not in os.environ
