"""The process that ``tests/forked.py`` forks each CLI call from, run as a script (never imported:
a child must not find the ``tests`` package already imported where a real process would not).

It imports what a call of ``python -m flowli.cli`` imports except the CLI's own modules (see
below), says ``ready`` on its standard output, then serves its socket: for each request (one
JSON line: the arguments, the working directory, the environment, the files of the three
standard streams) it forks a child, answers
the child's pid at once and, once the child has ended, its return code as ``subprocess`` gives it
(``-N`` for a signal). The child takes the request's directory, environment and streams and runs
``flowli.cli`` as ``python -m`` does, then exits as that process would (``atexit`` handlers,
the return code of its ``SystemExit``, a traceback on its standard error). The process ends when
its standard input closes (the test process that started it has gone).

``python tests/zygote.py SOCKET``
"""

from __future__ import annotations

import sys

del sys.path[0]  # this script's directory, tests/: its packages (tests/http) would hide the library's

import atexit  # noqa: E402 - after the path is the library's
import contextlib  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import traceback  # noqa: E402

import httpx  # noqa: E402, F401
import pydantic  # noqa: E402, F401
import typer._completion_shared  # noqa: E402, F401
import typer.rich_utils  # noqa: E402, F401

import flowli  # noqa: E402 - what every call imports, taken once here
import flowli.catalog  # noqa: E402, F401
import flowli.cli  # noqa: E402, F401
import flowli.pipelines  # noqa: E402, F401
import flowli.store.postgres  # noqa: E402, F401
import flowli.store.sqlite  # noqa: E402, F401

# The CLI's own modules are forgotten, so that each child imports them as a new process does
# (they read its environment when they are imported: the width of their consoles, for one);
# what they import stays.
for _name in [n for n in sys.modules if n == "flowli.cli" or n.startswith("flowli.cli.")]:
    del sys.modules[_name]
del flowli.cli

BASE = [p for p in sys.path if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
"""The interpreter's own path (standard library, site packages) without this process's
``PYTHONPATH``: a child puts its directory and its own ``PYTHONPATH`` before it."""


def child(request: dict[str, object]) -> None:
    """Become the process ``python -m flowli.cli ARGS`` of ``request`` and run it: it ends the
    process with the call's return code."""
    cwd = str(request["cwd"])
    env = dict(request["env"])  # type: ignore[call-overload]
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = [cwd, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p], *BASE]
    for fd, path, flags in ((0, request["stdin"], os.O_RDONLY),
                            (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(str(path), flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = ["-m", *request["args"]]  # type: ignore[misc]  # runpy puts the module's path first
    try:
        runpy.run_module("flowli.cli", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    # the end of a process as the interpreter makes it, without tearing down the modules this
    # process shares with the zygote (what a new interpreter's teardown would free goes with it)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def exit_code(code: object) -> int:
    """The return code of ``SystemExit(code)``: an int as it is, None 0, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd hears it
    waiting: dict[int, socket.socket] = {}
    gc.freeze()  # what was imported stays out of the collector's scans: a child copies fewer pages
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([listener, wake_r, sys.stdin.fileno()], [], [])
        if sys.stdin.fileno() in readable and not os.read(sys.stdin.fileno(), 1):
            return  # the test process has gone
        if wake_r in readable:
            os.read(wake_r, 4096)
            while waiting:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                conn = waiting.pop(pid, None)
                if conn is not None:
                    with conn, contextlib.suppress(OSError):  # a caller that stopped waiting has gone
                        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        if listener in readable:
            conn, _ = listener.accept()
            request = json.loads(conn.makefile("rb").readline())
            pid = os.fork()
            if pid == 0:
                try:  # a child never comes back to this loop: what fails before its call ends it
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for fd in (listener.fileno(), wake_r, wake_w, conn.fileno(),
                               *(c.fileno() for c in waiting.values())):
                        os.close(fd)
                    child(request)
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(1)
            with contextlib.suppress(OSError):
                conn.sendall(f"{pid}\n".encode())
            waiting[pid] = conn


if __name__ == "__main__":
    serve(sys.argv[1])
