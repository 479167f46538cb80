"""Hub errors and mistyped paths as a user meets them on the command line: an httpx2 error is one line and
exit 2 under either huggingface_hub, and a local path that does not exist is not a Hub request."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.as_user import as_user, converted_copy
from tests.conftest import ROOT, vendor_required
from tests.project.test_bad_input import assert_refused


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return converted_copy(tmp_path_factory)


# -- huggingface_hub 2.x raises httpx2's errors, which are not httpx.HTTPError ---------------------------

# An httpx2-style client: its ConnectError derives from its own HTTPError, not from httpx's nor from OSError.
_HTTPX2_REFUSES = """
import sys, types
try:  # huggingface_hub 2.x brings httpx2 (a plain install on Python 3.10 resolves it)
    from httpx2 import ConnectError
except ImportError:  # 1.x, on httpx: a stand-in httpx2 that only raises
    httpx2 = types.ModuleType("httpx2")
    class HTTPError(Exception): pass
    class ConnectError(HTTPError): pass
    httpx2.HTTPError, httpx2.ConnectError = HTTPError, ConnectError
    sys.modules["httpx2"] = httpx2
import huggingface_hub
def refuse(*args, **kwargs):
    raise ConnectError("[Errno 111] Connection refused")
huggingface_hub.HfApi.model_info = refuse
"""


def test_an_httpx2_connect_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {"HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0", "EAGLEQUANT_DISABLE_PROGRESS_BARS": "1"}
    result = as_user("inspect", "org/somewhere", env=env, code=_HTTPX2_REFUSES)
    line = assert_refused(result, ("org/somewhere", "cannot reach the Hub", "Connection refused", "the network"))
    assert "internal error" not in line and "ConnectError" not in line


def test_hub_errors_under_the_huggingface_hub_2_that_the_vllm_venv_holds(tmp_path: Path) -> None:
    """The real second major: ``.venv-vllm`` (made by ``setup.sh --test``) has huggingface_hub 2.x on httpx2 and no
    httpx, so CI runs the Hub's error path under both majors."""
    python = ROOT / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        message = f"no {python} (scripts/setup.sh --test makes it)"
        if vendor_required():
            pytest.fail(message)
        pytest.skip(message)
    code = (
        "import huggingface_hub, sys\n"
        "from eaglequant.hub import client as hub\n"
        "assert huggingface_hub.__version__.startswith('2.'), huggingface_hub.__version__\n"
        "try:\n    hub.resolve_source('org/somewhere')\n"
        "except hub.HubError as exc:\n    print(exc.one_line())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0"}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # port 9: nothing listens
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("org/somewhere: ") and "cannot reach the Hub (http://127.0.0.1:9)" in proc.stdout


# -- a mistyped local path is not a Hub request --------------------------------------------------------

UNREACHABLE_HUB = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"}  # port 9: nothing listens


def test_a_mistyped_path_whose_parent_exists_is_no_such_directory(tmp_path: Path) -> None:
    (tmp_path / "fixtures").mkdir()
    env = {**UNREACHABLE_HUB, "HF_HOME": str(tmp_path / "hf-home")}
    line = assert_refused(
        as_user("inspect", "fixtures/nope", env=env, cwd=tmp_path), ("fixtures/nope", "no such directory")
    )
    assert "hf://fixtures/nope" in line and "Hub (" not in line
    forced = assert_refused(as_user("inspect", "hf://fixtures/nope", env=env, cwd=tmp_path), ("cannot reach the Hub",))
    assert "no local directory" not in forced and "hf://" not in forced


def test_an_unreachable_hub_for_an_org_name_says_no_such_local_directory(tmp_path: Path) -> None:
    env = {**UNREACHABLE_HUB, "HF_HOME": str(tmp_path / "hf-home")}
    line = assert_refused(as_user("inspect", "org/nope", env=env, cwd=tmp_path), ("org/nope", "cannot reach the Hub"))
    assert "no local directory of that name" in line and "check the path" in line


def test_a_missing_dot_path_does_not_exist(tmp_path: Path) -> None:
    line = assert_refused(as_user("inspect", "./nope", cwd=tmp_path), ("./nope", "does not exist"))
    assert "not a directory" not in line
    assert_refused(as_user("explain", "nope", cwd=tmp_path), ("nope: does not exist", "DST"))


def test_verify_names_source_not_src_for_a_missing_source(converted: Path) -> None:
    line = assert_refused(
        as_user("verify", converted, "--source", "/missing"), ("--source", "/missing", "does not exist")
    )
    assert "SRC" not in line
