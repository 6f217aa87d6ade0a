"""`python -m launcher VERB ...`: a small verbs -> functions table; knobs live in plan.json, not in flags.

Everything the launcher process imports is the standard library: no torch, nothing from app/.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterable
from types import SimpleNamespace

from launcher import startup
from launcher.context import WorkingDirError
from launcher.fields import PlanError
from launcher.rundir import RunDirError

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (mypy reads it so), without importing typing: docs/launcher.md
if TYPE_CHECKING:
    import argparse  # built only for what quick_run_args leaves to it: `run` starts without it (3-4 ms)

Verb = Callable[["argparse.Namespace"], int]


def _run(args: argparse.Namespace) -> int:
    from launcher.launch import run

    return run(args)


def _dry_run(args: argparse.Namespace) -> int:
    from launcher.launch import dry_run

    return dry_run(args)


def _show(args: argparse.Namespace) -> int:
    from launcher.launch import show

    return show(args)


def _preflight(args: argparse.Namespace) -> int:
    from launcher.preflight import preflight

    return preflight(args)


def _probe(args: argparse.Namespace) -> int:
    from launcher.probe import probe

    return probe(args)


def _bench(args: argparse.Namespace) -> int:
    from launcher.bench import bench

    return bench(args)


VERBS: dict[str, tuple[Verb, str]] = {
    "run": (_run, "run the plan's training job (extra script arguments after --)"),
    "dry-run": (_dry_run, "print every command per node and its exact environment; change nothing"),
    "preflight": (_preflight, "check this machine and the cluster against the plan before launching"),
    "show": (_show, "summarise a plan.json"),
    "probe": (_probe, "measure GEMM, collectives, copies and CPU Adam; write a cluster profile JSON"),
    "bench": (_bench, "run the plan for a few steps; compare memory and tokens/s with its prediction"),
}


BACKEND_CHOICES = ("torchrun", "deepspeed", "slurm")
QUICK_OPTIONS = {"--node-rank": "node_rank", "--run-dir": "run_dir", "--backend": "backend"}  # see quick_run_args


def _launch_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--node-rank",
        type=int,
        default=None,
        help="start only this node (run the launcher once per node); default: every node, over ssh",
    )
    p.add_argument("--run-dir", default=None, help="run directory (default: job.run_dir or runs/<name>-<time>)")
    p.add_argument("--backend", choices=BACKEND_CHOICES, default=None, help="override job.backend")


def parser(verbs: Iterable[str] = VERBS) -> argparse.ArgumentParser:
    """The command line of `verbs` (default: all of them)."""
    import argparse

    top = argparse.ArgumentParser(prog="python -m launcher", description="Launch a trainplan plan.json.")
    sub = top.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name in verbs:
        help_text = VERBS[name][1]
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == "probe":
            p.add_argument("plan", nargs="?", help="plan.json (optional: or --nodes/--gpus-per-node)")
            p.add_argument("--nodes", type=int, default=1)
            p.add_argument("--gpus-per-node", type=int, default=None)
            p.add_argument("--hosts", default=None, help="comma-separated hosts, head first (without a plan)")
            p.add_argument("--master-addr", default=None)
            p.add_argument("--master-port", type=int, default=29500)
            p.add_argument("--output", default=None, help="profile path (default: <run_dir>/cluster_profile.json)")
        else:
            p.add_argument("plan", help="path to plan.json")
        if name == "bench":
            p.add_argument("--steps", type=int, default=20, help="training steps to run (default 20)")
            p.add_argument("--warmup", type=int, default=3, help="steps left out of the median (default 3)")
            p.add_argument("--output", default=None, help="report path (default: <run_dir>/bench.json)")
        if name != "show":
            _launch_options(p)
    return top


def quick_run_args(argv: list[str]) -> argparse.Namespace | None:
    """`run PLAN [--node-rank K] [--run-dir DIR] [--backend NAME]` read as argparse reads it, without building
    the parsers or importing argparse (together ~6 ms of `run`'s start-up, docs/launcher.md
    "Overhead"). None for anything else, which argparse reads: help, errors, abbreviations, `--option=value`, a
    repeated option, a word that starts with '-'. tests/launcher/test_cli.py checks it agrees with argparse."""
    if not argv or argv[0] != "run":
        return None
    values: dict[str, object] = {"node_rank": None, "run_dir": None, "backend": None}
    plan, words = None, iter(argv[1:])
    for word in words:
        key = QUICK_OPTIONS.get(word)
        if key and values[key] is None:  # one of the three, not seen yet
            value = next(words, "-")
            if value.startswith("-") or (key == "backend" and value not in BACKEND_CHOICES):
                return None
            if key == "node_rank" and not value.isdecimal():  # what int() takes: "²" is a digit, not a decimal
                return None
            values[key] = int(value) if key == "node_rank" else value
        elif word.startswith("-") or plan is not None:
            return None
        else:
            plan = word
    # the attributes argparse's Namespace would carry, in the plain namespace it is (argparse is not imported)
    return None if plan is None else SimpleNamespace(verb="run", plan=plan, **values)  # type: ignore[return-value]


def probe_option_refusal(args: argparse.Namespace) -> str | None:
    """Why `probe`'s own world (no plan.json) cannot be, in the options' names: `--nodes 0` was refused as
    "plan refused: world.num_nodes(0) must be >= 1", with no plan given and no such option (QA 2026-12-08)."""
    if args.verb != "probe" or args.plan is not None:
        return None
    if args.nodes < 1:
        return f"--nodes({args.nodes}) must be >= 1"
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        return f"--gpus-per-node({args.gpus_per_node}) must be >= 1"
    if not 1 <= args.master_port <= 65535:
        return f"--master-port({args.master_port}) must be between 1 and 65535"
    return None


class Terminated(BaseException):
    """SIGTERM in a verb that does not take signals itself: it unwinds as Ctrl-C does, so that the process the verb
    waits on goes with it (subprocess.run kills its child on any exception). SIGTERM's default action ended the
    launcher during preflight and left the interpreter or ssh it was asking running until its own timeout (QA
    2026-12-07). `run` forwards signals to its job (runner.py) and keeps its own handlers."""


def _terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    # A first word that names a verb selects its sub-parser, and argparse never looks at the others: build only
    # that one (all six cost ~5 ms of `run`'s start-up, docs/launcher.md "Overhead"); anything else gets them all.
    args = quick_run_args(argv) or parser([argv[0]] if argv and argv[0] in VERBS else VERBS).parse_args(argv)
    args.extra = extra
    if extra and args.verb not in ("run", "dry-run", "bench"):
        parser().error(f"extra script arguments after -- are only for run, dry-run and bench, not {args.verb}")
    if getattr(args, "run_dir", None) == "":  # an unset $RUN_DIR: it ran in a new ./runs/<name>-<time> (QA)
        sys.stderr.write("launcher: --run-dir is empty: give the run directory, or leave the option out\n")
        return 2
    why = probe_option_refusal(args)
    if why:
        sys.stderr.write(f"launcher probe: {why}\n")
        return 2
    if args.verb != "run":  # `run` resumes collection once its agents run (launcher/startup.py)
        startup.resume_collection()
        signal.signal(signal.SIGTERM, _terminated)  # the runner, where a verb starts one, installs its own
    try:
        return VERBS[args.verb][0](args)
    except PlanError as exc:
        sys.stderr.write(f"launcher: plan refused: {exc}\n")
        return 2
    except (RunDirError, WorkingDirError) as exc:
        sys.stderr.write(f"launcher: refusing to start: {exc}\n")
        return 2
    except KeyboardInterrupt:  # Ctrl-C in a verb that does not take signals itself (preflight asking every node's
        # interpreter, up to 120 s each): one line, not a traceback (QA 2026-12-07); `run` forwards SIGINT to its job
        sys.stderr.write("launcher: interrupted (SIGINT)\n")
        return 128 + 2
    except Terminated:
        sys.stderr.write("launcher: terminated (SIGTERM)\n")
        return 128 + signal.SIGTERM
    except BrokenPipeError:  # `dry-run plan.json | head`: the reader has what it wanted; end quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # stdout is flushed again at exit
        return 141  # 128 + SIGPIPE
