"""Searches and estimates run in planner processes, so that each has a hard time cap, a memory cap, an output
cap, and stops when its client goes away: a thread cannot be stopped, a process can.

The processes fork from a `forkserver` that has imported the planner (a fresh one starts in milliseconds), each
with an address-space limit (RLIMIT_AS). A request takes an idle process, sends the validated request, and polls
for the answer; past the time cap, or when the client has disconnected, the process is killed and replaced on
the next request. The answer comes back as the result's JSON, so that a result which does not read back (a
number that overflowed to infinity, say) is caught here, before anything is stored.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import queue
import resource
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.planner import EstimateRequest, PlanRequest, estimate, plan
from app.planner.errors import FieldError, field_errors, value_error

log = logging.getLogger("trainplan.compute")
POLL_S = 0.05
MiB = 2**20


class PlannerRefused(ValueError):
    """The planner refused the input (its typed InputError, or a ValidationError): each error names its field."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


def input_errors(exc: ValueError) -> list[tuple[str, str]]:
    """The planner's input error as (field, message) pairs, to send back over the pipe."""
    errors = field_errors(exc) if isinstance(exc, ValidationError) else value_error(exc)
    return [(e.field, e.message) for e in errors]


class ComputeError(Exception):
    """The work did not finish: `kind` is timeout, memory, too_large, gone, busy or crashed."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _plan(request: PlanRequest) -> str:
    return plan(request).model_dump_json()


def _estimate(request: EstimateRequest) -> str:
    return estimate(request).model_dump_json()


JOBS: dict[str, Callable[[Any], str]] = {"plan": _plan, "estimate": _estimate}
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux: SIGKILL when the forkserver (which ends with the server) goes, so no search outlives the server."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _child(conn: Connection, memory_bytes: int, max_result_bytes: int) -> None:
    """A planner process: answer jobs until the pipe closes. Errors come back as values, never as a crash."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the server; it stops us
    _die_with_parent()
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        answer: tuple[str, Any]
        try:
            out = JOBS[kind](payload)
            answer = ("ok", out) if len(out) <= max_result_bytes else ("too_large", str(len(out)))
        except ValueError as exc:  # the planner's input errors: its InputError (with the field) or pydantic's
            answer = ("input", input_errors(exc))
        except MemoryError:
            answer = ("memory", "")
        except RecursionError:
            answer = ("input", [("", "the request is nested too deeply to evaluate")])
        except Exception:  # a bug: reported (and logged by the server) as one, unless the job hit the memory cap
            # an allocation refused under RLIMIT_AS can surface as another error (C code that returns NULL without
            # setting MemoryError: "SystemError: error return without exception set"); the process's peak address
            # space says whether it ran into the cap
            capped = _peak_address_space() >= 0.9 * memory_bytes
            answer = ("memory", "") if capped else ("error", traceback.format_exc())
        try:
            conn.send(answer)
        except MemoryError:
            conn.send(("memory", ""))


def _peak_address_space() -> int:
    """Bytes of this process's peak virtual memory (VmPeak in /proc/self/status), what RLIMIT_AS caps; 0 if unknown."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection


def _context() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["app.service.compute"])
    return ctx


class PlannerPool:
    """`processes` planner processes, started when first needed."""

    def __init__(self, processes: int, memory_mib: int, max_result_bytes: int) -> None:
        self.size = processes
        self.memory_bytes = memory_mib * MiB
        self.max_result_bytes = max_result_bytes
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._started = 0
        self._lock = threading.Lock()
        self._closed = False

    def _spawn(self) -> _Worker:
        ctx = _context()
        parent, child = ctx.Pipe()
        process = ctx.Process(
            target=_child, args=(child, self.memory_bytes, self.max_result_bytes), daemon=True, name="trainplan-planner"
        )
        process.start()
        child.close()
        return _Worker(process, parent)

    def _acquire(self, wait_s: float, client_gone: Callable[[], bool]) -> _Worker:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                pass
            with self._lock:
                if self._closed:
                    raise ComputeError("busy", "the service is shutting down")
                if self._started < self.size:
                    self._started += 1
                    spawn = True
                else:
                    spawn = False
            if spawn:
                try:
                    return self._spawn()
                except BaseException:
                    with self._lock:
                        self._started -= 1
                    raise
            try:
                return self._idle.get(timeout=POLL_S * 4)
            except queue.Empty:
                if client_gone():
                    raise ComputeError("gone", "the client closed the connection") from None
                if time.monotonic() > deadline:
                    raise ComputeError(
                        "busy", f"all {self.size} planner processes stayed busy for {wait_s:g} s; try again"
                    ) from None

    def _discard(self, worker: _Worker) -> None:
        worker.process.kill()
        worker.process.join(timeout=5)
        worker.conn.close()
        with self._lock:
            self._started -= 1

    def run(self, kind: str, payload: Any, timeout_s: float, client_gone: Callable[[], bool]) -> str:
        """The result's JSON, or ComputeError; PlannerRefused for the planner's own input errors."""
        worker = self._acquire(timeout_s, client_gone)
        started = time.monotonic()
        try:
            worker.conn.send((kind, payload))
            deadline, polls = started + timeout_s, 0
            while not worker.conn.poll(max(0.0, min(POLL_S, deadline - time.monotonic()))):
                polls += 1
                if time.monotonic() >= deadline:
                    raise ComputeError("timeout", f"stopped after the time cap of {timeout_s:g} s")
                if polls % 2 == 0 and client_gone():
                    raise ComputeError("gone", "the client closed the connection")
                if not worker.process.is_alive():
                    raise ComputeError("crashed", f"the planner process died (exit code {worker.process.exitcode})")
            status, value = worker.conn.recv()
        except (ComputeError, EOFError, OSError) as exc:
            self._discard(worker)
            log.warning("%s job stopped after %.1f s: %s", kind, time.monotonic() - started, exc)
            if isinstance(exc, ComputeError):
                raise
            raise ComputeError("crashed", "the planner process died (out of memory?)") from None
        if status == "memory":
            self._discard(worker)  # it ran into its cap: a fresh process for the next job (VmPeak never falls)
        else:
            self._idle.put(worker)
        return self._answer(kind, status, value)

    def _answer(self, kind: str, status: str, value: Any) -> str:
        if status == "ok":
            return str(value)
        if status == "input":
            raise PlannerRefused([FieldError(field, message) for field, message in value])
        if status == "memory":
            raise ComputeError(
                "memory",
                f"evaluating it needs more than this service's {self.memory_bytes // MiB} MiB per planner process",
            )
        if status == "too_large":
            raise ComputeError(
                "too_large",
                f"its result would be {int(value):,} bytes of JSON, above this "
                f"service's cap of {self.max_result_bytes:,}",
            )
        log.error("%s job failed in the planner process:\n%s", kind, value)
        raise RuntimeError(f"the planner failed: {value.strip().splitlines()[-1]}")

    def close(self) -> None:
        with self._lock:
            self._closed = True
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                return
            worker.conn.close()
            worker.process.join(timeout=2)
            if worker.process.is_alive():
                worker.process.kill()
