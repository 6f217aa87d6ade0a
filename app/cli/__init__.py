"""`python -m app` / `trainplan`: plan, estimate, render (and serve); users and tokens of the service.
Reads a JSON request from a file or stdin."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from app.cli.planning import cmd_estimate, cmd_plan, cmd_render, format_estimate, format_plan
from app.cli.service import add_account_arguments, add_serve_arguments, cmd_serve, cmd_tokens, cmd_users, tcp_listener

__all__ = ["VERBS", "build_parser", "format_estimate", "format_plan", "main", "tcp_listener"]

VERBS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "plan": (cmd_plan, "search parallel layouts for a request and rank them"),
    "estimate": (cmd_estimate, "evaluate one fixed layout (request key 'parallel'; exit 1 when it does not fit)"),
    "render": (cmd_render, "plan, then write the chosen plan's DeepSpeed/Megatron/NCCL/launch files and plan.json"),
    "serve": (cmd_serve, "run the web service and REST API (DATABASE_URL, TRAINPLAN_* settings)"),
    "users": (cmd_users, "service accounts: add, list, passwd, role, disable, enable (on DATABASE_URL)"),
    "tokens": (cmd_tokens, "API tokens of the service: create, list, revoke (on DATABASE_URL)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainplan", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)
    for name, (_func, help_text) in VERBS.items():
        p = sub.add_parser(name, help=help_text)
        if name == "serve":
            add_serve_arguments(p)
            continue
        if name in ("users", "tokens"):
            add_account_arguments(name, p)
            continue
        p.add_argument("request", nargs="?", default="-", help="JSON request file (default: stdin)")
        if name == "render":
            p.add_argument("--out", required=True, help="directory to write the files into")
            p.add_argument("--rank", type=int, default=1, help="which ranked plan to render (default: 1)")
            continue
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return VERBS[args.verb][0](args)
    except BrokenPipeError:  # `trainplan plan ... | head`: the reader has what it wanted; end quietly, as cat does
        # stdout's buffer would be flushed again at exit and fail again: point it at /dev/null first
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a writer that died of it
