"""Whether the process that holds a run or a lock still lives: pid, host and a start token."""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path

import attrs

__all__ = ["ProcessId", "is_alive", "pid_alive", "process_token", "this_process"]

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@attrs.frozen
class ProcessId:
    """
    A process as a store records it beside a run or a lock.

    Attributes:
        pid: Its process id.
        host: Its machine's host name.
        token: ``BOOT_ID:START_TICKS`` where the system tells them (Linux ``/proc``), else
            ``None``. A pid alone is not enough: a restarted container gives its new process the
            same pid and host name, and only the start time (in clock ticks since boot, so the
            boot id goes with it) tells the two apart.
    """

    pid: int
    host: str
    token: str | None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this host (permission errors count as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


@functools.cache
def _boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def process_token(pid: int) -> str | None:
    """
    ``BOOT_ID:START_TICKS`` of the process *pid*, or ``None`` where ``/proc`` cannot tell.

    The start time is field 22 of ``/proc/PID/stat``; the command name before it (field 2) is in
    parentheses and may itself hold spaces and parentheses, so the fields are counted from the
    last ``)``.
    """
    boot = _boot_id()
    if boot is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    # After the name: state is field 3, so start time (field 22) is index 19 here.
    if len(fields) < 20:
        return None
    return f"{boot}:{fields[19]}"


@functools.cache
def this_process() -> ProcessId:
    """This process (cached: pid, host and start time do not change while it lives)."""
    pid = os.getpid()
    return ProcessId(pid, socket.gethostname(), process_token(pid))


# A forked child is another process: it must not claim its parent's pid and token.
os.register_at_fork(after_in_child=this_process.cache_clear)


def is_alive(holder: ProcessId) -> bool | None:
    """
    Whether *holder* still runs: ``None`` when that cannot be known from here (another host).

    On this host a process is alive when its pid exists and, where a start token was recorded
    and one can be read now, the tokens agree: a process that merely reuses the pid is dead.
    """
    if holder.host != this_process().host:
        return None
    if not pid_alive(holder.pid):
        return False
    if holder.token is None:
        return True
    current = process_token(holder.pid)
    return current is None or current == holder.token
