"""Shared helpers for the Python SDK interop suite.

The suite drives a running OJS server (URL in $OJS_URL) with the official Python SDK
(`openjobspec`, imported as `ojs`), used only through its public API the way its
README shows. Every wait is bounded, and the whole session has a time budget
($OJS_SUITE_BUDGET seconds, default 300): once it is spent, the remaining tests fail
at once instead of waiting, so the suite ends in under 5 minutes whatever the server
does (pytest-timeout also caps each single test, see pytest.ini).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import ojs

OJS_URL = os.environ.get("OJS_URL", "http://127.0.0.1:18081").rstrip("/")
SUITE_BUDGET = float(os.environ.get("OJS_SUITE_BUDGET", "300"))
# Timeout of each SDK HTTP request: the SDK's default, 30 s (a CI machine running every
# SDK suite at once answered one request in 6 s).
HTTP_TIMEOUT = 30.0
# With API keys required (tests/tests/sdk.rs, python_sdk_with_least_privilege_keys), the
# client's key and the workers' key, sent as the SDK's README shows (headers=...).
_KEY = os.environ.get("OJS_API_KEY")
_WORKER_KEY = os.environ.get("OJS_WORKER_API_KEY") or _KEY
AUTH_HEADERS: dict[str, str] = {"Authorization": f"Bearer {_KEY}"} if _KEY else {}
WORKER_AUTH_HEADERS: dict[str, str] = (
    {"Authorization": f"Bearer {_WORKER_KEY}"} if _WORKER_KEY else {}
)

_SESSION_START = time.monotonic()


def budget_left() -> float:
    """Seconds left of the session's time budget."""
    return SUITE_BUDGET - (time.monotonic() - _SESSION_START)


def unique_queue(prefix: str) -> str:
    """A queue name of its own for one scenario (scenarios share one table)."""
    return f"py-{prefix}-{secrets.token_hex(4)}"


def iso_in(seconds: float) -> str:
    """An RFC 3339 UTC timestamp `seconds` from now, with milliseconds."""
    t = datetime.now(UTC) + timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


async def wait_until(
    probe: Callable[[], Awaitable[tuple[bool, Any]]],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
) -> Any:
    """Polls `probe` (returning (done, value)) until done; returns the value.

    Bounded by `timeout` and by what is left of the session budget. On timeout it
    fails with the last value seen, so the report shows what the server answered.
    """
    limit = max(0.5, min(timeout, budget_left()))
    deadline = time.monotonic() + limit
    last: Any = None
    while True:
        done, last = await probe()
        if done:
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {limit:.1f}s waiting for {what}; last seen: {last!r}")
        await asyncio.sleep(interval)


async def job_state(client: ojs.Client, job_id: str) -> str:
    return (await client.get_job(job_id)).state.value


async def wait_job_state(
    client: ojs.Client, job_id: str, states: set[str], timeout: float = 10.0
) -> ojs.Job:
    """Waits until INFO shows the job in one of `states`; returns the job."""

    async def probe() -> tuple[bool, Any]:
        job = await client.get_job(job_id)
        return job.state.value in states, job

    return await wait_until(probe, timeout=timeout, what=f"job {job_id} in {sorted(states)}")


# --- The SDK's worker, run in the background of a test --------------------------------

# Messages the SDK's Worker logs when one of ITS OWN calls to the server fails (fetch,
# heartbeat, ack, nack). A handler's own exception is logged differently ("Job %s
# failed"), so the failure scenarios do not trip this.
_TRANSPORT_ERROR_PREFIXES = (
    "Error in fetch loop",
    "Error in heartbeat loop",
    "ack attempt",
    "nack attempt",
)


class _TransportErrorLog(logging.Handler):
    """Collects the worker's own transport errors (see above)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith(_TRANSPORT_ERROR_PREFIXES) or "failed to nack" in msg:
            detail = f" ({record.exc_info[1]!r})" if record.exc_info else ""
            self.errors.append(msg + detail)


class RunningWorker:
    """An `ojs.Worker` started in the background, as a user would run one."""

    def __init__(self, worker: ojs.Worker, log: _TransportErrorLog) -> None:
        self.worker = worker
        self._log = log

    @property
    def transport_errors(self) -> list[str]:
        """The worker's failed fetch/heartbeat/ack/nack calls so far."""
        return list(self._log.errors)

    def assert_no_transport_errors(self) -> None:
        assert not self._log.errors, (
            "the SDK worker's own requests failed against the server:\n  "
            + "\n  ".join(self._log.errors[:5])
        )


@contextlib.asynccontextmanager
async def running_worker(
    queues: list[str],
    handlers: dict[str, Callable[[ojs.JobContext], Awaitable[Any]]],
    *,
    concurrency: int = 1,
    poll_interval: float = 0.1,
    heartbeat_interval: float = 1.0,
    visibility_timeout_ms: int = 30000,
) -> AsyncIterator[RunningWorker]:
    """Runs `ojs.Worker(...).start()` with `handlers` registered; stops it on exit."""
    worker = ojs.Worker(
        OJS_URL,
        queues=queues,
        concurrency=concurrency,
        poll_interval=poll_interval,
        heartbeat_interval=heartbeat_interval,
        visibility_timeout_ms=visibility_timeout_ms,
        timeout=HTTP_TIMEOUT,
        headers=WORKER_AUTH_HEADERS or None,
    )
    for job_type, fn in handlers.items():
        worker.register(job_type)(fn)
    log = _TransportErrorLog()
    sdk_logger = logging.getLogger("ojs.worker")
    sdk_logger.addHandler(log)
    task = asyncio.create_task(worker.start(), name="ojs-worker")
    try:
        yield RunningWorker(worker, log)
    finally:
        await worker.stop()
        # The SDK waits up to 25 s for active handlers; a test never waits that long.
        done, _ = await asyncio.wait({task}, timeout=3.0)
        if not done:
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, timeout=2.0)
        sdk_logger.removeHandler(log)


# --- Fixtures ------------------------------------------------------------------------


@pytest.fixture
async def client() -> AsyncIterator[ojs.Client]:
    async with ojs.Client(OJS_URL, timeout=HTTP_TIMEOUT, headers=AUTH_HEADERS or None) as c:
        yield c


@pytest.fixture
async def transport() -> AsyncIterator[Any]:
    """The SDK's lower-level HTTP transport (fetch/ack/nack/heartbeat by hand)."""
    from ojs.transport.http import HTTPTransport

    t = HTTPTransport(OJS_URL, timeout=HTTP_TIMEOUT, headers=WORKER_AUTH_HEADERS or None)
    try:
        yield t
    finally:
        await t.close()


# --- Session budget and the tally read by run.sh ---------------------------------------


def pytest_runtest_setup(item: pytest.Item) -> None:
    if budget_left() <= 0:
        pytest.fail(f"suite time budget of {SUITE_BUDGET:.0f}s spent before this test started")


_TALLY: dict[str, str] = {}


def _write_tally(session_done: bool = False) -> None:
    path = os.environ.get("OJS_TALLY")
    if not path:
        return
    with open(path, "w") as f:
        json.dump({"results": _TALLY, "done": session_done}, f)


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        _TALLY[item.nodeid] = "not run"
    _write_tally()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # A test counts as failed if any phase (setup, call, teardown) failed.
    if report.failed:
        _TALLY[report.nodeid] = "failed"
    elif report.when == "call" and report.passed and _TALLY.get(report.nodeid) != "failed":
        _TALLY[report.nodeid] = "passed"
    elif report.skipped:
        _TALLY[report.nodeid] = "skipped"
    _write_tally()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _write_tally(session_done=True)
