"""The service's settings (service.config.Settings) and how `rcb serve` hands them on."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from rcb.cli import app
from service.config import Settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # set, then deleted: monkeypatch restores each as it was, also those `rcb serve` writes into os.environ
    for name in (
        "RCB_STORE",
        "RCB_REDIS_URL",
        "RCB_API_TOKEN",
        "RCB_LOG_LEVEL",
        "RCB_MODEL_DIR",
        "RCB_SHIELD",
        "STORE",
    ):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_the_store_is_read_from_its_prefixed_variables_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unrelated STORE variable pointed the service at another Redis (or stopped it starting)."""
    monkeypatch.setenv("STORE", "redis://elsewhere:6379/0")
    assert Settings().store == "memory"
    monkeypatch.setenv("RCB_REDIS_URL", "redis://h:1/0")
    assert Settings().store == "redis://h:1/0"
    monkeypatch.setenv("RCB_STORE", "redis://h:2/0")
    assert Settings().store == "redis://h:2/0"
    assert Settings(store="memory").store == "memory"  # the CLI's and tests' keyword


def test_an_empty_token_is_no_token_and_a_short_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RCB_API_TOKEN", "")
    assert Settings().api_token is None
    monkeypatch.setenv("RCB_API_TOKEN", "change-me")
    with pytest.raises(ValidationError, match="at least 16 characters"):
        Settings()
    monkeypatch.setenv("RCB_API_TOKEN", "0123456789abcdef")
    token = Settings().api_token
    assert token is not None and token.get_secret_value() == "0123456789abcdef"


def test_the_log_level_is_checked_at_startup(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(log_level="debug").log_level == "DEBUG"
    with pytest.raises(ValidationError, match="log_level must be"):
        Settings(log_level="verbose")


def test_rcb_serve_keeps_the_environments_log_level_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """--log-level defaulted to info and overrode RCB_LOG_LEVEL, in the Docker image too (its CMD is rcb serve)."""
    import uvicorn

    runs: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: runs.append(kwargs))
    monkeypatch.setenv("RCB_LOG_LEVEL", "DEBUG")
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 0, result.output
    assert runs[-1]["log_level"] == "debug"
    import os

    assert os.environ["RCB_LOG_LEVEL"] == "DEBUG"  # what the workers read
    result = CliRunner().invoke(app, ["serve", "--log-level", "warning"])
    assert result.exit_code == 0, result.output
    assert runs[-1]["log_level"] == "warning" and os.environ["RCB_LOG_LEVEL"] == "WARNING"
    result = CliRunner().invoke(app, ["serve", "--log-level", "verbose"])
    assert result.exit_code != 0 and "log_level must be" in result.output


@pytest.mark.parametrize("prefix", ["", "a{b", "rcb}"])
def test_a_key_prefix_the_store_would_refuse_is_a_bad_setting(prefix: str) -> None:
    """It passed the settings and failed in the lifespan with a traceback."""
    with pytest.raises(ValidationError, match="key_prefix must be non-empty"):
        Settings(key_prefix=prefix)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis://:hunter2@h:99999", "Port out of range"),
        ("redis://:hunter2@:6379", "names no host"),
        ("redis+cluster://u:hunter2@a:7000,b", "is not host:port"),
        ("postgres://u:hunter2@h:5432", "unsupported store URL"),
    ],
)
def test_a_store_url_the_store_cannot_open_is_a_bad_setting_and_its_password_is_not_said(url: str, said: str) -> None:
    """`redis://h:99999` passed the settings and failed when the store opened; the messages quoted the password."""
    result = CliRunner().invoke(app, ["serve", "--store", url])
    assert result.exit_code != 0 and said in result.output and "bad settings" in result.output
    assert "hunter2" not in result.output and "***" in result.output
    with pytest.raises(ValidationError) as refused:  # as uvicorn --factory or a traceback would print it
        Settings(store=url)
    assert "hunter2" not in str(refused.value)
    assert Settings(store="redis://:hunter2@localhost:6379/0").store_kind == "redis"


@pytest.mark.parametrize(
    "url",
    ["redis://u:p@ss@h:6379", "redis://u:pa/ss@h", "default:hunter2@redis:6379", "redis://h:6379/0?password=hunter2"],
)
def test_store_url_errors_mask_every_spelling_of_a_password(url: str) -> None:
    """The pattern stopped at the first @ or /, and masked nothing without a scheme or in the query."""
    from service.store.base import redacted

    shown = redacted(url)
    assert "***" in shown and not any(part in shown for part in ("hunter2", "p@ss", "pa/ss", ":p@"))


def test_rcb_serve_on_a_port_in_use_is_a_clear_error(tmp_path) -> None:
    """uvicorn exited 3 after the app and its model had started; the CLI promises 0 or 2."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--port", str(port), "--model", str(tmp_path)])
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.output, result.output


def test_the_listen_check_binds_as_uvicorn_does() -> None:
    """One worker: uvicorn binds `::` IPv6-only (asyncio), so an IPv4 listener on the port is no conflict; an empty
    host is every interface to uvicorn and is not refused."""
    import socket

    import typer

    from rcb.commands.serve import _check_can_listen

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            with socket.socket(socket.AF_INET6) as free:
                free.bind(("::", 0))
            ipv6 = True
        except OSError:  # a host without IPv6
            ipv6 = False
        if ipv6:
            _check_can_listen("::", port, workers=1)  # exit 2 before: the probe accepted IPv4 as well
        _check_can_listen("", port, workers=1)
        with pytest.raises(typer.Exit):
            _check_can_listen("127.0.0.1", port, workers=1)


def test_the_listen_check_binds_every_address_of_a_host_with_one_worker(monkeypatch) -> None:
    """asyncio binds every address a host resolves to; the check bound only the first, so a conflict on a host's
    second address (``localhost`` as ``::1`` then ``127.0.0.1``) surfaced as uvicorn's exit 3 after the model
    loaded. With several workers uvicorn binds one IPv4 socket for a host name, so only that one is checked."""
    import socket

    import typer

    from rcb.commands.serve import _check_can_listen

    try:
        with socket.socket(socket.AF_INET6) as v6:
            v6.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    real = socket.getaddrinfo

    def both(host, port, family=0, type=0, proto=0, flags=0):
        """A localhost that resolves to ::1 first, as many hosts' does."""
        if host != "dual.test":
            return real(host, port, family, type, proto, flags)
        v4 = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))
        v6 = (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0))
        return [info for info in (v6, v4) if family in (socket.AF_UNSPEC, info[0])]

    monkeypatch.setattr(socket, "getaddrinfo", both)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(typer.Exit):
            _check_can_listen("dual.test", port, workers=1)  # the host's second address is taken
        with pytest.raises(typer.Exit):
            _check_can_listen("dual.test", port, workers=2)  # uvicorn's own socket: IPv4
    with socket.socket(socket.AF_INET6) as v6:
        v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        v6.bind(("::1", 0))
        v6.listen()
        port = v6.getsockname()[1]
        with pytest.raises(typer.Exit):
            _check_can_listen("dual.test", port, workers=1)
        _check_can_listen("dual.test", port, workers=2)  # IPv4 only: no conflict for uvicorn's socket
