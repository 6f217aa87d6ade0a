"""`trainplan serve`, `users` and `tokens`: the web service's start (with a first admin on an empty database) and
its accounts."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from app.cli.common import database_error, fail, input_error
from app.planner.errors import FieldError


def _open_accounts() -> Any | None:
    """`_accounts()` for the account verbs, or None once a bad or unreachable DATABASE_URL is said in a line (not a
    traceback)."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return _accounts()
    except ValueError as exc:  # the settings' own check of DATABASE_URL
        fail([FieldError("", str(exc))])
    except SQLAlchemyError as exc:
        fail([database_error(exc)])
    return None


def _accounts(settings: Any = None) -> Any:
    """The account store on DATABASE_URL (tables created if missing)."""
    from app.settings import Settings
    from app.store import AccountStore, PlanStore

    settings = settings or Settings.from_env()
    store = PlanStore(settings.database_url, settings.sqlite_synchronous)
    store.init()
    return AccountStore(store.engine)


def _users_store(settings: Any) -> Any | None:
    """The account store of a database without users, on which `first_admin` makes one once the address is bound;
    None when it has users, or cannot be reached yet (said: the server starts anyway, and its own start reports it,
    retried under an orchestrator). ValueError: the SQLite file's folder cannot be made (app/store/db.py)."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        accounts = _accounts(settings)
        return None if accounts.count_users() else accounts
    except SQLAlchemyError as exc:
        print(
            f"trainplan: cannot check for users yet ({type(exc).__name__}); the server starts anyway", file=sys.stderr
        )
        return None


def first_admin(accounts: Any, settings: Any) -> None:
    """On a database without users: create `admin` with a generated password and say how to log in."""
    from app.store import AccountError
    from app.store.hashing import new_password

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


SERVE_FLAGS = ("host", "port", "workers")


def cmd_serve(args: argparse.Namespace) -> int:
    """The web service (uvicorn app.main:app); settings from the environment, host/port/workers also as flags.
    The database is opened, then the address bound, and only then is a first admin made: a port in use or a host
    that is not this machine's is said in a line, exit 2, with one worker or several, and nobody is made for a
    server that never ran (it was a traceback with several workers, after the admin's login was printed: QA)."""
    import uvicorn

    from app.settings import ENV_NAMES, Settings

    flags = {name: getattr(args, name) for name in SERVE_FLAGS}
    try:
        settings = Settings.from_env(override_names={name: f"--{name}" for name in SERVE_FLAGS}, **flags)
    except ValueError as exc:
        return input_error(exc)
    try:
        accounts = _users_store(settings)
    except ValueError as exc:  # the SQLite file's folder cannot be made: nothing could be stored
        return fail([FieldError("", str(exc))])
    sock = _listen(args, settings)
    if sock is None:
        return 2
    if accounts is not None:
        first_admin(accounts, settings)
    # the app (in each worker) reads its settings from the environment: pass the flags on that way
    os.environ.update({ENV_NAMES[name]: str(getattr(settings, name)) for name in SERVE_FLAGS})
    config = uvicorn.Config(
        "app.main:app", host=settings.host, port=settings.port, workers=settings.workers, log_level=settings.log_level
    )
    _log_running(settings.host, sock.getsockname()[1])
    if settings.workers == 1:
        server = uvicorn.Server(config)
        with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run
            server.run(sockets=[sock])
        return 0 if server.started else 3  # uvicorn's STARTUP_FAILURE (the app's lifespan failed)
    from uvicorn.supervisors import Multiprocess

    Multiprocess(config, sockets=[sock]).run()
    return 0


def _listen(args: argparse.Namespace, settings: Any) -> Any | None:
    """`tcp_listener` on the settings' address, or None once why not is said in a line naming where host and port
    came from: `--host/--port: cannot listen on host '127.0.0.1' port 8000: Address already in use`."""
    try:
        return tcp_listener(settings.host, settings.port)
    except OSError as exc:  # socket.gaierror for a host that does not resolve
        where = f"{_given_as(args, 'host')}/{_given_as(args, 'port')}"
        reason = exc.strerror or str(exc)
        fail([FieldError(where, f"cannot listen on host {settings.host!r} port {settings.port}: {reason}")])
        return None


def _given_as(args: argparse.Namespace, name: str) -> str:
    """Where a serve setting came from, as the user would change it: its flag, or its variable when only that was
    set."""
    from app.settings import ENV_NAMES

    var = ENV_NAMES[name]
    return var if getattr(args, name) is None and os.environ.get(var, "") != "" else f"--{name}"


def _log_running(host: str, port: int) -> None:
    """uvicorn's own start line, which it logs only for an address it bound itself."""
    import logging

    shown = f"[{host}]" if ":" in host else host
    logging.getLogger("uvicorn.error").info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port)


def tcp_listener(host: str, port: int) -> Any:
    """The listening socket of the server, bound before anything else is done, in the same way for one worker and
    several (uvicorn's supervisor hands it to each). TCP by protocol, with TCP_NODELAY: on uvicorn's own
    socket.socket(family) (protocol 0) asyncio skips TCP_NODELAY on the connections, and Nagle's algorithm with
    delayed ACKs then adds ~40 ms to every keep-alive request (benchmarks/service_latency.py --keepalive)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        # listening now: two sockets with SO_REUSEADDR may both bind one port until one listens, so a second
        # `serve` got past the bind and created the first admin before uvicorn failed (review 2026-12-07)
        sock.listen(2048)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="address to bind (default: TRAINPLAN_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: TRAINPLAN_PORT or 8000)")
    p.add_argument("--workers", type=int, help="worker processes (default: TRAINPLAN_WORKERS or 1)")


def _secret(args: argparse.Namespace) -> tuple[str, bool]:
    """(password, generated?): one line from stdin with --password-stdin, else a generated one."""
    from app.store.hashing import new_password

    if getattr(args, "password_stdin", False):
        line = sys.stdin.buffer.readline().rstrip(b"\n").removesuffix(b"\r")
        try:
            return line.decode("utf-8"), False
        except UnicodeDecodeError as exc:  # it printed the codec's own "can't decode byte 0xff in position 0"
            raise ValueError(
                f"--password-stdin: the password read from stdin is not UTF-8 text (byte 0x{line[exc.start]:02x} "
                f"at offset {exc.start}); send it as UTF-8"
            ) from None
    return new_password(), True


def cmd_users(args: argparse.Namespace) -> int:
    """users add|list|passwd|role|disable|enable."""
    accounts = _open_accounts()
    if accounts is None:
        return 2
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
        return fail([FieldError("", str(exc))])
    return 0


def cmd_tokens(args: argparse.Namespace) -> int:
    """tokens create|list|revoke."""
    from app.store import AccountError

    accounts = _open_accounts()
    if accounts is None:
        return 2
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
        return fail([FieldError("", str(exc))])
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
        for verb, what in (
            ("disable", "disable a user: ends its web sessions and suspends its tokens until it is enabled"),
            ("enable", "enable a disabled user: its tokens that were not revoked work again (revoke them to end them)"),
        ):
            actions.add_parser(verb, help=what).add_argument("name")
        return
    create = actions.add_parser("create", help="a new API token for a user (printed once)")
    create.add_argument("name")
    create.add_argument("--label", default="", help="what the token is for")
    actions.add_parser("list", help="list tokens").add_argument("name", nargs="?")
    actions.add_parser("revoke", help="revoke a token by its id").add_argument("id")
