"""Worker scenarios: the SDK's own `ojs.Worker` (fetch/ack/nack/heartbeat loop and
handler registration), and its lower-level transport where the worker cannot express
the case (a lease left to expire)."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

import ojs
from conftest import (
    AUTH_HEADERS,
    HTTP_TIMEOUT,
    OJS_URL,
    iso_in,
    running_worker,
    unique_queue,
    wait_job_state,
    wait_until,
)

# Retry with a short, exact backoff (no jitter) so the timings can be checked.
FAST_RETRY = dict(initial_interval="PT1S", backoff_coefficient=2.0, max_interval="PT5S", jitter=False)


async def test_handler_result_visible_in_info(client: ojs.Client) -> None:
    queue = unique_queue("result")
    seen: list[ojs.JobContext] = []

    async def add(ctx: ojs.JobContext):
        seen.append(ctx)
        a, b = ctx.args
        return {"sum": a + b, "job": ctx.job_id}

    job = await client.enqueue("py.math.add", [2, 3], queue=queue, meta={"k": "v"})
    async with running_worker([queue], {"py.math.add": add}) as w:
        done = await wait_job_state(client, job.id, {"completed", "discarded"})
        w.assert_no_transport_errors()
    assert done.state == ojs.JobState.COMPLETED
    assert done.result == {"sum": 5, "job": job.id}
    assert done.attempt == 1
    assert done.completed_at is not None
    assert len(seen) == 1
    assert seen[0].attempt == 1
    assert seen[0].meta.get("k") == "v"


async def test_one_mebibyte_job_round_trip(client: ojs.Client) -> None:
    """A job of about 1 MiB (the spec's PL-001 envelope; the server keeps its args in the
    payload bucket) reaches the SDK's worker whole, and its result is read back."""
    queue = unique_queue("large")
    # Random hex: nothing for the server's deflate to shrink below its item.
    blob = os.urandom(500_000).hex()
    seen: list[int] = []

    async def measure(ctx: ojs.JobContext):
        (text,) = ctx.args
        seen.append(len(text))
        return {"length": len(text), "same": text == blob}

    job = await client.enqueue("py.large.measure", [blob], queue=queue)
    async with running_worker([queue], {"py.large.measure": measure}) as w:
        done = await wait_job_state(client, job.id, {"completed", "discarded"}, timeout=30.0)
        w.assert_no_transport_errors()
    assert done.state == ojs.JobState.COMPLETED, done
    assert done.result == {"length": 1_000_000, "same": True}
    assert seen == [1_000_000]
    info = await client.get_job(job.id)
    assert info.args == [blob]


async def test_fail_then_succeed_with_backoff(client: ojs.Client) -> None:
    queue = unique_queue("retry")
    calls: list[tuple[int, float]] = []

    async def flaky(ctx: ojs.JobContext):
        calls.append((ctx.attempt, time.monotonic()))
        if len(calls) == 1:
            raise RuntimeError("transient failure, try again")
        return {"ok": True}

    job = await client.enqueue(
        "py.flaky", [], queue=queue, retry=ojs.RetryPolicy(max_attempts=3, **FAST_RETRY)
    )
    async with running_worker([queue], {"py.flaky": flaky}) as w:
        done = await wait_job_state(client, job.id, {"completed", "discarded"}, timeout=15)
        w.assert_no_transport_errors()
    assert done.state == ojs.JobState.COMPLETED
    assert [a for a, _ in calls] == [1, 2], calls
    assert done.attempt == 2
    assert done.result == {"ok": True}
    # The retry waited for the policy's initial_interval (PT1S, no jitter).
    gap = calls[1][1] - calls[0][1]
    assert 0.9 <= gap <= 7.0, f"retry came {gap:.2f}s after the failure (want ~1s)"
    assert len(done.errors) >= 1, f"INFO shows no recorded error: {done.errors!r}"


async def _dead_letter_ids(client: ojs.Client, queue: str) -> list[str]:
    page = await client.list_dead_letter_jobs(queue=queue, limit=100)
    assert "_raw" not in page, f"SDK did not parse the dead-letter list: {page!r}"
    return [j["id"] for j in page["jobs"]]


async def _probe_dead(client: ojs.Client, queue: str, want: set[str]):
    ids = await _dead_letter_ids(client, queue)
    return want <= set(ids), ids


async def _exhaust(client: ojs.Client, queue: str, policy: ojs.RetryPolicy, n: int) -> list[str]:
    """Pushes `n` jobs whose handler always fails; returns their ids once discarded."""
    calls: Counter[str] = Counter()

    async def always_fails(ctx: ojs.JobContext):
        calls[ctx.job_id] += 1
        raise ValueError(f"permanent failure #{ctx.attempt}")

    jobs = [await client.enqueue("py.doomed", [i], queue=queue, retry=policy) for i in range(n)]
    async with running_worker([queue], {"py.doomed": always_fails}, concurrency=n) as w:
        for job in jobs:
            done = await wait_job_state(client, job.id, {"discarded", "completed"}, timeout=15)
            assert done.state == ojs.JobState.DISCARDED
            assert done.attempt == policy.max_attempts
            assert len(done.errors) >= 1, f"INFO shows no recorded error: {done.errors!r}"
        w.assert_no_transport_errors()
    assert calls == {j.id: policy.max_attempts for j in jobs}, calls
    return [j.id for j in jobs]


async def test_exhaustion_discards(client: ojs.Client) -> None:
    # The SDK's RetryPolicy has no on_exhaustion field, so the spec's default applies:
    # "discard" (ojs-retry.md), i.e. discarded and NOT in the dead letter list.
    queue = unique_queue("exhaust")
    (job_id,) = await _exhaust(client, queue, ojs.RetryPolicy(max_attempts=2, **FAST_RETRY), 1)
    await asyncio.sleep(0.5)
    assert job_id not in await _dead_letter_ids(client, queue)


@dataclass(frozen=True)
class DeadLetterRetryPolicy(ojs.RetryPolicy):
    """RetryPolicy plus `on_exhaustion: "dead_letter"`.

    The SDK's RetryPolicy (src/ojs/retry.py) cannot express on_exhaustion, whose spec
    default is "discard"; a user who wants dead letters has to extend it like this.
    """

    def to_dict(self) -> dict:
        return {**super().to_dict(), "on_exhaustion": "dead_letter"}


async def test_dead_letter_list_retry_delete(client: ojs.Client) -> None:
    queue = unique_queue("dead")
    a, b = await _exhaust(client, queue, DeadLetterRetryPolicy(max_attempts=2, **FAST_RETRY), 2)

    dead = await wait_until(
        lambda: _probe_dead(client, queue, {a, b}), timeout=30, what="both jobs dead-lettered"
    )
    assert {a, b} <= set(dead)

    # Retry one: it is available again with its attempt counter reset.
    retried = await client.retry_dead_letter_job(a)
    assert retried.id == a
    assert retried.state == ojs.JobState.AVAILABLE
    assert retried.attempt == 0
    assert (await client.get_job(a)).state == ojs.JobState.AVAILABLE
    assert a not in await _dead_letter_ids(client, queue)

    # Delete the other: gone from the list; deleting it again is a 404.
    await client.delete_dead_letter_job(b)
    assert b not in await _dead_letter_ids(client, queue)
    with pytest.raises(ojs.JobNotFoundError):
        await client.delete_dead_letter_job(b)


async def test_delayed_job_runs_on_time(client: ojs.Client) -> None:
    queue = unique_queue("delay")
    ran_at: list[datetime] = []

    async def handler(ctx: ojs.JobContext):
        ran_at.append(datetime.now(UTC))
        return None

    when = iso_in(3)
    target = datetime.fromisoformat(when.replace("Z", "+00:00"))
    job = await client.enqueue("py.delayed", [], queue=queue, delay_until=when)
    assert job.state == ojs.JobState.SCHEDULED
    async with running_worker([queue], {"py.delayed": handler}) as w:
        done = await wait_job_state(client, job.id, {"completed"}, timeout=30)
        w.assert_no_transport_errors()
    assert len(ran_at) == 1
    early = (target - ran_at[0]).total_seconds()
    late = (ran_at[0] - target).total_seconds()
    assert early <= 0.05, f"ran {early:.2f}s before delay_until"
    # Never early; "on time" allows the worker's 2 s poll plus a loaded machine.
    assert late <= 5.0, f"ran {late:.2f}s after delay_until (tolerance 5s)"
    assert done.state == ojs.JobState.COMPLETED


async def test_priority_order_with_concurrency_one(client: ojs.Client) -> None:
    queue = unique_queue("prio")
    order: list[int] = []

    async def handler(ctx: ojs.JobContext):
        order.append(ctx.args[0])

    # Pushed lowest first, before the worker starts, so all are waiting together.
    prios = [1, 10, 5, 0, 7]
    jobs = [await client.enqueue("py.prio", [p], queue=queue, priority=p) for p in prios]
    # ...and in the ready index (the strict layer's lag, as on AWS).
    await asyncio.sleep(int(os.environ.get("OJS_INDEX_LAG_MS", "0")) / 1000)
    async with running_worker([queue], {"py.prio": handler}, concurrency=1) as w:
        for j in jobs:
            await wait_job_state(client, j.id, {"completed"}, timeout=30)
        w.assert_no_transport_errors()
    assert order == sorted(prios, reverse=True), order


async def test_expired_lease_is_redelivered(client: ojs.Client, transport) -> None:
    # The Worker heartbeats its jobs, so a lease that runs out is expressed with the
    # SDK's lower-level fetch: claim with a 1 s visibility timeout and never ack.
    queue = unique_queue("lease")
    job = await client.enqueue("py.lease", ["x"], queue=queue)
    first = await transport.fetch([queue], count=1, worker_id="py-lease-a", visibility_timeout_ms=1000)
    claimed_at = time.monotonic()
    assert [j.id for j in first] == [job.id]
    assert first[0].attempt == 1
    # While the lease holds, nobody else gets it.
    assert await transport.fetch([queue], count=1, worker_id="py-lease-b") == []

    async def probe():
        got = await transport.fetch([queue], count=1, worker_id="py-lease-b", visibility_timeout_ms=30000)
        return bool(got), got

    again = await wait_until(probe, timeout=30, interval=0.2, what="redelivery after the lease expired")
    waited = time.monotonic() - claimed_at
    assert [j.id for j in again] == [job.id]
    assert waited >= 0.9, f"redelivered {waited:.2f}s after the claim, before the 1s lease ran out"
    assert again[0].attempt == 2, f"attempt on redelivery: {again[0].attempt}"
    await transport.ack(job.id, result={"second": True})
    done = await client.get_job(job.id)
    assert done.state == ojs.JobState.COMPLETED
    assert done.result == {"second": True}


async def test_heartbeat_keeps_lease(client: ojs.Client, transport) -> None:
    # A handler outlasting its 10 s visibility timeout by 1.5 s: the Worker's heartbeats
    # (every 0.3 s) must keep the job leased, so it is neither redelivered nor lost. Only
    # a stall of 10 s between two heartbeats that land lets the lease lapse (a CI machine
    # running every SDK suite at once took 6 s over one request); 1.5 s was too little.
    lease = 10.0
    queue = unique_queue("beat")
    calls: Counter[str] = Counter()

    async def slow(ctx: ojs.JobContext):
        calls[ctx.job_id] += 1
        await asyncio.sleep(lease + 1.5)
        return {"slow": True}

    job = await client.enqueue("py.slow", [], queue=queue)
    async with running_worker(
        [queue],
        {"py.slow": slow},
        heartbeat_interval=0.3,
        visibility_timeout_ms=int(lease * 1000),
    ) as w:
        await wait_until(
            lambda: _ready(calls[job.id] == 1), timeout=15, what="the slow handler to start"
        )
        await asyncio.sleep(lease + 0.7)  # past the first lease
        stolen = await transport.fetch([queue], count=1, worker_id="py-thief")
        assert stolen == [], f"job redelivered while its worker heartbeated: {stolen!r}"
        done = await wait_job_state(client, job.id, {"completed"}, timeout=30)
        w.assert_no_transport_errors()
    assert calls[job.id] == 1
    assert done.result == {"slow": True}


async def _ready(value: bool):
    return value, value


async def test_many_jobs_exactly_once(client: ojs.Client) -> None:
    queue = unique_queue("many")
    total = 100
    calls: Counter[str] = Counter()

    async def handler(ctx: ojs.JobContext):
        calls[ctx.job_id] += 1
        await asyncio.sleep(random.uniform(0, 0.02))
        return {"i": ctx.args[0]}

    jobs: list[ojs.Job] = []
    for start in range(0, total, 50):
        jobs += await client.enqueue_batch(
            [ojs.JobRequest(type="py.bulk", args=[i], queue=queue) for i in range(start, start + 50)]
        )
    ids = {j.id for j in jobs}
    assert len(ids) == total

    async with running_worker([queue], {"py.bulk": handler}, concurrency=8, poll_interval=0.05) as w:
        await wait_until(
            lambda: _ready(ids <= set(calls)), timeout=100, interval=0.2,
            what=f"all {total} jobs handled",
        )
        await asyncio.sleep(1.0)  # room for any duplicate delivery to show up
        w.assert_no_transport_errors()

    dupes = {k: v for k, v in calls.items() if v != 1}
    assert not dupes, f"jobs handled more than once: {dupes}"
    assert set(calls) == ids

    sem = asyncio.Semaphore(16)

    async def state(job_id: str) -> tuple[str, ojs.Job]:
        async with sem:
            return job_id, await client.get_job(job_id)

    infos = dict(await asyncio.gather(*(state(i) for i in ids)))
    not_done = {i: j.state.value for i, j in infos.items() if j.state != ojs.JobState.COMPLETED}
    assert not not_done, f"jobs not completed: {not_done}"
    by_arg = {j.args[0]: j.result for j in infos.values()}
    assert all(by_arg[i] == {"i": i} for i in range(total))


async def test_progress_reported_through_the_sdk(client: ojs.Client, transport) -> None:
    # ojs.report_progress posts POST /workers/progress {job_id, percentage, message,
    # data}; the transport's get_progress reads GET /jobs/{id}/progress.
    from ojs.transport.http import HTTPTransport

    queue = unique_queue("progress")
    job = await client.enqueue("py.progress", ["x"], queue=queue)
    got = await transport.fetch([queue], count=1, worker_id="py-progress")
    assert [j.id for j in got] == [job.id]
    await ojs.report_progress(transport, job.id, 40, "two of five", {"done": 2})
    await ojs.report_progress(transport, job.id, 20)  # lower: the attempt keeps 40 %
    reader = HTTPTransport(OJS_URL, timeout=HTTP_TIMEOUT, headers=AUTH_HEADERS or None)
    try:
        progress = await reader.get_progress(job.id)
        assert progress["progress"] == 0.4, progress
        assert progress["message"] == "two of five", progress
        assert progress["data"] == {"done": 2}, progress
        await transport.ack(job.id, result={"ok": True})
        done = await reader.get_progress(job.id)
        assert (done["state"], done["progress"]) == ("completed", 1.0), done
    finally:
        await reader.close()
