"""Workflow scenarios, built with the SDK's workflow module (`ojs.chain`, `ojs.group`,
`ojs.batch`) and submitted with `client.workflow(...)`, as its README shows.

What the SDK sends (src/ojs/workflow.py): one DAG shape for all three builders,
    {"name": ..., "steps": [{"id": "step-0", "type": ..., "args": [...],
                             "depends_on": [...], "options": {...}?}, ...],
     "options": {...}?}
with no top-level "type"; a chain is expressed by each step depending on the one
before, and batch callbacks are extra steps (ids "on_complete", "on_success",
"on_failure") depending on every parallel step, marked by
options.callback_type = "on_complete" | "on_success" | "on_failure".
"""

from __future__ import annotations

import asyncio
import time
import uuid

import ojs
from conftest import running_worker, unique_queue, wait_until


async def _wait_workflow(client: ojs.Client, wf_id: str, states: set[str], timeout: float = 20):
    async def probe():
        wf = await client.get_workflow(wf_id)
        return wf.state in states, wf

    return await wait_until(probe, timeout=timeout, interval=0.2, what=f"workflow {wf_id} in {states}")


async def test_chain_runs_steps_in_order(client: ojs.Client) -> None:
    queue = unique_queue("chain")
    runs: list[tuple[int, float, float]] = []  # (step arg, started, finished)

    async def step(ctx: ojs.JobContext):
        started = time.monotonic()
        await asyncio.sleep(0.05)
        runs.append((ctx.args[0], started, time.monotonic()))
        return {"step": ctx.args[0]}

    definition = ojs.chain(
        f"py-chain-{uuid.uuid4().hex[:6]}",
        [ojs.JobRequest(type="py.wf.step", args=[i], queue=queue) for i in range(3)],
    )
    wf = await client.workflow(definition)
    assert wf.id
    assert wf.name == definition.name
    assert wf.state in {"running", "pending"}

    # Concurrency 3: if the server released a step early, the worker would run it at once.
    async with running_worker([queue], {"py.wf.step": step}, concurrency=3) as w:
        done = await _wait_workflow(client, wf.id, {"completed", "failed", "cancelled"})
        w.assert_no_transport_errors()
    assert done.state == "completed"
    assert [r[0] for r in runs] == [0, 1, 2], runs
    for prev, nxt in zip(runs, runs[1:], strict=False):
        assert nxt[1] >= prev[2], f"step {nxt[0]} started before step {prev[0]} finished"
    # The created workflow and its status list the steps (HTTP binding 14.1/14.2).
    assert len(wf.steps) == 3, f"workflow reply lists no steps: {wf!r}"
    assert [s.id for s in done.steps] == ["step-0", "step-1", "step-2"]
    assert [s.depends_on for s in done.steps] == [[], ["step-0"], ["step-1"]]
    assert [s.state for s in done.steps] == ["completed"] * 3
    for s in done.steps:
        assert s.job_id, f"step {s.id} has no job_id"
        job = await client.get_job(s.job_id)
        assert job.state == ojs.JobState.COMPLETED
        assert job.result == {"step": job.args[0]}


async def test_group_runs_all_steps(client: ojs.Client) -> None:
    queue = unique_queue("group")
    ran: list[str] = []

    async def resize(ctx: ojs.JobContext):
        ran.append(ctx.args[1])
        return {"size": ctx.args[1]}

    sizes = ["small", "medium", "large"]
    wf = await client.workflow(
        ojs.group(
            f"py-group-{uuid.uuid4().hex[:6]}",
            [ojs.JobRequest(type="py.wf.resize", args=["img.jpg", s], queue=queue) for s in sizes],
        )
    )
    async with running_worker([queue], {"py.wf.resize": resize}, concurrency=3) as w:
        done = await _wait_workflow(client, wf.id, {"completed", "failed", "cancelled"})
        w.assert_no_transport_errors()
    assert done.state == "completed"
    assert sorted(ran) == sorted(sizes)
    assert len(wf.steps) == 3, f"workflow reply lists no steps: {wf!r}"
    assert [s.state for s in done.steps] == ["completed"] * 3


async def test_batch_fires_the_right_callbacks(client: ojs.Client) -> None:
    queue = unique_queue("wfbatch")
    ran: list[str] = []

    async def chunk(ctx: ojs.JobContext):
        ran.append(f"chunk-{ctx.args[0]}")
        return {"rows": ctx.args[1] - ctx.args[0] + 1}

    async def callback(ctx: ojs.JobContext):
        ran.append(ctx.job_type)
        return None

    wf = await client.workflow(
        ojs.batch(
            f"py-batch-{uuid.uuid4().hex[:6]}",
            [
                ojs.JobRequest(type="py.wf.chunk", args=[1, 100], queue=queue),
                ojs.JobRequest(type="py.wf.chunk", args=[101, 200], queue=queue),
            ],
            on_complete=ojs.JobRequest(type="py.wf.on_complete", args=[], queue=queue),
            on_success=ojs.JobRequest(type="py.wf.on_success", args=[], queue=queue),
            on_failure=ojs.JobRequest(type="py.wf.on_failure", args=[], queue=queue),
        )
    )
    handlers = {
        "py.wf.chunk": chunk,
        "py.wf.on_complete": callback,
        "py.wf.on_success": callback,
        "py.wf.on_failure": callback,
    }
    async with running_worker([queue], handlers, concurrency=3) as w:

        async def both_callbacks():
            got = {"py.wf.on_complete", "py.wf.on_success"} <= set(ran)
            return got, list(ran)

        await wait_until(both_callbacks, timeout=20, interval=0.2, what="on_complete and on_success")
        # All parts succeeded, so on_failure must not fire: give it time to show up.
        await asyncio.sleep(1.5)
        w.assert_no_transport_errors()
        done = await _wait_workflow(client, wf.id, {"completed", "failed", "cancelled"}, timeout=30)
    assert sorted(r for r in ran if r.startswith("chunk-")) == ["chunk-1", "chunk-101"]
    assert "py.wf.on_failure" not in ran, f"on_failure ran although every job succeeded: {ran}"
    # Callbacks run after every parallel job.
    first_cb = min(ran.index("py.wf.on_complete"), ran.index("py.wf.on_success"))
    assert all(r.startswith("chunk-") for r in ran[:first_cb]) and first_cb == 2, ran
    assert done.state == "completed"


async def test_workflow_default_options(client: ojs.Client) -> None:
    # The builders' `options=` are the workflow's default enqueue options for every step
    # (HTTP binding 14.1, "options"): here the queue the steps run on.
    queue = unique_queue("wfopts")
    ran: list[int] = []

    async def step(ctx: ojs.JobContext):
        ran.append(ctx.args[0])

    wf = await client.workflow(
        ojs.group(
            f"py-wfopts-{uuid.uuid4().hex[:6]}",
            [ojs.JobRequest(type="py.wf.opt", args=[i]) for i in range(2)],
            options={"queue": queue},
        )
    )
    async with running_worker([queue], {"py.wf.opt": step}, concurrency=2) as w:
        done = await _wait_workflow(client, wf.id, {"completed", "failed", "cancelled"}, timeout=30)
        w.assert_no_transport_errors()
    assert done.state == "completed"
    assert sorted(ran) == [0, 1]
