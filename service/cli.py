"""The bidding service's command line: ``python -m service`` (and ``rcb serve``, which runs the same command).

FastAPI on uvicorn over a model artifact and a state store. Flags override the ``RCB_*`` environment
(``service/config.py``). The in-process store (``--store memory``, the default) serves one process only;
``--workers N`` needs Redis or a Redis Cluster, where the state of record lives and every worker shares it.
Needs only model/ and service/ and the base install: the service image runs it. HTTP API: docs/http-api.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypedDict

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from pydantic import SecretStr

console = Console(stderr=True, soft_wrap=True)
"""Messages (the serving line, warnings, errors) go to stderr."""

EPILOG = "HTTP API and settings: docs/http-api.md. Options: docs/cli.md (rcb serve). Exit codes: 0 ok, 2 bad input."


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a one-line error and return the Exit to raise."""
    console.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False)  # [..] in a path is text
    return typer.Exit(code)


class _Overrides(TypedDict, total=False):
    """The flags given, as :class:`service.config.Settings` keywords (a flag left out keeps the environment's)."""

    model_dir: Path
    store: str
    api_token: SecretStr
    shield: bool
    log_level: str


def serve_command(
    model: Annotated[
        Path | None, typer.Option("--model", help="Model directory (rcb export's output). Default: models/default.")
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="memory, redis://HOST:PORT/DB or redis+cluster://H1:P1,H2:P2. Default: $RCB_STORE (or "
            "$RCB_REDIS_URL), else memory.",
        ),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="Worker processes (Redis stores only).")] = 1,
    token: Annotated[
        str | None, typer.Option("--token", envvar="RCB_API_TOKEN", help="Bearer token required on write endpoints.")
    ] = None,
    shield: Annotated[
        bool | None,
        typer.Option(
            "--shield/--no-shield",
            help="Bound the model's ratios with the safety shield. Default: $RCB_SHIELD, else on.",
        ),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option("--log-level", help="debug, info, warning or error. Default: $RCB_LOG_LEVEL, else info."),
    ] = None,
) -> None:
    """Serve the model: register campaigns, take slot updates, score bids (docs/http-api.md)."""
    from pydantic import SecretStr, ValidationError

    from model.artifact import ArtifactError, read_card
    from service.config import Settings

    overrides: _Overrides = {}
    if log_level is not None:
        overrides["log_level"] = log_level
    if model is not None:
        overrides["model_dir"] = model
    if store is not None:
        overrides["store"] = store
    if token is not None:
        overrides["api_token"] = SecretStr(token)
    if shield is not None:
        overrides["shield"] = shield
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise fail(f"bad settings: {problems}") from None
    if workers > 1 and settings.store_kind == "memory":
        raise fail(
            "--workers > 1 needs a shared store (--store redis://... or redis+cluster://...): the memory store "
            "lives in one process"
        )
    try:
        read_card(settings.model_dir)
    except ArtifactError as exc:
        console.print(
            f"[yellow]warning:[/] {exc}\n  the fallback controller decides and /readyz answers 503 until a "
            "model loads (POST /v1/admin/reload-model or SIGHUP)",
            highlight=False,
        )
    # Workers are separate processes: hand them the settings through the environment, then build the app there.
    env = {
        "RCB_MODEL_DIR": str(settings.model_dir),
        "RCB_STORE": settings.store,
        "RCB_LOG_LEVEL": settings.log_level,
        "RCB_SHIELD": "1" if settings.shield else "0",
    }
    os.environ.update(env)
    if settings.api_token is not None:
        os.environ["RCB_API_TOKEN"] = settings.api_token.get_secret_value()
    else:  # --token "" or an empty RCB_API_TOKEN: the workers must not enforce what the parent dropped
        os.environ.pop("RCB_API_TOKEN", None)
    os.environ.pop("RCB_REDIS_URL", None)
    import uvicorn

    _check_can_listen(host, port, workers)
    console.print(
        f"serving {settings.model_dir} with the {settings.store_kind} store on http://{host}:{port} "
        f"({workers} worker{'s' if workers > 1 else ''}); docs at /docs",
        highlight=False,
    )
    try:
        uvicorn.run(
            "service.main:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            loop="uvloop",
            http="httptools",
            access_log=False,
            log_level=settings.log_level.lower(),
            timeout_graceful_shutdown=10,
        )
    except SystemExit as exc:  # uvicorn exits 3 when it cannot start (the port taken since the check above)
        if exc.code in (0, None):
            raise
        raise fail("the service did not start (uvicorn's error is above)") from None


def _check_can_listen(host: str, port: int, workers: int) -> None:
    """Bind ``host:port`` as uvicorn will, before the app and its model load: a port in use or a host that does
    not resolve is a clear error with exit 2, not uvicorn's exit 3 after the startup. One worker: every address the
    host resolves to, at once, an IPv6 socket IPv6-only (asyncio's ``create_server``: ``localhost`` is ``::1`` and
    ``127.0.0.1``, and a conflict on either stops it). Several workers: the one socket uvicorn binds itself, IPv4
    unless the host is an IPv6 address (``Config.bind_socket``). Every socket has SO_REUSEADDR, as uvicorn's. An
    empty host (every interface to uvicorn) is left to uvicorn."""
    import socket
    from contextlib import ExitStack

    if not host:
        return
    family = socket.AF_UNSPEC if workers == 1 else socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise fail(f"--host {host!r} does not resolve ({exc.strerror})") from None
    addresses = list(dict.fromkeys((*info[:3], info[4]) for info in infos))  # asyncio binds each once
    if workers > 1:
        addresses = addresses[:1]
    with ExitStack() as bound:  # held together: two addresses of one host may collide with each other
        for address_family, kind, proto, address in addresses:
            probe = bound.enter_context(socket.socket(address_family, kind, proto))
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if address_family == socket.AF_INET6 and workers == 1:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                shown = f"[{address[0]}]" if address_family == socket.AF_INET6 else address[0]
                where = f"{host}:{port}" if address[0] == host else f"{host}:{port} ({shown})"
                raise fail(f"cannot listen on {where}: {exc.strerror}") from None


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command(epilog=EPILOG)(serve_command)  # the one command: ``python -m service [OPTIONS]``


def main() -> None:
    """``python -m service``."""
    app()
