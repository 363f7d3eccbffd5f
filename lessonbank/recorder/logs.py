"""Warnings with a traceback that keep nothing of the agent's thread alive.

A log record logged with ``exc_info`` holds the traceback, and through its frames every caller's locals: a
handler that keeps records (a memory handler, a test's capture) would keep a dropped recorder alive, its writer
thread and spool with it. The recorder's warnings carry the traceback as text instead.
"""

from __future__ import annotations

import logging
import traceback


def warn_with_traceback(log: logging.Logger, msg: str, *args: object) -> None:
    """``log.warning(msg, *args, exc_info=True)`` for the exception being handled, its traceback as text (and an
    exception among ``args`` as its message: it holds its traceback too)."""
    if log.isEnabledFor(logging.WARNING):
        texts = tuple(str(arg) if isinstance(arg, BaseException) else arg for arg in args)
        log.warning(f"{msg}\n%s", *texts, traceback.format_exc().rstrip())
