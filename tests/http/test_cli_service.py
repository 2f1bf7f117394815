"""The service's CLI: flowli apps, keys (hashed, shown once, disabled → 401), users, schedules."""

from __future__ import annotations

import json

import httpx
import pytest

from ..served import everything, flowli, new_app

pytestmark = pytest.mark.e2e


async def test_apps_keys_and_users(service, names):
    billing = names("billing")
    application, admin_key = new_app(service.db, billing)
    assert application == {"id": application["id"], "name": billing} and admin_key.startswith("flk_")
    again = flowli(service.db, "apps", "create", billing)
    assert again.returncode == 2 and "exists already" in again.stderr
    made = flowli(service.db, "keys", "create", billing, "--name", "ci", "--json")
    key = json.loads(made.stdout)
    assert (key["name"], key["role"]) == ("ci", "operator") and key["apiKey"].startswith("flk_")
    listed = flowli(service.db, "keys", "ls", billing)
    assert "ci" in listed.stdout and key["apiKey"] not in listed.stdout and key["apiKey"][:8] in listed.stdout
    # stored hashed: the secret is nowhere in the database
    dump = await everything(service.db)
    assert key["apiKey"] not in dump and admin_key not in dump and key["apiKey"][4:] not in dump
    assert httpx.get(f"{service.url}/pipelines", headers={"X-API-Key": key["apiKey"]}).status_code == 200
    assert flowli(service.db, "keys", "disable", str(key["id"])).returncode == 0
    refused = httpx.get(f"{service.url}/pipelines", headers={"X-API-Key": key["apiKey"]})
    assert refused.status_code == 401 and "disabled" in refused.json()["error"]
    assert flowli(service.db, "keys", "create", names("nope")).returncode == 2
    bad_role = flowli(service.db, "keys", "create", billing, "--role", "root")
    assert bad_role.returncode != 0 and "role" in bad_role.stderr
    user = flowli(service.db, "users", "create", names.email("ops"), "--password-stdin", "--role", "operator",
                  "--app", billing, stdin="correct horse\n")
    assert user.returncode == 0 and names.email("ops") in user.stdout, user.stderr
    assert "correct horse" not in await everything(service.db)


def test_schedules_from_the_cli(service, tmp_path, names):
    billing = names("billing")
    new_app(service.db, billing)
    declared = tmp_path / "p.json"
    declared.write_text(json.dumps({"name": "weekday-report", "stages": [{"stageName": "s", "stageHandlerName": "H"}]}))
    made = flowli(service.db, "schedules", "create", billing, "weekdays", "--cron", "0 9 * * 1-5", "--timezone",
                  "Europe/Berlin", "--pipeline", str(declared))
    assert made.returncode == 0 and "next firing" in made.stdout, made.stderr
    sid = made.stdout.split()[1]
    listed = flowli(service.db, "schedules", "ls", billing)
    assert "weekdays" in listed.stdout and "Europe/Berlin" in listed.stdout
    assert "paused" in flowli(service.db, "schedules", "pause", billing, sid).stdout
    assert "enabled" in flowli(service.db, "schedules", "resume", billing, sid).stdout
    assert flowli(service.db, "schedules", "rm", billing, sid).returncode == 0
    assert "weekdays" not in flowli(service.db, "schedules", "ls", billing).stdout
    bad = flowli(service.db, "schedules", "create", billing, "x", "--cron", "nope", "--pipeline", str(declared))
    assert bad.returncode == 2 and "cron" in bad.stderr


def test_flowli_check_walks_the_whole_path_against_a_running_service(service, billing):
    _, key = billing
    done = flowli(service.db, "check", "--url", service.url, "--api-key", key)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "/healthz 200 ok" in lines[0]
    assert any("through POST /pipelines/idempotent" in line for line in lines)
    assert any("worker: got job first" in line for line in lines)
    assert lines[-1].endswith("Completed")
    down = flowli(service.db, "check", "--url", "http://127.0.0.1:9", "--api-key", key)
    assert down.returncode == 2 and "not reachable" in down.stdout
    wrong = flowli(service.db, "check", "--url", service.url, "--api-key", "flk_wrong")
    assert wrong.returncode != 0
