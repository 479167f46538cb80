"""Fixtures shared by this folder's tests: ``serve``, the stand-in vLLM servers of ``test_accept_server.py``."""

from tests.measurement.test_accept_server import serve  # noqa: F401
