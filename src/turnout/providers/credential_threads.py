"""Blocking credential work on threads of its own: google-auth's token refresh and botocore's credential chain.

That work blocks: it reads files, runs a ``credential_process``, or asks a token or metadata endpoint over HTTP,
and an endpoint that never answers holds its thread until the library's own bound, if it has one. So it never
runs in the event loop's default executor (``asyncio.to_thread``), which the money path shares (the ledger's
reservations, flushes and close) and which ``asyncio.run`` waits for when it ends: a hung token endpoint there
would queue every reservation behind it and hold up the process's shutdown.

:data:`CREDENTIAL_THREADS` runs each job on a daemon thread, at most :data:`MAX_THREADS` at once (more wait in
order for a free one). Daemon threads, not a ``ThreadPoolExecutor``: ``concurrent.futures`` joins its worker
threads when the interpreter exits, so one hung refresh would hold the exit forever; a daemon thread is left
behind. Nothing has to be shut down: a caller waits for a job (:func:`finished`) at most its own timeout, and a job
still hung when its callers gave up ends when its own I/O does, or with the process. Each owner keeps one job in
flight at a time (:class:`Flight`): the calls that come while it runs wait for the same job, so a hung endpoint
holds one thread, never one per call, and once the job has run a whole timeout the calls fail at once instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

T = TypeVar("T")

#: The most credential jobs running at once, over every profile of the process (each owner runs one at a time).
MAX_THREADS = 4


class CredentialThreads:
    """Jobs on daemon threads, at most ``limit`` at once, the others queued in order.

    Args:
        limit: The most jobs running at once.
    """

    def __init__(self, limit: int = MAX_THREADS) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._running = 0
        self._queue: deque[tuple[Callable[[], object], Future[object]]] = deque()

    @property
    def running(self) -> int:
        """How many jobs are running now (a hung one included)."""
        return self._running

    def submit(self, job: Callable[[], T]) -> Future[T]:
        """Run ``job`` on a daemon thread when one of the ``limit`` is free; its future."""
        future: Future[T] = Future()
        with self._lock:
            if self._running >= self._limit:
                self._queue.append((job, future))  # type: ignore[arg-type]  # the queue holds jobs of any result
                return future
            self._running += 1
        thread = threading.Thread(target=self._work, args=(job, future), name="turnout-credentials", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # no thread can be started (the interpreter is ending, or a thread limit)
            with self._lock:
                self._running -= 1
            future.set_exception(exc)
        return future

    def _work(self, job: Callable[[], object], future: Future[object]) -> None:
        """Run ``job``, then the queued ones, until the queue is empty."""
        while True:
            if future.set_running_or_notify_cancel():
                try:
                    result = job()
                except BaseException as exc:  # handed to the waiters, as a ThreadPoolExecutor's worker does
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del job, future  # the next job's wait must not keep this one's result alive
            with self._lock:
                if not self._queue:
                    self._running -= 1
                    return
                job, future = self._queue.popleft()

    def _after_fork(self) -> None:
        """In a forked child the parent's threads do not exist: start counting afresh."""
        self._lock = threading.Lock()
        self._running = 0
        self._queue = deque()


#: The process's credential threads, shared by every Vertex and Bedrock profile.
CREDENTIAL_THREADS = CredentialThreads()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=CREDENTIAL_THREADS._after_fork)


async def finished(future: Future[T]) -> T:
    """The result of a credential job (the caller bounds the wait, e.g. with ``asyncio.timeout``).

    Cancelling the wait (a timeout's included) leaves the job as it is: other calls may be waiting for it too.

    Raises:
        Exception: What the job raised.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[T] = loop.create_future()

    def done(job: Future[T]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(_copy, job, waiter)

    future.add_done_callback(done)
    return await waiter


def _copy(job: Future[T], waiter: asyncio.Future[T]) -> None:
    if waiter.done():  # the wait timed out or was cancelled
        return
    if job.cancelled():
        waiter.cancel()
    elif (error := job.exception()) is not None:
        waiter.set_exception(error)
    else:
        waiter.set_result(job.result())


class Flight(Generic[T]):
    """One owner's credential job in flight: the calls that come while it runs share it.

    Args:
        threads: Where the jobs run.
    """

    def __init__(self, threads: CredentialThreads = CREDENTIAL_THREADS) -> None:
        self._threads = threads
        self._lock = threading.Lock()  # held for a moment, from any event loop or thread
        self._job: Future[T] | None = None
        self._since = 0.0  # when the latest job was submitted (monotonic seconds)

    @property
    def current(self) -> Future[T] | None:
        """The latest job (running, queued or finished), if any."""
        return self._job

    def join(self, job: Callable[[], T]) -> Future[T]:
        """The job in flight, else ``job`` submitted as the new one."""
        with self._lock:
            current = self._job
            if current is None or current.done():
                current = self._job = self._threads.submit(job)
                self._since = time.monotonic()
            return current

    def overdue(self, seconds: float) -> bool:
        """Whether the job in flight has run (or waited for a thread) ``seconds`` or longer without finishing.

        Its owner then fails a call at once rather than wait for it again: a call that waited its whole timeout
        for this job has already failed, and a job that never ends must not gather a waiter per call.
        """
        current = self._job
        return current is not None and not current.done() and time.monotonic() - self._since >= seconds

    def forget(self) -> None:
        """Start the next :meth:`join` afresh, even while the current job still runs (its waiters keep it)."""
        with self._lock:
            self._job = None
