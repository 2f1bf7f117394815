"""D1 and D2: the dashboard of a real ``flowli serve`` with ``--runs`` executions stored (10 000).

- D1: ``GET /runs``, ``/runs?status=Running`` (90 % of the runs, pipelines in their own words:
  read from their index), ``?status=Cancelled`` (10 %) and
  ``/runs/{eid}`` (a pipeline run's page): ``--requests`` (200) sequential requests each, logged in,
  on one keep-alive connection on loopback; p50, p99 ms. No ``Server-Timing`` is sent: the figure is
  the client's wall time (send to last byte), a loopback round trip included; ``/healthz`` is the floor.
- D2: headless ``/usr/bin/chromium`` (playwright), logged in through the form, on a pipeline run's
  page; ``--appends`` (20) times ``POST /pipelines/{id}/pause`` or ``/resume`` (a signal: journal
  entries), timed from just before the call (its round trip included, and given alone) to a new row
  in ``#timeline-rows``: p50. No row within 5 s is a failure, counted in the line.
- D3 (``--d3``, SQLite only): the page of one run whose journal holds 50 000 entries (a
  ``bench.long`` run of ``--steps`` (24 999) steps, from ``bench/dash_app.py``, started over
  ``POST /catalog/runs`` and run to its end by the service's worker): ``/runs/{eid}`` (the newest
  200), filtered by ``kind``, ``attempt`` and ``frame``, and its older page (``before``), as D1
  (5 warm-ups, then ``--requests`` (30) per page and round); then, in-process on the same file
  with the service stopped, ``engine.status`` and ``engine.journal`` timed alone, the page through
  the ASGI app without a socket, and one cProfile of it: where the page's time goes.

``python bench/dashboard.py [--runs 10000] [--rounds 3] [--backend sqlite,postgresql]``: a JSON line
per round and case, then the medians, to ``--out`` (``bench/RESULTS-dashboard.jsonl``) and stdout.
The runs are one-stage pipelines made over HTTP (no worker: they stay suspended), every tenth
cancelled; PostgreSQL gets a fresh database on ``FLOWLI_BENCH_POSTGRES``'s server, dropped after.
``python bench/dashboard.py --d3 [--steps 24999] [--port 8133]`` runs D3 alone and appends its
lines to ``--out`` (D1's and D2's stay).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import html
import io
import json
import logging
import os
import pstats
import re
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
# run as a script, sys.path[0] is bench/, whose http.py would shadow the standard library's http
sys.path[:] = [str(ROOT), *(x for x in sys.path if Path(x or ".").resolve() != ROOT / "bench")]
import httpx  # noqa: E402

from bench import targets  # noqa: E402
from bench.dash_app import registry  # noqa: E402
from bench.run import loadavg, machine, versions  # noqa: E402

EMAIL, PASSWORD = "ann@example.com", "pw-pw-pw-pw"
BODY = {"name": "invoice", "stages": [{"stageName": "load", "stageHandlerName": "LoadHandler", "input": "{}"}]}
WAIT_ROW = """n => new Promise(done => {
  const rows = document.getElementById("timeline-rows"), more = () => rows.children.length > n;
  if (more()) return done(true);
  const seen = new MutationObserver(() => { if (more()) { seen.disconnect(); done(true); } });
  seen.observe(rows, {childList: true});
  setTimeout(() => { seen.disconnect(); done(more()); }, 5000);
})"""
D3_APP = "bench.dash_app:registry"
D3_STEPS = 24_999
"""Each step appends frame.started and frame.completed; with execution.started and .completed, 50 000 entries."""


def _cli(db: str, *args: str, stdin: str | None = None) -> str:
    return subprocess.run([sys.executable, "-m", "flowli.cli", "--db", db, *args], input=stdin, capture_output=True,
                          text=True, check=True, timeout=120).stdout


@contextlib.contextmanager
def served(db: str, port: int, log: Path, app: str | None = None) -> Iterator[tuple[str, str]]:
    """``flowli serve --port [--app]`` on ``db`` with the application billing and an operator: (url, key)."""
    key = json.loads(_cli(db, "apps", "create", "billing", "--json"))["apiKey"]
    _cli(db, "users", "create", EMAIL, "--password-stdin", "--role", "operator", "--app", "billing", stdin=PASSWORD)
    with log.open("w") as errors:
        proc = subprocess.Popen([sys.executable, "-m", "flowli.cli", "--db", db, "serve", "--port", str(port),
                                 *(["--app", app] if app else [])], stdout=subprocess.PIPE, stderr=errors, text=True)
    failed = True
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("listening on "), f"serve: {line!r}"
        yield line.split("listening on ", 1)[1].strip(), key
        failed = False
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        text = log.read_text()
        if failed or "Traceback" in text:
            print(f"--- serve's log, {log.name} (its end) ---\n{text[-4000:]}", file=sys.stderr)


def login(client: httpx.Client) -> None:
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)
    r = client.post("/login", data={"csrf": csrf.group(1) if csrf else "", "email": EMAIL, "password": PASSWORD})
    assert r.status_code == 303 and "flowli_session" in client.cookies, f"login: {r.status_code} {r.text[:300]}"


def checked(r: httpx.Response) -> httpx.Response:
    if r.status_code != 200:
        raise RuntimeError(f"GET {r.request.url.path}?{r.request.url.query.decode()} -> {r.status_code}: {r.text[:500]}")
    return r


def counts(client: httpx.Client) -> dict[str, int]:
    return {s: int(n) for s, n in re.findall(r'class="status tone-\w+">(\w+)</span> (\d+)', checked(client.get("/runs")).text)}


async def seed(url: str, key: str, n: int) -> float:
    """``n`` pipelines from 8 connections (one client each), every tenth cancelled: seconds taken."""
    t0 = time.perf_counter()
    clients = [httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=120) for _ in range(8)]

    async def creator(c: httpx.AsyncClient, numbers: range) -> None:
        for i in numbers:
            pid = (await c.post("/pipelines", json=BODY)).raise_for_status().json()["id"]
            if i % 10 == 9:
                (await c.post(f"/pipelines/{pid}/cancel")).raise_for_status()

    await asyncio.gather(*(creator(c, range(k, n, len(clients))) for k, c in enumerate(clients)))
    await asyncio.gather(*(c.aclose() for c in clients))
    return time.perf_counter() - t0


def percentiles(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50_ms": round(statistics.median(ms), 2), "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
            "max_ms": round(ms[-1], 2)}


def d1(client: httpx.Client, pages: dict[str, str], requests: int, workload: str = "D1") -> list[dict[str, Any]]:
    lines = []
    for name, path in pages.items():
        for _ in range(5):
            checked(client.get(path))  # warm: templates, caches, the connection
        times = []
        for _ in range(requests):
            t0 = time.perf_counter()
            r = client.get(path)
            times.append((time.perf_counter() - t0) * 1000)
            checked(r)
        lines.append({"workload": workload, "page": name, "path": path, "n": requests, "bytes": len(r.content),
                      **percentiles(times)})
    return lines


async def d2(url: str, key: str, eid: str, pid: int, appends: int) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw, httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            await page.goto(f"{url}/login")
            await page.get_by_label("Email").fill(EMAIL)
            await page.get_by_label("Password").fill(PASSWORD)
            await page.get_by_role("button", name="Log in").click()
            await page.wait_for_url("**/overview")  # the first page after login
            await page.goto(f"{url}/runs/{eid}")
            shown, api_ms, failures, paused = [], [], [], False
            for i in range(appends + 1):  # the first is a warm-up: the stream is open once it shows
                await asyncio.sleep(0.3)  # the last append's batches have all arrived
                before = await page.locator("#timeline-rows > tr").count()
                seen = asyncio.ensure_future(page.evaluate(WAIT_ROW, before))
                await asyncio.sleep(0.05)  # the observer is in place (it also counts rows already there)
                t0 = time.perf_counter()
                r = await api.post(f"/pipelines/{pid}/{'resume' if paused else 'pause'}")
                t_api = time.perf_counter()
                r.raise_for_status()
                paused = not paused
                if not await seen:
                    failures.append(f"append {i}: no new row within 5 s ({before} rows before)")
                    continue
                if i:
                    shown.append((time.perf_counter() - t0) * 1000)
                    api_ms.append((t_api - t0) * 1000)
        finally:
            await browser.close()
    out: dict[str, Any] = {"workload": "D2", "page": "run, live", "n": appends, "failures": len(failures)}
    if failures:
        out["errors"] = failures[:5]
    if shown:
        out.update(percentiles(shown), api_p50_ms=round(statistics.median(api_ms), 2))
    return out


def _pg(tool: str, server: str, *args: str) -> None:
    u = urlsplit(server)
    subprocess.run([tool, "-h", u.hostname or "127.0.0.1", "-p", str(u.port or 5432), "-U", u.username or "postgres",
                    *args], check=tool == "createdb")


def one_backend(backend: str, args: argparse.Namespace, tmp: str, header: dict[str, Any]) -> list[dict[str, Any]]:
    server, dbname = targets.postgres_server(), f"bench_dash_{secrets.token_hex(4)}"
    if backend == "sqlite":
        db = f"sqlite:///{tmp}/dash.db"
    else:
        db = urlunsplit(urlsplit(server)._replace(path=f"/{dbname}"))
        _pg("createdb", server, dbname)
    lines: list[dict[str, Any]] = []
    try:
        with served(db, args.port, Path(tmp) / f"serve-{backend}.log") as (url, key):
            seed_s = asyncio.run(seed(url, key, args.runs))
            with httpx.Client(base_url=url, timeout=60) as client:
                login(client)
                deadline = time.monotonic() + 60
                # the runs page counts pipelines by their own statuses ("Cancelled")
                while (got := counts(client)).get("Cancelled", 0) < args.runs // 10:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the runs page counts {got} after 60 s: not {args.runs // 10} Cancelled")
                    time.sleep(0.5)
                target = client.post("/pipelines", json={**BODY, "name": "d2-target"},
                                     headers={"X-API-Key": key}).raise_for_status().json()["id"]
                for _ in range(100):  # until the new pipeline has run to its suspension
                    eids = re.findall(r'href="/runs/([^"?/]+)"', checked(client.get("/runs?status=Running")).text)
                    if "Pipeline d2-target" in checked(client.get(f"/runs/{eids[0]}")).text:
                        break
                    time.sleep(0.1)
                else:
                    raise RuntimeError("the d2-target pipeline is not the newest running pipeline")
                eid = eids[0]  # D1's run page: the newest of the others (a pipeline waiting for its worker, 4 entries)
                pages = {"healthz": "/healthz", "runs": "/runs", "runs?status=Running": "/runs?status=Running",
                         "runs?status=Cancelled": "/runs?status=Cancelled", "run": f"/runs/{eids[1]}"}
                base = {"backend": backend, "stored": sum(got.values()), "counts": got, "seed_s": round(seed_s, 1)}
                for k in range(1, args.rounds + 1):
                    found = d1(client, pages, args.requests or 200)
                    found.append(asyncio.run(d2(url, key, eid, target, args.appends)))
                    for line in found:
                        lines.append({**line, **base, "round": k, "loadavg": loadavg(), **header})
                        emit(lines[-1], args.out)
    finally:
        if backend != "sqlite":
            _pg("dropdb", server, "--if-exists", "--force", dbname)
    return lines


def seed_long(url: str, key: str, db: str, steps: int) -> tuple[str, float]:
    """A ``bench.long`` run of ``steps`` steps started over the catalog and waited for: (eid, seconds)."""
    path = urlsplit(db).path[1:]
    with httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=60) as api:
        t0 = shown = time.perf_counter()
        r = api.post("/catalog/runs", json={"workflow_type": "bench.long", "inputs": {"n": steps}})
        eid = r.raise_for_status().json()["workflow_id"]
        while (status := api.get(f"/catalog/runs/{eid}").raise_for_status().json()["status"]) != "COMPLETED":
            if status != "PENDING":
                raise RuntimeError(f"bench.long {eid}: {status}")
            if time.perf_counter() - shown >= 5:
                shown = time.perf_counter()
                entries = "?"
                with contextlib.suppress(sqlite3.Error), contextlib.closing(
                        sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)) as c:
                    entries = c.execute("SELECT count(*) FROM journal WHERE eid = ?", (eid,)).fetchone()[0]
                print(f"D3 seed: {shown - t0:.0f} s, {entries} of {2 * steps + 2} entries", file=sys.stderr)
            time.sleep(0.5)
    return eid, time.perf_counter() - t0


def shown_of(text: str) -> dict[str, int]:
    """What a run page says it shows: the rows, and the entries matched of the total."""
    found = re.search(r"(\d+) of (\d+) entries", text)
    return {"rows": text.count('<tr class="entry'), "matched": int(found.group(1)) if found else -1,
            "total": int(found.group(2)) if found else -1}


def d3_pages(client: httpx.Client, eid: str) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The five D3 pages: the newest, by kind, attempt and frame (one of the newest page), and the
    older page its "Older entries" link names; with what each shows."""
    newest = checked(client.get(f"/runs/{eid}")).text
    frames = re.findall(r"<td><code>(root/[^<]+)</code></td>", newest)
    older = re.search(r'rel="next" href="([^"]+)"', newest)
    assert frames and older, "the newest page has no frame rows or no link to older entries"
    frame = frames[len(frames) // 2]
    pages = {"run": f"/runs/{eid}", "run?kind=frame.completed": f"/runs/{eid}?kind=frame.completed",
             "run?attempt=1": f"/runs/{eid}?attempt=1", "run?frame=": f"/runs/{eid}?frame={quote(frame, safe='/')}",
             "run?before=": f"/runs/{eid}{html.unescape(older.group(1))}"}
    return pages, {name: shown_of(checked(client.get(path)).text) for name, path in pages.items()}


def cumulative(stats: pstats.Stats, names: dict[str, tuple[str, str]]) -> dict[str, float | None]:
    """The cumulative ms of the functions ``names`` (label: (file's tail, function)) in ``stats``."""
    out = {}
    for label, (tail, fn) in names.items():
        got = [v[3] for (file, _, name), v in stats.stats.items()  # type: ignore[attr-defined]
               if file.endswith(tail) and name == fn]
        out[label] = round(max(got) * 1000, 1) if got else None
    return out


PROFILED = {"route, on the loop": ("dashboard/_run.py", "run"), "loop idle (the reader thread works)":
            ("~", "<method 'poll' of 'select.epoll' objects>"), "steps_of": ("catalog/_runs.py", "steps_of"),
            "remediation": ("catalog/_runs.py", "remediation"), "row() x entries": ("dashboard/_run.py", "row"),
            "sort": ("~", "<method 'sort' of 'list' objects>"), "template render": ("jinja2/environment.py", "render")}
"""What the cProfile of a page reports (the event loop's thread only: the SQLite store reads on a thread
of its own, so ``engine.journal`` shows there as the loop waiting in epoll)."""
DECODED = {"entry_record": ("store/_codec.py", "entry_record"), "unprov": ("store/_codec.py", "unprov"),
           "unjs": ("store/_codec.py", "unjs")}


async def d3_inside(db: str, eid: str, repeat: int) -> dict[str, Any]:
    """On ``db`` in-process (no socket, no other request): ``engine.status`` and ``engine.journal``
    alone, the page through the ASGI app, ``row()`` over the journal, and one cProfile of the page."""
    import flowli
    from flowli.dashboard import Dashboard
    from flowli.dashboard._run import row
    from flowli.http import create_app
    from flowli.pipelines import install
    from flowli.store import _codec

    install(registry)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line a request otherwise

    async def ms(call: Any, n: int) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await call()
            times.append((time.perf_counter() - t0) * 1000)
        return round(statistics.median(times), 2)

    async with await flowli.connect(db, registry) as engine:
        await engine.journal(eid, application="billing")  # warm: connections, the page cache
        out: dict[str, Any] = {"status_ms": await ms(lambda: engine.status(eid, application="billing"), 3 * repeat),
                               "journal_ms": await ms(lambda: engine.journal(eid, application="billing"), repeat)}
        journal = await engine.journal(eid, application="billing")
        out["entries"] = len(journal)

        async def made_rows() -> None:
            [row(e) for e in journal]

        out["rows_ms"] = await ms(made_rows, repeat)
        asgi = create_app(engine, pages=lambda routes, services: Dashboard(routes, engine, services))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://127.0.0.1",
                                     timeout=120) as client:
            csrf = re.search(r'name="csrf" value="([^"]+)"', (await client.get("/login")).text)
            r = await client.post("/login", data={"csrf": csrf.group(1) if csrf else "", "email": EMAIL,
                                                  "password": PASSWORD})
            assert r.status_code == 303, f"login: {r.status_code} {r.text[:300]}"
            for _ in range(3):
                (await client.get(f"/runs/{eid}")).raise_for_status()
            out["page_ms"] = await ms(lambda: client.get(f"/runs/{eid}"), repeat)
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            (await client.get(f"/runs/{eid}")).raise_for_status()
            prof.disable()
            out["profiled_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    stats = pstats.Stats(prof, stream=(text := io.StringIO()))
    out["profile_cumulative_ms"] = cumulative(stats, PROFILED)
    stats.sort_stats("tottime").print_stats(15)
    print(f"--- cProfile of GET /runs/{{eid}} in-process (event-loop thread only) ---\n{text.getvalue()}",
          file=sys.stderr)
    # engine.journal's work on the store's thread, split: the query, then the rows made entries
    with contextlib.closing(sqlite3.connect(urlsplit(db).path[1:])) as conn:
        sql = f"SELECT {_codec.ENTRY_COLUMNS} FROM journal WHERE eid = ? AND seq > 0 ORDER BY seq"
        fetch, decode = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            rows = conn.execute(sql, (eid,)).fetchall()
            t1 = time.perf_counter()
            [_codec.entry_record(r) for r in rows]
            fetch.append((t1 - t0) * 1000)
            decode.append((time.perf_counter() - t1) * 1000)
        prof = cProfile.Profile()
        prof.enable()
        [_codec.entry_record(r) for r in rows]
        prof.disable()
    out.update(sql_fetch_ms=round(statistics.median(fetch), 2), decode_ms=round(statistics.median(decode), 2),
               decode_cumulative_ms=cumulative(pstats.Stats(prof), DECODED),
               journal_chars=sum(len(str(x)) for r in rows for x in r if x is not None))
    return out


def one_d3(args: argparse.Namespace, tmp: str, header: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """D3's lines, a round and page each, and its in-process line."""
    db = f"sqlite:///{tmp}/dash-d3.db"
    lines: list[dict[str, Any]] = []
    with served(db, args.port, Path(tmp) / "serve-d3.log", app=D3_APP) as (url, key):
        eid, seed_s = seed_long(url, key, db, args.steps)
        with httpx.Client(base_url=url, timeout=120) as client:
            login(client)
            pages, shown = d3_pages(client, eid)
            base = {"backend": "sqlite", "stored": shown["run"]["total"], "steps": args.steps, "eid": eid,
                    "seed_s": round(seed_s, 1)}
            for k in range(1, args.rounds + 1):
                for line in d1(client, pages, args.requests or 30, workload="D3"):
                    lines.append({**line, **shown[line["page"]], **base, "round": k, "loadavg": loadavg(), **header})
                    emit(lines[-1], args.out)
    inside = asyncio.run(d3_inside(db, eid, 10))
    return lines, {"workload": "D3", "page": "in-process", "backend": "sqlite", "eid": eid, **inside,
                   "loadavg": loadavg(), **header}


def emit(line: dict[str, Any], out: Path) -> None:
    print(json.dumps(line), flush=True)
    with out.open("a") as f:
        print(json.dumps(line), file=f)


def medians(lines: list[dict[str, Any]], out: Path) -> None:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for line in lines:
        groups.setdefault((line["backend"], line["workload"], line["page"]), []).append(line)
    for (backend, workload, page), rounds in groups.items():
        med: dict[str, Any] = {"workload": workload, "backend": backend, "page": page, "median_of": len(rounds),
                               "stored": rounds[0]["stored"], "failures": sum(r.get("failures", 0) for r in rounds),
                               **{f: rounds[0][f] for f in ("bytes", "rows", "matched") if f in rounds[0]}}
        for f in ("p50_ms", "p99_ms", "api_p50_ms"):
            if got := [r[f] for r in rounds if f in r]:
                med[f], med[f.replace("_ms", "_rounds")] = statistics.median(got), got
        emit(med, out)
        print(f"{workload} {backend} {page}: " + ", ".join(f"{f} {med.get(f)}" for f in
              ("p50_ms", "p99_ms", "api_p50_ms", "failures") if f in med), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10_000, help="executions stored before measuring")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, help="D1 (200), D3 (30): requests per page and round")
    p.add_argument("--appends", type=int, default=20, help="D2: appends per round")
    p.add_argument("--backend", default="sqlite", help="sqlite, postgresql, or both")
    p.add_argument("--d3", action="store_true", help="D3 alone (SQLite): a run of 50 000 journal entries")
    p.add_argument("--steps", type=int, default=D3_STEPS, help="D3: the steps of its run (2 entries each, +2)")
    p.add_argument("--port", type=int, default=8131)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "RESULTS-dashboard.jsonl")
    args = p.parse_args(argv)
    header: dict[str, Any] = {"versions": versions(), "machine": machine()}
    lines: list[dict[str, Any]] = []
    if args.d3:  # appended: D1's and D2's lines stay
        with tempfile.TemporaryDirectory(prefix="flowli-bench-dash-") as tmp:
            lines, inside = one_d3(args, tmp, header)
        medians(lines, args.out)
        emit(inside, args.out)
        return 0
    args.out.write_text("")
    with tempfile.TemporaryDirectory(prefix="flowli-bench-dash-") as tmp:
        for backend in args.backend.split(","):
            if backend == "postgresql":
                header = {**header, "postgresql": asyncio.run(targets.postgres_info())}
            lines += one_backend(backend, args, tmp, header)
    medians(lines, args.out)
    failed = sum(line.get("failures", 0) for line in lines)
    return 1 if failed else 0


if __name__ == "__main__":
    os.chdir(ROOT)
    raise SystemExit(main())
