"""``flowli serve --workers N``: N service processes on one listening socket, one engine each, on
one PostgreSQL database. This process binds the socket, starts the N processes (each ``flowli
serve --fd``: it serves the socket it inherits, the kernel hands each connection to one of them),
says ``listening on`` once they all do, relays what they print, and stops them all on SIGTERM or
Ctrl-C (each ends its long polls at once), or when one of them ends on its own.

The processes share nothing but the database: a job created through one reaches a long poll
waiting in another at once, by the store's notifications (PostgreSQL's ``NOTIFY``); leases fence
each execution and each job to one process at a time, as between machines."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

STOP_WITHIN = 30.0
"""Seconds the processes have to stop after SIGTERM before they are killed."""


def supervise(n: int, host: str, port: int, child_args: Sequence[str]) -> int:
    """Serve ``host:port`` with ``n`` processes of ``flowli <child_args> --fd FD``; returns the exit
    code (0 after a stop asked for, else that of the first process that ended on its own)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family, backlog=2048)
    listener.set_inheritable(True)
    bound = listener.getsockname()[1]
    fd = listener.fileno()
    procs = [subprocess.Popen([sys.executable, "-m", "flowli.cli", *child_args, "--fd", str(fd)], pass_fds=(fd,),
                              stdout=subprocess.PIPE, text=True) for _ in range(n)]
    stopping = threading.Event()

    def stop(*_: object) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for proc in procs:  # each says it listens on the socket it was given
            line = proc.stdout.readline() if proc.stdout else ""
            if not line.startswith("listening on "):
                stopping.set()
                break
        if not stopping.is_set():
            print(f"listening on http://{host}:{bound}", flush=True)
            print(f"{n} processes: {', '.join(str(p.pid) for p in procs)}", file=sys.stderr, flush=True)
        relays = [threading.Thread(target=_relay, args=(p,), daemon=True) for p in procs]
        for relay in relays:
            relay.start()
        ended: int | None = None
        while not stopping.is_set():
            for proc in procs:
                if proc.poll() is not None:
                    ended = proc.returncode or 1
                    print(f"flowli serve: process {proc.pid} ended ({proc.returncode}): stopping the others",
                          file=sys.stderr, flush=True)
                    stopping.set()
                    break
            stopping.wait(0.2)
        _stop_all(procs)
        return 0 if ended is None else ended
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        listener.close()


def _relay(proc: subprocess.Popen[str]) -> None:
    """What a process prints after its first line, to this one's output."""
    if proc.stdout is None:
        return
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()


def _stop_all(procs: Sequence[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_WITHIN
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
