"""``python -m flowli.cli ARGS`` as a process forked from one that has imported the CLI already.

The suite calls the CLI some 700 times; a new interpreter spends about 0.3 s of CPU importing
before it does anything, which was a third of the suite's CPU. Each call here is still a process
of its own (its own working directory, environment, standard streams, return code, ``atexit``
handlers and exit), forked from ``tests/zygote.py``, which imported the CLI once. The tests of
what a new interpreter imports and costs (``tests/test_startup.py``) and the long-running
processes (``flowli serve``, workers) start real interpreters.

One zygote per test process, started on the first call and gone with that process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

FLOWLI = [sys.executable, "-m", "flowli.cli"]
"""What each call stands for (the ``args`` of the result)."""

_lock = threading.Lock()
_zygote: tuple[subprocess.Popen[bytes], str] | None = None  # the process and its socket


def _started() -> str:
    """The socket of this process's zygote, started if need be."""
    global _zygote
    with _lock:
        if _zygote is not None and _zygote[0].poll() is None:
            return _zygote[1]
        home = tempfile.mkdtemp(prefix="flowli-zygote-")
        path = os.path.join(home, "s")
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("zygote.py")), path],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=home)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != b"ready":
            proc.kill()
            raise RuntimeError(f"the CLI's zygote did not start (it said {line!r}, exit {proc.wait()})")
        _zygote = (proc, path)
        atexit.register(_stop, proc, home)
        return path


def _stop(proc: subprocess.Popen[bytes], home: str) -> None:
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()  # its end of file: it returns
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)
    if proc.poll() is None:
        proc.kill()
    shutil.rmtree(home, ignore_errors=True)


def run(args: Sequence[str], *, cwd: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
        input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, -m, flowli.cli, *args], capture_output=True, text=True,
    input=input, cwd=cwd, env=env, timeout=timeout)``, the process forked from the zygote: its
    output, standard error and return code (``-N`` when a signal ended it). A call that outlives
    ``timeout`` is killed and raises ``subprocess.TimeoutExpired``, as ``subprocess.run`` does.
    Where processes cannot fork (Windows), a new interpreter, as ``subprocess.run``."""
    full = [*FLOWLI, *args]
    if not hasattr(os, "fork"):
        return subprocess.run(full, cwd=cwd, env=env, input=input, timeout=timeout, capture_output=True, text=True,
                              check=False)
    path = _started()
    if cwd is not None and not os.path.isdir(cwd):
        raise FileNotFoundError(f"no such directory: {os.fspath(cwd)!r}")  # as subprocess.run says it
    with tempfile.TemporaryDirectory(prefix="flowli-call-") as tmp:
        streams = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
        Path(streams["stdin"]).write_text(input or "")
        request = {"args": list(args), "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
                   "env": dict(os.environ if env is None else env), **streams}
        deadline = time.monotonic() + timeout
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            answers = conn.makefile("rb")
            conn.settimeout(timeout)
            pid = int(answers.readline())
            try:
                conn.settimeout(max(0.0, deadline - time.monotonic()))
                code = answers.readline()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(full, timeout, Path(streams["stdout"]).read_text(),
                                                Path(streams["stderr"]).read_text()) from None
        if not code.strip():
            raise RuntimeError(f"the CLI's zygote ended before the call {full!r} did")
        return subprocess.CompletedProcess(full, int(code), Path(streams["stdout"]).read_text(),
                                           Path(streams["stderr"]).read_text())
