"""The summary of a test run names each reason to skip once, with how many tests it skipped
(the PostgreSQL tests without a server, the DBOS comparisons without the bench extra)."""

from __future__ import annotations

from collections import Counter
from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    for reason, n in sorted(reasons.items()):
        terminalreporter.write_line(f"skipped {n}: {reason}", yellow=True)
