"""The catalog types of the tests: a few AWS-like capabilities whose effects are counted in a
file (one line per effect), so a test can tell how many times each one ran."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from typing_extensions import TypedDict

from flowli import Context, Registry
from flowli.catalog import Prerequisite, RemediationRequired


def effects_file() -> Path:
    return Path(os.environ.get("FLOWLI_TEST_EFFECTS", "/tmp/flowli-effects"))


def fix(bucket: str) -> None:
    """Fix the precondition of ``bucket`` (a file beside the effects: every process sees it)."""
    Path(f"{effects_file()}.fixed-{bucket}").write_text("fixed")


def fixed(bucket: str) -> bool:
    return Path(f"{effects_file()}.fixed-{bucket}").exists()


def effect(name: str) -> None:
    with effects_file().open("a") as f:
        f.write(name + "\n")


def effects() -> list[str]:
    path = effects_file()
    return path.read_text().split() if path.exists() else []


class BucketOut(BaseModel):
    bucket_name: str
    arn: str


class Versioned(TypedDict):
    bucket: str
    versioning: str
    count: int


class Tagged(TypedDict):
    bucket: str
    tags: int


def make_bucket(bucket: str) -> dict[str, Any]:
    effect(f"create:{bucket}")
    return {"bucket_name": bucket, "arn": f"arn:aws:s3:::{bucket}"}


def tag(bucket: str, tagging: dict[str, Any]) -> dict[str, Any]:
    if bucket.startswith("locked") and not fixed(bucket):
        effect(f"tag-refused:{bucket}")
        raise RemediationRequired(f"bucket {bucket} has a legal hold", fix={"action": "release_hold", "bucket": bucket})
    effect(f"tag:{bucket}")
    return {"bucket": bucket, "tags": len(tagging.get("TagSet", []))}


def slow(bucket: str, seconds: float) -> dict[str, Any]:
    """Touch ``bucket`` after ``seconds``, or, while a file ``<effects>.hold-<bucket>`` exists,
    once it is gone (a minute at most): a test that kills the process in the middle holds it."""
    Path(f"{effects_file()}.began-{bucket}").write_text("began")
    hold = Path(f"{effects_file()}.hold-{bucket}")
    if hold.exists():
        deadline = time.monotonic() + 60
        while hold.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        time.sleep(seconds)
    effect(f"slow:{bucket}")
    return {"bucket": bucket}


def flaky(name: str) -> dict[str, Any]:
    effect(f"flaky:{name}")
    if not fixed(name):
        from flowli.domain import NonRetryableError

        raise NonRetryableError(f"{name} is down")
    return {"name": name, "ok": True}


def app(registry: Registry | None = None) -> Registry:
    registry = registry or Registry()

    @registry.workflow("aws.s3.create_bucket", version="1", kind="state_machine", featured=True, scope="library",
                       permissions=["s3:write"], compensate="aws.s3.delete_bucket",
                       prerequisites=[Prerequisite(variant="aws", title="An AWS connection",
                                                   guide="Create a connection, then pass its uuid.")],
                       description="Create an S3 bucket.")
    async def create_bucket(ctx: Context, bucket: str) -> BucketOut:
        return BucketOut(**await ctx.step(make_bucket, bucket))

    @registry.workflow("aws.s3.put_bucket_tagging", scope="library", description="Tag an S3 bucket.")
    async def put_bucket_tagging(ctx: Context, bucket: str, tagging: dict[str, Any]) -> Tagged:
        # the step raises RemediationRequired at once: a fixable precondition is not retried
        from flowli.domain import NO_RETRY

        return await ctx.step(tag, bucket, tagging, retry=NO_RETRY)  # type: ignore[return-value]

    @registry.workflow("aws.s3.delete_bucket", scope="library", description="Delete an S3 bucket.")
    async def delete_bucket(ctx: Context, bucket_name: str) -> dict[str, str]:
        await ctx.step(effect, f"delete:{bucket_name}")
        return {"deleted": bucket_name}

    @registry.workflow("aws.s3.list_buckets", kind="data", featured=True, description="List the S3 buckets.")
    async def list_buckets(ctx: Context, prefix: str = "") -> list[str]:
        return sorted({e.split(":", 1)[1] for e in effects() if e.startswith("create:")
                       and e.split(":", 1)[1].startswith(prefix)})

    @registry.workflow("aws.s3.enable_versioning", scope="library", compensate="aws.s3.suspend_versioning",
                       description="Enable versioning on an S3 bucket.")
    async def enable_versioning(ctx: Context, bucket: str, count: int = 1) -> Versioned:
        await ctx.step(effect, f"version:{bucket}")
        return {"bucket": bucket, "versioning": "Enabled", "count": count}

    @registry.workflow("aws.s3.suspend_versioning", scope="library", description="Suspend versioning.")
    async def suspend_versioning(ctx: Context, bucket: str) -> dict[str, Any]:
        await ctx.step(effect, f"unversion:{bucket}")
        return {"bucket": bucket, "versioning": "Suspended"}

    @registry.workflow("ops.slow_touch", description="Touches a bucket, slowly.")
    async def slow_touch(ctx: Context, bucket: str, seconds: float = 2.0) -> Versioned:
        done = await ctx.step(slow, bucket, seconds)
        return {"bucket": done["bucket"], "versioning": "touched", "count": 1}

    @registry.workflow("ops.flaky", description="Fails until its upstream is fixed.")
    async def flaky_wf(ctx: Context, name: str) -> dict[str, Any]:
        return await ctx.step(flaky, name)

    @registry.workflow("ops.await_clerk", description="Waits for a clerk to answer.")
    async def await_clerk(ctx: Context, note: str) -> Any:
        return await ctx.delegate("clerks", {"note": note})

    @registry.workflow("billing.broken_output", description="Returns what its annotation does not allow.")
    async def broken_output(ctx: Context, amount: int) -> BucketOut:
        return {"bucket_name": amount}  # type: ignore[return-value]

    return registry

registry = app()
"""The registry that `flowli serve --app tests.catalog.app:registry` loads."""
