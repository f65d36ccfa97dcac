"""Producer scenarios: the `ojs.Client` calls a service makes to submit and manage jobs."""

from __future__ import annotations

import re
import secrets
import time
import uuid
from datetime import datetime

import pytest

import ojs
from conftest import AUTH_HEADERS, HTTP_TIMEOUT, OJS_URL, iso_in, unique_queue, wait_until

def uuid7() -> str:
    """A fresh, well-formed UUIDv7 (RFC 9562) that names no job."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(secrets.token_bytes(10), "big")
    value = (ms << 80) | (0x7 << 76) | ((rand >> 68) & 0xFFF) << 64 | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


# --- System ---------------------------------------------------------------------------


async def test_health(client: ojs.Client) -> None:
    health = await client.health()
    # The SDK hands back {"_raw": ..., "_content_type": ...} instead of the parsed body
    # when the response's Content-Type does not contain "application/json".
    assert "_raw" not in health, f"SDK did not parse the health body: {health!r}"
    assert health["status"] == "ok"


async def test_client_with_own_user_agent() -> None:
    # Users pass their own headers (README: headers={"Authorization": ...}); one naming
    # the calling service in User-Agent must not change how the SDK reads answers.
    async with ojs.Client(
        OJS_URL,
        timeout=HTTP_TIMEOUT,
        headers={"User-Agent": "billing-service/2.3", **AUTH_HEADERS},
    ) as custom:
        health = await custom.health()
        assert "_raw" not in health, f"SDK did not parse the health body: {health!r}"
        job = await custom.enqueue("py.agent", [1], queue=unique_queue("agent"))
        assert (await custom.get_job(job.id)).state == ojs.JobState.AVAILABLE


async def test_manifest(client: ojs.Client) -> None:
    manifest = await client.manifest()
    assert "_raw" not in manifest, f"SDK did not parse the manifest body: {manifest!r}"
    assert str(manifest["ojs_version"]).startswith("1.")
    assert "http" in manifest["protocols"]
    assert isinstance(manifest["capabilities"], dict)
    assert isinstance(manifest["implementation"]["name"], str)


# --- PUSH / INFO / CANCEL ---------------------------------------------------------------


async def test_push_with_options_and_info(client: ojs.Client) -> None:
    queue = unique_queue("opts")
    job = await client.enqueue(
        "py.options",
        [{"n": 1}, "x"],
        queue=queue,
        priority=7,
        meta={"trace_id": "trace-py-1", "source": "sdk-python"},
        tags=["alpha", "beta"],
        timeout_ms=15000,
        expires_at="2099-01-01T00:00:00Z",
        retry=ojs.RetryPolicy(
            max_attempts=4,
            initial_interval="PT1S",
            backoff_coefficient=2.0,
            max_interval="PT10S",
            jitter=False,
        ),
    )
    assert UUID_RE.match(job.id), job.id
    assert job.type == "py.options"
    assert job.state == ojs.JobState.AVAILABLE
    assert job.queue == queue
    assert job.priority == 7
    assert job.max_attempts == 4
    assert job.tags == ["alpha", "beta"]
    assert job.meta.get("trace_id") == "trace-py-1"

    info = await client.get_job(job.id)
    assert info.id == job.id
    assert info.state == ojs.JobState.AVAILABLE
    assert info.args == [{"n": 1}, "x"]
    assert info.queue == queue
    assert info.priority == 7
    assert info.attempt == 0
    assert info.max_attempts == 4
    assert info.tags == ["alpha", "beta"]
    assert info.meta.get("source") == "sdk-python"
    assert isinstance(info.created_at, datetime)
    assert isinstance(info.enqueued_at, datetime)
    assert info.timeout_ms == 15000
    assert info.expires_at == datetime.fromisoformat("2099-01-01T00:00:00+00:00")
    assert info.retry is not None
    assert (info.retry.max_attempts, info.retry.backoff_coefficient, info.retry.jitter) == (4, 2.0, False)


async def test_push_scheduled(client: ojs.Client) -> None:
    queue = unique_queue("sched")
    when = iso_in(60)
    job = await client.enqueue("py.scheduled", [1], queue=queue, delay_until=when)
    assert job.state == ojs.JobState.SCHEDULED
    info = await client.get_job(job.id)
    assert info.state == ojs.JobState.SCHEDULED
    assert info.scheduled_at is not None
    want = datetime.fromisoformat(when.replace("Z", "+00:00"))
    assert abs((info.scheduled_at - want).total_seconds()) < 1.0, info.scheduled_at
    # A scheduled job can be cancelled before it ever runs.
    cancelled = await client.cancel_job(job.id)
    assert cancelled.state == ojs.JobState.CANCELLED


async def test_push_unique_rejects_duplicate(client: ojs.Client) -> None:
    queue = unique_queue("uniq")
    policy = ojs.UniquePolicy(keys=["type", "queue", "args"], period="PT1H", on_conflict="reject")
    first = await client.enqueue("py.unique", ["same"], queue=queue, unique=policy)
    assert first.state == ojs.JobState.AVAILABLE
    with pytest.raises(ojs.DuplicateJobError) as err:
        await client.enqueue("py.unique", ["same"], queue=queue, unique=policy)
    assert err.value.status_code == 409
    assert err.value.code == "duplicate"
    # Different args are a different job.
    other = await client.enqueue("py.unique", ["other"], queue=queue, unique=policy)
    assert other.id != first.id


async def test_batch_push(client: ojs.Client) -> None:
    queue = unique_queue("batch")
    jobs = await client.enqueue_batch(
        [
            ojs.JobRequest(type="py.batch", args=[0], queue=queue),
            ojs.JobRequest(type="py.batch", args=[1], queue=queue, priority=3),
            ojs.JobRequest(type="py.batch.other", args=[2], queue=queue, tags=["t"]),
        ]
    )
    assert len(jobs) == 3
    assert len({j.id for j in jobs}) == 3
    assert [j.type for j in jobs] == ["py.batch", "py.batch", "py.batch.other"]
    for j in jobs:
        assert UUID_RE.match(j.id), j.id
        assert j.queue == queue
        assert j.state == ojs.JobState.AVAILABLE
    for i, j in enumerate(jobs):
        info = await client.get_job(j.id)
        assert info.args == [i]
        assert info.queue == queue
    assert (await client.get_job(jobs[1].id)).priority == 3
    assert (await client.get_job(jobs[2].id)).tags == ["t"]


async def test_info_unknown_job(client: ojs.Client) -> None:
    with pytest.raises(ojs.JobNotFoundError) as err:
        await client.get_job(uuid7())
    assert err.value.status_code == 404


async def test_cancel(client: ojs.Client) -> None:
    queue = unique_queue("cancel")
    job = await client.enqueue("py.cancel", [], queue=queue)
    cancelled = await client.cancel_job(job.id)
    assert cancelled.id == job.id
    assert cancelled.state == ojs.JobState.CANCELLED
    assert (await client.get_job(job.id)).state == ojs.JobState.CANCELLED
    # Cancelling a job in a terminal state is a 409.
    with pytest.raises(ojs.OJSAPIError) as err:
        await client.cancel_job(job.id)
    assert err.value.status_code == 409


# --- Cron -----------------------------------------------------------------------------


async def _cron_names(client: ojs.Client) -> list[str]:
    """Every registered cron name, paging through the SDK's list call (bounded)."""
    names: list[str] = []
    offset = 0
    for _ in range(20):
        page = await client.list_cron_jobs(limit=50, offset=offset)
        assert "_raw" not in page, f"SDK did not parse the cron list: {page!r}"
        items = page["cron_jobs"]
        names += [c["name"] for c in items]
        if len(items) < 50:
            break
        offset += 50
    return names


async def test_cron_register_list_delete(client: ojs.Client) -> None:
    name = f"py-cron-{uuid.uuid4().hex[:8]}"
    queue = unique_queue("cron")
    created = await client.register_cron_job(
        name,
        "*/5 * * * *",
        "py.cron.tick",
        ["tick"],
        timezone="UTC",
        queue=queue,
        meta={"owner": "sdk-python"},
        retry=ojs.RetryPolicy(max_attempts=2, jitter=False),
    )
    assert "_raw" not in created, f"SDK did not parse the cron reply: {created!r}"
    cron = created["cron_job"]
    assert cron["name"] == name
    assert cron["cron"] == "*/5 * * * *"
    assert cron["type"] == "py.cron.tick"
    assert cron.get("next_run_at")

    assert name in await _cron_names(client)

    await client.unregister_cron_job(name)
    assert name not in await _cron_names(client)
    with pytest.raises(ojs.JobNotFoundError):
        await client.unregister_cron_job(name)


# --- Queues ---------------------------------------------------------------------------


async def test_queue_list_pause_resume_stats(client: ojs.Client, transport) -> None:
    # list_queues() takes no paging parameters and reads only the first page, which the
    # binding caps at 50 by default (section 17). The server lists queues by name, so
    # this queue's name sorts first (newer runs first) to stay on page one however many
    # queues earlier runs left on the same table.
    queue = f"0{9_999_999_999 - int(time.time()):010d}-{unique_queue('queues')}"
    a = await client.enqueue("py.queue", [1], queue=queue)
    await client.enqueue("py.queue", [2], queue=queue)

    names = {q.name: q for q in await client.list_queues()}
    assert queue in names, f"{queue} missing from list_queues"
    assert names[queue].status == "active"

    def stats_show(status: str, available: int):
        async def probe():
            s = await client.queue_stats(queue)
            return (s.queue == queue and s.status == status and s.available == available), s

        return probe

    await wait_until(stats_show("active", 2), timeout=30, what="stats: active, 2 available")

    paused = await client.pause_queue(queue)
    assert "_raw" not in paused, f"SDK did not parse the pause reply: {paused!r}"
    assert paused.get("status") == "paused"
    await wait_until(stats_show("paused", 2), timeout=30, what="stats: paused")
    names = {q.name: q for q in await client.list_queues()}
    assert names[queue].status == "paused"
    # A paused queue hands out nothing.
    assert await transport.fetch([queue], count=1, worker_id="py-paused-probe") == []

    resumed = await client.resume_queue(queue)
    assert resumed.get("status") == "active"
    await wait_until(stats_show("active", 2), timeout=30, what="stats: active again")
    got = await transport.fetch([queue], count=1, worker_id="py-resume-probe")
    assert [j.id for j in got] == [a.id]
    await transport.ack(a.id, result={"ok": True})
