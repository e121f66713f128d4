"""tracking/background.py: writes run in order off the caller's thread; flush waits; failures surface once."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from raytune_fl.tracking.background import SerialWriter, TrackingWriteError


def test_writes_run_in_submission_order_on_another_thread():
    writer, seen, threads = SerialWriter(), [], set()

    def write(value: int) -> None:
        time.sleep(0.002 if value % 3 == 0 else 0)  # uneven durations must not reorder
        seen.append(value)
        threads.add(threading.get_ident())

    for value in range(50):
        writer.submit(write, value)
    writer.flush()
    assert seen == list(range(50))
    assert threads and threading.get_ident() not in threads
    writer.close()


def test_submit_returns_before_the_write_and_flush_waits_for_it():
    writer, gate, done = SerialWriter(), threading.Event(), []
    writer.submit(lambda: (gate.wait(5), done.append(1)))
    assert done == []  # submit did not wait
    gate.set()
    writer.flush()
    assert done == [1]
    writer.close()


def test_a_failed_write_is_raised_once_by_the_next_submit_and_later_writes_go_on():
    writer, seen = SerialWriter(), []

    def fail() -> None:
        raise OSError("database is locked")

    writer.submit(fail)
    writer.submit(seen.append, "skipped")  # queued behind the failure: not written out of context
    writer.flush(raise_error=False)
    assert seen == []
    with pytest.raises(TrackingWriteError, match="OSError: database is locked") as raised:
        writer.submit(seen.append, "never queued")
    assert isinstance(raised.value.__cause__, OSError)
    writer.submit(seen.append, "after")  # raised once: the writer works again
    writer.flush()
    assert seen == ["after"]
    writer.close()


def test_flush_raises_a_failure_and_close_does_not():
    writer = SerialWriter()
    writer.submit(lambda: 1 / 0)
    with pytest.raises(TrackingWriteError, match="ZeroDivisionError"):
        writer.flush()
    writer.flush()  # nothing left to raise
    writer.submit(lambda: 1 / 0)
    writer.close()  # ends quietly: the caller is already on its way out


class _NoStore:  # enough of TrialTracker's RunWriter to construct one; nothing is written in this test
    client, experiment_id = None, "0"


class _NoRecords:  # TrialTracker's records; none is asked for in this test
    def record(self, config: dict, index: int) -> None:
        return None


def test_the_tune_callback_pickles_without_its_thread(tmp_path):
    pytest.importorskip("ray.tune")
    from raytune_fl.tracking.trials import TrialTracker
    from raytune_fl.tune.callbacks import MlflowTrialLogger

    logger = MlflowTrialLogger(TrialTracker(_NoStore(), "parent", 3, _NoRecords()))
    assert logger.writer is logger.writer  # made once, on first use
    restored = pickle.loads(pickle.dumps(logger))
    assert restored._writer is None and restored.trials._pending == []
    assert logger.trials._pending  # the live one still waits for its writer
    logger.writer.close()
