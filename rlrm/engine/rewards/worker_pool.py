"""A user's sync reward function in worker processes that can be stopped: a call past its deadline is killed.

    pool = FunctionPool("my_reward.py", "compute_score", processes=2)
    value = await pool.call(args, kwargs)   # cancelled (the reward loop's timeout): the worker is killed, replaced
    pool.close()                            # every worker killed by its pid

A thread cannot be stopped from outside: a sync function that loops forever on a thread keeps spinning, holding
the GIL and a core, for the rest of the run (rlrm/engine/rewards/threads.py leaves it behind). Here each call
runs in one of `processes` spawned workers, each of which imported the user's file itself (functions are never
pickled; arguments and results travel as plain data over a pipe). When the caller gives up (asyncio
cancellation: the reward loop's `reward.attempt_timeout_s`), the worker is SIGKILLed at once and a fresh one
takes its place at the next call. A worker that dies inside the function (a segfault, `os._exit`, the OOM killer) is a
`WorkerDied` for that call only; one that dies while idle is replaced before a call is sent to it. A worker whose
parent dies, even by SIGKILL, exits too: a watchdog thread in it waits on the parent's pidfd.

Calls beyond `processes` wait for a worker, first come, first served, inside `while_queued`: the reward loop keeps
that wait off the attempt's deadline (rlrm/engine/rewards/deadline.py, `deadline_held`), so a deadline only ever
cuts, and a kill only ever hits, a call that is running in a worker.

What it costs: a call sends its arguments and result through a pipe and wakes the caller's event loop by the
pipe's file descriptor (no thread, no polling); each worker costs an interpreter start (spawn) the first time it
is needed. `benchmarks/reward_isolation.py` measures it against the in-thread call.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import multiprocessing
import os
import signal
import threading
from typing import Any, Callable, ContextManager

from rlrm.engine.rewards.threads import FunctionExited


class WorkerDied(Exception):
    """The worker process running the function died (its exit code and signal in the message)."""


class FunctionPool:
    """`processes` worker processes serving calls of `name` from the Python file `path`, one call each at a time.

    Args:
        path: the user's Python file.
        name: the function's name in it.
        processes: at most this many workers (started when first needed).
        tokenizer_path: a folder a worker loads `reward_model_tokenizer` from, passed to every call (None: none).
        while_queued: the context a call waits for a free worker in (the reward loop's `deadline_held` keeps that
            wait off the attempt's deadline: rlrm/engine/rewards/deadline.py).
    """

    def __init__(
        self,
        path: str,
        name: str,
        processes: int,
        tokenizer_path: str | None = None,
        while_queued: Callable[[], ContextManager] = contextlib.nullcontext,
    ):
        self.path, self.name, self.processes, self.tokenizer_path = path, name, processes, tokenizer_path
        self.while_queued = while_queued
        self.killed = 0  # workers killed because their call was given up (counted for tests and logs)
        self.died = 0  # workers that died inside the function
        self._ctx = multiprocessing.get_context("spawn")  # no fork: the trainer holds threads, CUDA, sockets
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = collections.deque()
        self._closed = False

    async def call(self, args: tuple, kwargs: dict) -> Any:
        """The function's return value for `fn(*args, **kwargs)` in a worker, or what it raised (re-raised here as
        an exception of the same type name when it is a built-in one, else RuntimeError naming it)."""
        worker = await self._take()
        try:
            worker.conn.send((args, kwargs))
            message = await worker.receive()
        except BaseException:  # cancelled by a timeout, or the worker died: it is not reused
            self._retire(worker, died=worker.proc.exitcode is not None)
            raise
        self._give_back(worker)
        return _unpack(message)

    def close(self) -> None:
        """Kill every worker (by its pid); calls waiting for one, and later calls, fail."""
        with self._lock:
            self._closed = True
            workers, self._idle = list(self._all), []
            self._all.clear()
            waiters = list(self._waiters)
            self._waiters.clear()
        for loop, waiter in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_refuse, waiter, self._closed_error())
        for worker in workers:
            worker.kill()

    async def _take(self) -> _Worker:
        worker, waiter, dead = self._claim()
        for gone in dead:  # killed while idle (the OOM killer): replaced here, not failed on the next sample
            gone.kill()
        if worker is not None:
            return worker
        assert waiter is not None
        try:
            with self.while_queued():
                return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._give_back(waiter.result())  # handed a worker just as it was cancelled: the next waiter's
            raise

    def _claim(self) -> tuple[_Worker | None, asyncio.Future | None, list[_Worker]]:
        """A worker free now, else a future a worker is handed to; and the idle workers found dead."""
        dead: list[_Worker] = []
        with self._lock:
            if self._closed:
                raise self._closed_error()
            while self._idle:
                worker = self._idle.pop()
                if worker.proc.exitcode is None:
                    return worker, None, dead
                self._all.discard(worker)
                dead.append(worker)
            if len(self._all) < self.processes:
                worker = self._spawn()
                self._all.add(worker)
                return worker, None, dead
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            self._waiters.append((loop, waiter))
            return None, waiter, dead

    def _closed_error(self) -> RuntimeError:
        return RuntimeError(f"the worker pool of {self.name} is closed")

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            while self._waiters:
                loop, waiter = self._waiters.popleft()
                if not waiter.done() and not loop.is_closed():
                    loop.call_soon_threadsafe(_hand_over, waiter, worker, self)
                    return
            self._idle.append(worker)

    def _retire(self, worker: _Worker, died: bool) -> None:
        if died:
            self.died += 1
        else:
            self.killed += 1
        worker.kill()
        with self._lock:
            self._all.discard(worker)
            woken = None
            while self._waiters and woken is None:  # a waiter gets a fresh worker's place
                loop, waiter = self._waiters.popleft()
                if not waiter.done() and not loop.is_closed() and not self._closed:
                    woken = (loop, waiter)
            if woken is not None:
                try:
                    fresh = self._spawn()
                except Exception as exc:  # noqa: BLE001 - the waiter gets the error: never left waiting for ever
                    refused = [woken]
                    if not self._all:  # no worker left to hand back: every waiter would wait for ever
                        refused += list(self._waiters)
                        self._waiters.clear()
                    for loop, waiter in refused:
                        if not loop.is_closed():
                            loop.call_soon_threadsafe(_refuse, waiter, exc)
                    return
                self._all.add(fresh)
                woken[0].call_soon_threadsafe(_hand_over, woken[1], fresh, self)

    def _spawn(self) -> _Worker:
        """A new worker process; a RuntimeError naming the limit when the system refuses one."""
        try:
            return _Worker(self._ctx, self.path, self.name, self.tokenizer_path)
        except OSError as exc:
            raise RuntimeError(
                f"cannot start a worker process for {self.name}: {exc.strerror or exc} (a limit on processes or open "
                "files, `ulimit -u` / `ulimit -n`, or a container's pids limit: raise it, or lower "
                "reward.custom.processes)"
            ) from exc


def _hand_over(waiter: asyncio.Future, worker: _Worker, pool: FunctionPool) -> None:
    if waiter.done():  # cancelled meanwhile: the next caller gets it
        pool._give_back(worker)
    else:
        waiter.set_result(worker)


def _refuse(waiter: asyncio.Future, error: Exception) -> None:
    if not waiter.done():
        waiter.set_exception(error)


class _Worker:
    """One spawned process and the parent's end of its pipe."""

    def __init__(self, ctx, path: str, name: str, tokenizer_path: str | None):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=_serve, args=(child, os.getpid(), path, name, tokenizer_path), name=f"reward-{name}", daemon=True
        )
        self.proc.start()
        child.close()

    async def receive(self):
        """The worker's answer, awaited on the pipe's file descriptor."""
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        fd = self.conn.fileno()
        loop.add_reader(fd, lambda: None if ready.done() else ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(timeout=5)
            code = self.proc.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            raise WorkerDied(f"the worker process running it died ({how})") from None

    def kill(self) -> None:
        if self.proc.exitcode is None:  # reaped already (exitcode waits on it): its pid may be another's by now
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, TypeError):  # gone already, or never started
                pass
        self.proc.join(timeout=5)
        self.conn.close()


def _serve(conn, parent: int, path: str, name: str, tokenizer_path: str | None) -> None:
    """The worker's body: import the function, then answer calls until the pipe closes."""
    _exit_with(parent)
    from rlrm.user_code import import_file

    module = import_file(path, f"rlrm_custom_reward_{abs(hash(path))}", f"reward.custom.path {path}")
    fn = getattr(module, name)
    extra = {}
    if tokenizer_path is not None:
        from transformers import AutoTokenizer

        extra["reward_model_tokenizer"] = AutoTokenizer.from_pretrained(tokenizer_path)
    loop = None  # one event loop per worker for an async function: sessions the function keeps stay usable
    while True:
        try:
            args, kwargs = conn.recv()
        except (EOFError, OSError):
            return
        try:
            value = fn(*args, **{**kwargs, **extra})
            if inspect.isawaitable(value):  # an async def, behind a decorator or a __call__ too
                loop = loop or asyncio.new_event_loop()
                value = loop.run_until_complete(value)
            message: tuple = ("ok", value)
        except SystemExit as exc:
            message = ("exit", exc.code)
        except KeyboardInterrupt:
            message = ("exit", "KeyboardInterrupt")
        except BaseException as exc:  # noqa: BLE001 - reported to the caller by type and text
            message = ("error", type(exc).__name__, _text(exc))
        try:
            conn.send(message)
        except Exception as exc:  # a result that cannot travel (an open file, a lambda, ...)
            conn.send(("error", "TypeError", f"returned a {type(message[1]).__name__} that cannot be sent back: {exc}"))


def _exit_with(parent: int) -> None:
    """A daemon thread that ends this process when `parent` ends, however it ended."""

    def watch() -> None:
        try:
            fd = os.pidfd_open(parent)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            import select

            select.select([fd], [], [])
        else:
            import time

            while os.getppid() == parent:
                time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ raises
        return f"<{type(exc).__name__} whose str() failed>"


def _unpack(message: tuple) -> Any:
    import builtins

    kind = message[0]
    if kind == "ok":
        return message[1]
    if kind == "exit":
        raise FunctionExited(message[1])
    error_type, text = message[1], message[2]
    if "daemonic processes are not allowed to have children" in text:  # verl's timeout_limit, prime_math, ...
        text += "; a function that starts processes cannot in a worker process: set reward.custom.isolation=thread"
    cls = getattr(builtins, error_type, None)
    error = None
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            error = cls(text)
        except TypeError:  # built-ins whose constructor wants more (UnicodeDecodeError, ...)
            pass
    raise error if error is not None else RuntimeError(f"{error_type}: {text}")
