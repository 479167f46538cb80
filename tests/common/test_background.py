"""Work beside the caller: its result, and its failure raised where the result is asked for."""

from __future__ import annotations

import threading

import pytest

from eaglequant.common.background import in_background


def test_the_result_comes_from_a_named_daemon_thread() -> None:
    def work(a: int, b: int) -> tuple[int, str, bool]:
        thread = threading.current_thread()
        return a + b, thread.name, thread.daemon

    assert in_background(work, 2, 3, name="adding").result(timeout=10) == (5, "adding", True)


def test_a_failure_is_raised_in_the_callers_thread() -> None:
    def work() -> None:
        raise KeyboardInterrupt  # even a BaseException reaches the caller

    future = in_background(work, name="failing")
    with pytest.raises(KeyboardInterrupt):
        future.result(timeout=10)
