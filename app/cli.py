"""`python -m app` / `trainplan`: plan, estimate, render (and serve); users and tokens of the service.
Reads a JSON request from a file or stdin."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from app.planner import estimate, plan
from app.planner.errors import FieldError, field_errors, value_error
from app.planner.explain import describe
from app.planner.results import CheckpointPlan, Estimate, PlanResult

GiB = 2**30


class RequestError(ValueError):
    """The request file cannot be read or parsed."""


def _read_request(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
    except OSError as exc:
        raise RequestError(f"cannot read request {path!r}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"request is not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise RequestError("the request must be a JSON object with keys model, cluster, training")
    return data


def _fail(errors: list[FieldError]) -> int:
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 2


def _input_error(exc: ValueError, field: str = "") -> int:
    """Report bad input (pydantic's errors field by field, the planner's InputError with its field); exit code 2."""
    return _fail(field_errors(exc) if isinstance(exc, ValidationError) else value_error(exc, field))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def format_estimate(est: Estimate) -> str:
    t, m = est.time, est.memory
    lines = [f"feasible: {'yes' if est.feasible else 'no'}"]
    lines += [f"  - {r}" for r in est.reasons]
    lines.append(
        f"step {t.step_s:.3f} s | {t.tokens_per_s:,.0f} tokens/s | {t.tflops_per_gpu:.1f} TFLOP/s per GPU | "
        f"MFU {_pct(t.mfu)} | bubble {_pct(t.bubble_fraction)}"
    )
    lines.append("time breakdown: " + ", ".join(f"{k[:-2]} {v:.3f}s" for k, v in t.breakdown.items() if v > 0))
    lines.append(f"peak memory {m.peak_bytes / GiB:.1f} GiB of {m.capacity_bytes / GiB:.1f} GiB (stage {m.peak_stage})")
    lines.append(
        f"{'stage':>5} {'layers':>6} {'weights':>8} {'grads':>8} {'optim':>8} {'activ':>8} {'other':>8} "
        f"{'total':>8}  GiB"
    )
    for s in m.stages:
        lines.append(
            f"{s.stage:>5} {s.layers:>6} {s.weights_bytes / GiB:>8.2f} {s.gradients_bytes / GiB:>8.2f} "
            f"{s.optimizer_bytes / GiB:>8.2f} {s.activations_bytes / GiB:>8.2f} {s.other_bytes / GiB:>8.2f} "
            f"{s.total_bytes / GiB:>8.2f}"
        )
    if m.cpu_bytes_per_node:
        lines.append(f"host memory for offload: {m.cpu_bytes_per_node / GiB:.0f} GiB per node")
    return "\n".join(lines)


def format_checkpoint(cp: CheckpointPlan) -> str:
    return (
        f"every {cp.interval_steps:,} steps ({cp.interval_s / 3600:.2f} h), save {cp.save_s:.0f} s of "
        f"{cp.size_bytes / GiB:,.0f} GiB, MTBF {cp.mtbf_s / 3600:,.1f} h ({cp.mtbf_source}): "
        f"expected goodput {_pct(cp.goodput)}"
    )


def format_plan(result: PlanResult) -> str:
    m, c = result.model, result.cluster
    lines = [
        f"{m.name}: {result.num_parameters / 1e9:.2f}B parameters on {c.num_nodes} x {c.gpus_per_node} "
        f"{c.gpu.name} ({result.training.framework}, {result.training.precision}, "
        f"global batch {result.training.global_batch_size})",
        f"searched {result.stats.candidates} candidates in {result.stats.seconds:.2f} s: "
        f"{result.stats.feasible} feasible" + (" (time cap hit)" if result.stats.truncated else ""),
    ]
    if result.plans:
        lines.append(
            f"{'#':>3}  {'plan':<58} {'GA':>4} {'peak GiB':>8} {'step s':>8} {'tokens/s':>11} {'MFU':>6} {'bubble':>6}"
        )
        for p in result.plans:
            t = p.estimate.time
            lines.append(
                f"{p.rank:>3}  {describe(p.parallel):<58} {p.layout.num_microbatches:>4} "
                f"{p.estimate.memory.peak_bytes / GiB:>8.1f} {t.step_s:>8.2f} {t.tokens_per_s:>11,.0f} "
                f"{_pct(t.mfu):>6} {_pct(t.bubble_fraction):>6}"
            )
        lines.append("why #1: " + "; ".join(result.plans[0].why))
        if result.plans[0].checkpoint:
            lines.append("checkpoint #1: " + format_checkpoint(result.plans[0].checkpoint))
    for s in result.suggestions:
        lines.append(f"* {s}")
    if result.rejected:
        lines.append("rejected candidates:")
        lines += [f"  {g.count:>6} {g.reason}: {g.message}" for g in result.rejected]
    return "\n".join(lines)


def _saved_clusters(name: str) -> Any:
    """A saved cluster from the service's database (DATABASE_URL), for requests that name one."""
    from app.service.clusters import lookup
    from app.settings import Settings
    from app.store import ClusterStore, PlanStore

    settings = Settings.from_env()
    store = PlanStore(settings.database_url, settings.sqlite_synchronous)
    store.init()
    try:
        return lookup(ClusterStore(store.engine))(name)
    finally:
        store.close()


def cmd_plan(args: argparse.Namespace) -> int:
    from app.service.errors import Refused
    from app.service.requests import parse_plan_request

    try:
        result = plan(parse_plan_request(_read_request(args.request), _saved_clusters).request)
    except Refused as exc:  # the same reading as the service's: bodies, presets, config.json, bounds
        return _fail(exc.errors)
    except ValueError as exc:  # the planner's own (pydantic's ValidationError, its InputError)
        return _input_error(exc)
    print(result.model_dump_json(indent=2) if args.json else format_plan(result))
    return 0 if result.plans else 1


def cmd_estimate(args: argparse.Namespace) -> int:
    from app.service.errors import Refused
    from app.service.requests import parse_estimate_request

    try:
        est = estimate(parse_estimate_request(_read_request(args.request), _saved_clusters))
    except Refused as exc:
        return _fail(exc.errors)
    except ValueError as exc:  # the planner's own (pydantic's ValidationError, its InputError)
        return _input_error(exc)
    print(est.model_dump_json(indent=2) if args.json else format_estimate(est))
    return 0


def _accounts(settings: Any = None) -> Any:
    """The account store on DATABASE_URL (tables created if missing)."""
    from app.settings import Settings
    from app.store import AccountStore, PlanStore

    settings = settings or Settings.from_env()
    store = PlanStore(settings.database_url, settings.sqlite_synchronous)
    store.init()
    return AccountStore(store.engine)


def first_admin(settings: Any) -> None:
    """On a database without users: create `admin` with a generated password and say how to log in."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.store import AccountError
    from app.store.hashing import new_password

    try:
        accounts = _accounts(settings)
        if accounts.count_users():
            return
    except SQLAlchemyError as exc:  # the server's own start reports it (and retries under an orchestrator)
        print(
            f"trainplan: cannot check for users yet ({type(exc).__name__}); the server starts anyway", file=sys.stderr
        )
        return
    password = new_password()
    try:
        accounts.add_user("admin", "admin", password, actor="first start")
    except AccountError:  # another worker or replica made it first
        return
    token, _info = accounts.create_token("admin", "first start", actor="first start")
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    print(
        f"trainplan: no users yet, so one was made. Log in at http://{host}:{settings.port}/login as\n"
        f"    name: admin\n    password: {password}\n"
        f"API token for scripts (Authorization: Bearer ...):\n    {token}\n"
        "Shown once. Change them with `trainplan users passwd admin` and `trainplan tokens revoke "
        f"{_info.id}`; add people with `trainplan users add NAME --role user`.",
        flush=True,
    )


def cmd_serve(args: argparse.Namespace) -> int:
    """The web service (uvicorn app.main:app); settings from the environment, host/port/workers also as flags."""
    import uvicorn

    from app.settings import ENV_NAMES, Settings

    try:
        settings = Settings.from_env(host=args.host, port=args.port, workers=args.workers)
    except ValueError as exc:
        return _input_error(exc)
    first_admin(settings)
    # the app (in each worker) reads its settings from the environment: pass the flags on that way
    os.environ.update(
        {
            ENV_NAMES["host"]: settings.host,
            ENV_NAMES["port"]: str(settings.port),
            ENV_NAMES["workers"]: str(settings.workers),
        }
    )
    if settings.workers == 1:  # asyncio's own listening socket: TCP_NODELAY on every connection
        uvicorn.run("app.main:app", host=settings.host, port=settings.port, log_level=settings.log_level)
        return 0
    from uvicorn.supervisors import Multiprocess

    # uvicorn's --workers binds socket.socket(family) (protocol 0), on whose connections asyncio skips TCP_NODELAY:
    # Nagle's algorithm and delayed ACKs then add ~40 ms to every keep-alive request (benchmarks/service_latency.py
    # --keepalive). The same supervisor, on a socket that is TCP by protocol and has TCP_NODELAY set.
    config = uvicorn.Config(
        "app.main:app", host=settings.host, port=settings.port, workers=settings.workers, log_level=settings.log_level
    )
    Multiprocess(config, sockets=[tcp_listener(settings.host, settings.port)]).run()
    return 0


def tcp_listener(host: str, port: int) -> Any:
    """The listening socket for several workers (uvicorn's supervisor hands it to each)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="address to bind (default: TRAINPLAN_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: TRAINPLAN_PORT or 8000)")
    p.add_argument("--workers", type=int, help="worker processes (default: TRAINPLAN_WORKERS or 1)")


def cmd_render(args: argparse.Namespace) -> int:
    """Plan, then write the chosen plan's artifacts (request key 'render' holds the RenderOptions)."""
    from app.render import RenderOptions, render, write_artifacts
    from app.service.errors import Refused
    from app.service.requests import parse_plan_request

    try:
        parsed = parse_plan_request(_read_request(args.request), _saved_clusters)
        options = parsed.options or RenderOptions()
        result = plan(parsed.request)
    except Refused as exc:
        return _fail(exc.errors)
    except ValueError as exc:  # the planner's own (pydantic's ValidationError, its InputError)
        return _input_error(exc)
    if not result.plans:
        print(format_plan(result))
        return 1
    if not 1 <= args.rank <= len(result.plans):
        return _fail([FieldError("--rank", f"{args.rank} is not between 1 and {len(result.plans)}")])
    try:
        arts = render(result, rank=args.rank, options=options)
    except ValueError as exc:  # a plan the tools cannot run, or options that do not fit it
        return _input_error(exc, "render")
    written = write_artifacts(arts, args.out)
    chosen = result.plans[args.rank - 1]
    print(f"plan #{args.rank}: {describe(chosen.parallel)} ({chosen.estimate.time.tokens_per_s:,.0f} tokens/s)")
    for path in written:
        print(f"  wrote {path}")
    for note in arts.notes:
        print(f"  note: {note}")
    return 0


def _secret(args: argparse.Namespace) -> tuple[str, bool]:
    """(password, generated?): one line from stdin with --password-stdin, else a generated one."""
    from app.store.hashing import new_password

    if getattr(args, "password_stdin", False):
        return sys.stdin.readline().rstrip("\n"), False
    return new_password(), True


def cmd_users(args: argparse.Namespace) -> int:
    """users add|list|passwd|role|disable|enable."""
    accounts = _accounts()
    try:
        if args.action == "list":
            for u in accounts.users():
                state = "disabled" if u.disabled else ("web login" if u.has_password else "tokens only")
                print(f"{u.name:<24} {u.role:<10} {state:<12} since {u.created_at:%Y-%m-%d}")
            return 0
        if args.action in ("add", "passwd"):
            password, generated = _secret(args)
            if args.action == "add":
                accounts.add_user(args.name, args.role, password)
            else:
                accounts.set_password(args.name, password)
            print(f"{args.name}: password {password}" if generated else f"{args.name}: password set")
        elif args.action == "role":
            accounts.set_role(args.name, args.role)
        else:
            accounts.set_disabled(args.name, args.action == "disable")
    except ValueError as exc:  # AccountError, or a password outside the length rules
        return _fail([FieldError("", str(exc))])
    return 0


def cmd_tokens(args: argparse.Namespace) -> int:
    """tokens create|list|revoke."""
    from app.store import AccountError

    accounts = _accounts()
    try:
        if args.action == "create":
            token, info = accounts.create_token(args.name, args.label)
            print(token)
            print(f"(token {info.id} for {info.user}; shown once, stored hashed)", file=sys.stderr)
        elif args.action == "revoke":
            accounts.revoke_token(args.id)
        else:
            for t in accounts.tokens(args.name):
                state = f"revoked {t.revoked_at:%Y-%m-%d}" if t.revoked_at else "active"
                print(f"{t.id}  {t.user:<24} {state:<18} {t.created_at:%Y-%m-%d}  {t.label}")
    except AccountError as exc:
        return _fail([FieldError("", str(exc))])
    return 0


def add_account_arguments(name: str, p: argparse.ArgumentParser) -> None:
    from app.store import ROLES

    actions = p.add_subparsers(dest="action", required=True)
    if name == "users":
        add = actions.add_parser("add", help="create a user (prints a generated password)")
        add.add_argument("name")
        add.add_argument("--role", choices=ROLES, default="user")
        add.add_argument("--password-stdin", action="store_true", help="read the password from stdin instead")
        actions.add_parser("list", help="list users")
        passwd = actions.add_parser("passwd", help="set a new password (prints a generated one)")
        passwd.add_argument("name")
        passwd.add_argument("--password-stdin", action="store_true", help="read the password from stdin instead")
        role = actions.add_parser("role", help="change a user's role")
        role.add_argument("name")
        role.add_argument("role", choices=ROLES)
        for verb in ("disable", "enable"):
            actions.add_parser(verb, help=f"{verb} a user (disabling ends its sessions and tokens)").add_argument(
                "name"
            )
        return
    create = actions.add_parser("create", help="a new API token for a user (printed once)")
    create.add_argument("name")
    create.add_argument("--label", default="", help="what the token is for")
    actions.add_parser("list", help="list tokens").add_argument("name", nargs="?")
    actions.add_parser("revoke", help="revoke a token by its id").add_argument("id")


VERBS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "plan": (cmd_plan, "search parallel layouts for a request and rank them"),
    "estimate": (cmd_estimate, "evaluate one fixed parallel layout (request key 'parallel')"),
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
    return VERBS[args.verb][0](args)
