"""Worker threads that never hold up the exit: for plain processes and batched destinations."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["DaemonPool"]

_T = TypeVar("_T")

_Job = tuple["concurrent.futures.Future[Any]", "Callable[..., Any]", "tuple[Any, ...]"]


class DaemonPool(concurrent.futures.Executor):
    """
    Worker threads: *size* of them run calls at once.

    They are daemon threads, so a process call stuck for good (a hung socket) cannot keep the
    interpreter from exiting after Ctrl-C, and a call given up (`abandon`: its timeout
    passed) is replaced by a new thread, so *size* calls still run at once; the old thread
    retires when its call returns.
    """

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._jobs: queue.SimpleQueue[
            tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]] | None
        ] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._abandoned: set[concurrent.futures.Future[Any]] = set()
        self._closed = False

    def submit(  # type: ignore[override]  # positional arguments only, as used here
        self, fn: Callable[..., _T], /, *args: Any
    ) -> concurrent.futures.Future[_T]:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker threads were shut down")
            self._jobs.put((future, fn, args))
            if self._threads - len(self._abandoned) < self._size:
                self._start()
        return future

    def _start(self) -> None:
        self._threads += 1
        thread = threading.Thread(
            target=self._work, name=f"{self._name}-{self._threads}", daemon=True
        )
        thread.start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args = job
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as error:  # noqa: BLE001 - handed to the waiting task
                    future.set_exception(error)
                else:
                    future.set_result(result)
            with self._lock:
                if future in self._abandoned:
                    # A thread took this one's place when its call was given up: retire.
                    self._abandoned.discard(future)
                    self._threads -= 1
                    return

    def abandon(self, future: concurrent.futures.Future[Any]) -> None:
        """*future*'s call was given up: start a thread in its place (its own retires later)."""
        with self._lock:
            if future.done() or self._closed:
                return
            self._abandoned.add(future)
            self._start()

    def abandon_all(self) -> None:
        """Every call was given up (the run stops): no thread waits for them."""
        self.shutdown(wait=False)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking calls; idle threads exit, busy ones when their call returns."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = self._threads
        for _ in range(threads):
            self._jobs.put(None)
