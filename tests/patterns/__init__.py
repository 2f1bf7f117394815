"""Tests of ``flowli.patterns`` (delegate, review, saga, fan_out, on_tick), of the review inbox,
of DELEGATE consumers, and of the withdrawal of delegations when an execution is cancelled.

The crash tests here run real worker processes (``tests/crash/worker_main.py``, which imports ``app.py`` as
the module ``app``) on the harness of ``tests/crash``: :class:`PatternWorkers` is its
``Workers`` with this folder's worker script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..crash import WORKER, Workers

APP_DIR = str(Path(__file__).resolve().parent)


class PatternWorkers(Workers):
    """The worker processes of one test, running the workflows of ``tests/patterns/app.py``; each
    runs in the test's folder (its effects files are relative to it)."""

    def spawn(self, name: str, *options: str) -> subprocess.Popen[bytes]:
        ready = self.folder / f"{name}.ready"
        with open(self.folder / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), self.url, "--ready", str(ready), *options],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.folder,
                env={**os.environ, "FLOWLI_TEST_APP_DIR": APP_DIR},  # the workflows of tests/patterns/app.py
            )
        self.procs[name] = proc
        return proc
