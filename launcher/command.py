"""Commands are data: what every backend returns, what dry-run prints and what the runner executes."""

from __future__ import annotations

import contextlib
import shlex
from dataclasses import asdict, dataclass, replace

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (mypy reads it so), without importing typing: docs/launcher.md
if TYPE_CHECKING:
    from typing import Any

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
# ConnectTimeout: an unreachable host fails its node's agent (ssh exits 255) in 30 s; without it the launcher waited
# on TCP's retries for minutes with nothing said (QA, 2026-12-07)
SSH_OPTIONS = ("-tt", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "-o", "ServerAliveInterval=15")


@dataclass(frozen=True)
class Command:
    """One process the launcher starts: an agent (torchrun, deepspeed, srun, sbatch) for one node or all."""

    argv: tuple[str, ...]
    env: dict[str, str]  # the complete environment: nothing else is inherited
    cwd: str
    host: str = "localhost"
    node_rank: int | None = 0  # None: one command for every node (srun, sbatch)
    workers: int = 0  # worker processes it starts on this machine (0: not watched, e.g. srun)
    console: bool = True  # echo its output on the launcher's console
    follow: str | None = None  # glob of the rank-0 log to echo live when ranks write to files only
    log: str = ""  # where its output goes

    def shell(self) -> str:
        """The command as one shell line with its exact environment (display and script files only)."""
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(self.env.items()))
        return f"cd {shlex.quote(self.cwd)} && exec env -i {env} {shlex.join(self.argv)}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_local(host: str) -> bool:
    """True when `host` names this machine (or this network namespace): we can bind one of its addresses."""
    if host in LOCAL_NAMES:
        return True
    import socket  # here: a plan on this machine alone starts without it (docs/launcher.md, "Overhead")

    if host == socket.gethostname():
        return True
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _, _, _, addr in infos:
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((addr[0], 0))
            return True
    return False


def launch_argv(command: Command, local: bool) -> list[str]:
    """What to exec here: the argv itself, or ssh to its host running the same command with its environment.

    ``-tt`` gives the remote side a terminal, so that it gets SIGHUP (which torchrun forwards to its
    workers) when the connection goes away.
    """
    if local:
        return list(command.argv)
    return ["ssh", *SSH_OPTIONS, command.host, command.shell()]


def with_max_restarts(command: Command, restarts: int) -> Command:
    """The same command with torchrun's --max-restarts set to `restarts` (unchanged if it has none)."""
    argv = list(command.argv)
    if "--max-restarts" not in argv:
        return command
    at = argv.index("--max-restarts") + 1
    argv[at] = str(restarts)
    return replace(command, argv=tuple(argv))
