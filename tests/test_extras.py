"""``pip install flowli`` is the core: an embedded user's workflows, the engine worker, the CLI's
own commands. The HTTP service, the dashboard and the MCP server (``flowli[server]``), the MCP SDK
(``flowli[mcp]``) and the HTTP client of pipelines (``flowli[client]``) are extras. Proved in
processes where the extras' packages cannot be imported: the demo runs, the engine's modules load,
and each command that needs an extra says which, in one sentence, without a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from flowli.cli._app import EXTRAS  # private: the one table of which module comes with which extra

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
SERVER_MODULES = sorted(EXTRAS)


def without(blocked: list[str], code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a process where the modules ``blocked`` (and their submodules) are not installed."""
    guard = f"""
import sys
class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Missing())
"""
    return subprocess.run([sys.executable, "-c", guard + code], cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)


def cli(*args: str) -> str:
    return f"import runpy; sys.argv = ['flowli', *{list(args)!r}]; runpy.run_module('flowli.cli', run_name='__main__')"


def test_the_core_dependencies_hold_none_of_the_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[<>=;\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    extras = project["optional-dependencies"]
    for extra in ("server", "mcp", "client"):
        named = {re.split(r"[<>=;\[ ]", d, maxsplit=1)[0].lower() for d in extras[extra]}
        assert not core & named, f"{extra}: {core & named} in the core too"
    assert "flowli" in {re.split(r"[<>=;\[ ]", d, maxsplit=1)[0] for d in extras["dev"]}  # dev installs the server


def test_the_demo_and_the_engine_need_no_extra(tmp_path: Path):
    done = without(SERVER_MODULES, cli("demo"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "invoice_approval" in done.stdout and "completed" in done.stdout
    loaded = without(SERVER_MODULES, "import flowli, flowli.engine, flowli.pipelines, flowli.catalog, flowli.services,"
                                     " flowli.metrics, flowli.patterns; print('loaded')", tmp_path)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "loaded", loaded.stderr


@pytest.mark.parametrize("command, extra", [(("serve", "--port", "0"), "server"), (("mcp",), "mcp"),
                                            (("check", "--api-key", "flk_x"), "client")])
def test_a_command_that_needs_an_extra_says_which(tmp_path: Path, command: tuple[str, ...], extra: str):
    done = without(SERVER_MODULES, cli(*command), tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"needs flowli's {extra} extra" in done.stderr and f"pip install 'flowli[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_client_says_which_extra_it_needs(tmp_path: Path):
    done = without(["httpx"], "import flowli.client", tmp_path)
    assert done.returncode == 1 and "pip install 'flowli[client]'" in done.stderr
