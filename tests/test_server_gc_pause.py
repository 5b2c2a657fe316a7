"""The cyclic-GC pause around an analysis: nested jobs, and the collector restored as it was."""

from __future__ import annotations

import gc

from mtmc_lsp.server.diagnostics import CyclicGcPause


def test_overlapping_pauses_restore_the_collector_once_the_last_one_ends():
    assert gc.isenabled()
    pause = CyclicGcPause()
    pause.__enter__()
    pause.__enter__()  # a second document's job while the first one runs
    assert not gc.isenabled()
    pause.__exit__(None, None, None)
    assert not gc.isenabled()
    pause.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    pause = CyclicGcPause()
    gc.disable()
    try:
        with pause:
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
