"""Work run beside the caller: one daemon thread, its result (or its exception) as a future."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def in_background(work: Callable[..., T], *args: Any, name: str) -> Future[T]:
    """``work(*args)`` in a daemon thread named ``name`` (a failure elsewhere does not wait for it to end); its
    ``result()`` waits for it and re-raises its exception in the caller's thread."""
    result: Future[T] = Future()

    def run() -> None:
        try:
            result.set_result(work(*args))
        except BaseException as exc:
            result.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return result
