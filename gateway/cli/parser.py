"""``sortyard``: serve the gateway, run it with a local engine, check policies, and more.

sortyard run    [--policy FILE] [--engine-model smollm2-135m]   (what ``make run`` does)
sortyard serve  [--policy FILE] [--host H] [--port P] [--workers N]
sortyard policy check FILE... [--overlay FILE | --no-overlay]
sortyard keys new --tenant T [--name N] [--admin]
sortyard keys create|list|show|update|rotate|revoke|audit --url URL --admin-key KEY ...
sortyard audit verify|export [--file PATH | --redis-url URL] [--since T]
sortyard route explain "prompt" [--policy FILE [--overlay FILE]]
sortyard router train data.jsonl -o router.bin
sortyard cost estimate (--requests-per-month N | --requests-per-day N) --tokens-per-request N ...

``sortyard COMMAND --help`` says more about each; ``sortyard --version`` prints the version.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from gateway.cli import cost
from gateway.cli.audit import add_audit_commands
from gateway.cli.key_admin import add_key_admin_commands
from gateway.cli.keys import keys_new
from gateway.cli.local import dev_settings, run_local
from gateway.cli.logs import configure_logging
from gateway.cli.policy import policy_check, require_overlay
from gateway.cli.serve import serve
from gateway.cli.server_args import add_server_arguments, settings_problem
from gateway.policy import PolicyError
from gateway.roles import ROLES
from gateway.settings import Settings
from gateway.version import installed_version


def _fail(message: str) -> NoReturn:
    """Invalid input: one ``error:`` line on standard error, exit 2 (argparse's own status)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _settings(args: argparse.Namespace) -> Settings:
    """The server's settings from its flags and ``SORTYARD_*``, refused here when they could not serve."""
    try:
        settings = Settings.from_env(
            policy_path=args.policy,
            policy_overlay=args.overlay,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
            tls_certfile=args.tls_certfile,
            tls_keyfile=args.tls_keyfile,
            tls_client_ca=args.tls_client_ca,
            tls_client_auth=args.tls_client_auth,
        )
    except ValueError as error:
        _fail(str(error))
    problem = settings_problem(settings)
    if problem is not None:
        _fail(problem)
    return settings


def _serve_command(args: argparse.Namespace) -> int:
    try:
        require_overlay(args.overlay)
    except PolicyError as error:
        _fail(str(error))
    settings = _settings(args)
    configure_logging(settings)
    return serve(settings)


def _run_command(args: argparse.Namespace) -> int:
    folder = os.path.dirname(args.overlay or "") or "."
    if not os.path.isdir(folder):  # ``run`` writes its development key's hash there
        _fail(f"{args.overlay}: no such folder {folder} for the overlay (--overlay)")
    settings = dev_settings(_settings(args))
    configure_logging(settings)
    return run_local(settings, args.engine_model, start_engine=not args.no_engine)


def _route_explain(argv: list[str]) -> int:
    from gateway.cli.explain import explain_main

    return explain_main(argv)


def _router_train(argv: list[str]) -> int:
    from gateway.cli.train import train_main  # the one place that imports torch

    return train_main(argv)


def _forward(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    to: Callable[[list[str]], int],
    help: str,
) -> None:
    """A leaf whose module parses its own arguments (``--help`` too): it gets what follows ``name``."""
    commands.add_parser(name, help=help, add_help=False).set_defaults(forward=to)


def _parser() -> argparse.ArgumentParser:
    """Every command in one tree; each leaf sets ``handler`` (its arguments parsed) or ``forward``."""
    parser = argparse.ArgumentParser(
        prog="sortyard", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"sortyard {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start the local reference engine, then the gateway (make run)")
    add_server_arguments(run)
    run.add_argument(
        "--engine-model",
        action="append",
        help="a model for the local engine; repeat for several (default: those the policy's local "
        "replicas name)",
    )
    run.add_argument("--no-engine", action="store_true", help="do not start the local engine")
    run.set_defaults(handler=_run_command)
    serve_p = sub.add_parser("serve", help="serve the gateway")
    add_server_arguments(serve_p)
    serve_p.set_defaults(handler=_serve_command)

    policy = sub.add_parser("policy", help="policy tools").add_subparsers(
        dest="policy_command", required=True
    )
    check = policy.add_parser(
        "check", help="validate policy files without serving, each with the overlay serve would merge"
    )
    check.add_argument("files", nargs="+")
    overlay = check.add_mutually_exclusive_group()
    overlay.add_argument("--overlay", help="the overlay to merge (default: as serve, local.yaml beside it)")
    overlay.add_argument("--no-overlay", action="store_true", help="check the files alone")
    check.set_defaults(
        handler=lambda args: policy_check(args.files, args.overlay, use_overlay=not args.no_overlay)
    )

    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="keys_command", required=True)
    keys_new_p = keys.add_parser("new", help="print a fresh key once, plus the policy stanza with its hash")
    keys_new_p.add_argument("--tenant", required=True)
    keys_new_p.add_argument("--name")
    keys_new_p.add_argument("--admin", action="store_true", help="the same as --role admin")
    keys_new_p.add_argument("--role", choices=ROLES, help="its admin role (docs/security.md)")
    keys_new_p.set_defaults(handler=lambda args: keys_new(args.tenant, args.name, args.admin, args.role))
    add_key_admin_commands(keys)  # the admin API of a running gateway
    add_audit_commands(sub)  # the audit trail's file or Redis, read directly

    route = sub.add_parser("route", help="where model: auto goes").add_subparsers(
        dest="route_command", required=True
    )
    _forward(route, "explain", _route_explain, help='which pool `model: "auto"` would pick, and why')
    router = sub.add_parser("router", help="the learned tier classifier: train it")
    router_commands = router.add_subparsers(dest="router_command", required=True)
    _forward(router_commands, "train", _router_train, help="train it on JSONL (the only torch import)")

    cost_doc = cost.__doc__ or ""
    cost_p = sub.add_parser("cost", help="capacity and cost", description=cost_doc.split("\n\n")[0])
    estimate = cost_p.add_subparsers(dest="cost_command", required=True).add_parser(
        "estimate",
        help="monthly GPU cost of a workload",
        description=cost_doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cost.add_estimate_arguments(estimate)
    estimate.set_defaults(handler=cost.estimate_main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's) and run the command; its return value is the exit code."""
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    forward = getattr(args, "forward", None)
    if forward is not None:
        return int(forward(rest))
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(args.handler(args))
