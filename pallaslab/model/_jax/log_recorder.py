"""A bounded, thread-safe collector of one JAX logger's lines, for reading an interpreter's
own log (TPU interpret mode's DMAs and semaphores, Mosaic GPU interpret mode's barriers):
a `logging.Handler` attached while active; nothing in JAX is patched."""

from __future__ import annotations

import logging
import threading
from typing import Self


class LogRecorder(logging.Handler):
    """While active (a context manager), keeps the (thread, message) lines `logger` emits,
    up to `max_lines` (then `truncated`); the logger is ours alone meanwhile, so the user's
    log stays quiet."""

    def __init__(self, logger: str, max_lines: int):
        super().__init__(logging.INFO)
        self._logger = logger
        self._max_lines = max_lines
        self._lines: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        self.truncated = False
        self._saved: tuple[int, bool] = (logging.NOTSET, True)

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            if len(self._lines) >= self._max_lines:
                self.truncated = True
                return
            self._lines.append((record.thread or 0, record.getMessage()))

    def __enter__(self) -> Self:
        logger = logging.getLogger(self._logger)
        self._saved = (logger.level, logger.propagate)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger(self._logger)
        logger.removeHandler(self)
        logger.setLevel(self._saved[0])
        logger.propagate = self._saved[1]

    def snapshot(self) -> list[tuple[int, str]]:
        """The lines so far (the run may still be adding some: a stepped run)."""
        with self._lock:
            return list(self._lines)
