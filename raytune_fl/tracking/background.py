"""One background thread that runs tracking writes in the order they were handed over.

Why: Ray Tune holds a trial between two rounds until the driver has handled the round's result, callbacks
included. An MLflow write on that path (a round's metrics ~13 ms on SQLite, a trial's run ~40 ms to open and
~60 ms to close, a network round trip per call on a server) paused every trial by as much; here the trial goes
on while the write happens.

Nothing is lost or reordered: `flush()` waits until everything handed over is written. A write that fails is
kept and raised by the next `submit()` or `flush()`, so a study whose tracking broke stops at its next event
instead of training on unrecorded.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from raytune_fl.errors import RaytuneFLError


class TrackingWriteError(RuntimeError, RaytuneFLError):
    """A tracking write that ran in the background failed; the cause is chained."""


class SerialWriter:
    def __init__(self, name: str = "tracking-writer") -> None:
        self._queue: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, write: Callable[..., Any], *args: Any) -> None:
        """Run `write(*args)` after every write submitted before it."""
        self._raise_if_failed()
        self._queue.put((write, args))

    def flush(self, *, raise_error: bool = True) -> None:
        """Wait for every submitted write; then raise the first failure (once) unless `raise_error` is False."""
        self._queue.join()
        if raise_error:
            self._raise_if_failed()

    def close(self) -> None:
        """Flush (without raising) and end the thread."""
        self.flush(raise_error=False)
        self._queue.put(None)
        self._thread.join()

    def _raise_if_failed(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise TrackingWriteError(f"a tracking write failed: {type(error).__name__}: {error}") from error

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                write, args = item
                if self._error is None:  # after a failure the rest would be written out of context: skipped
                    write(*args)
            except BaseException as error:  # kept for the submitting thread, which decides what it means
                self._error = error
            finally:
                self._queue.task_done()
