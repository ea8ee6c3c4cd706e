"""The test harness's own redis-server processes (:mod:`redis_servers`): a port taken between its choice and the
server's bind (by any test's outgoing connection: seen in CI) moves a first start to another port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from .redis_servers import HOST, RedisServer, _ephemeral_ports, free_cluster_port, free_port

pytestmark = pytest.mark.redis


@pytest.fixture
def taken_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_first_start_on_a_taken_port_moves_to_another(tmp_path: Path, taken_port: int):
    server = RedisServer(tmp_path / "moved", port=taken_port, pick_port=free_port)
    try:
        server.start()
        assert server.port != taken_port and server.client().ping()
        moved = server.port
        server.restart()  # a restart keeps the port it runs on
        assert server.port == moved and server.client().ping()
    finally:
        server.stop()


def test_a_given_port_is_kept_and_its_failure_said(tmp_path: Path, taken_port: int):
    server = RedisServer(tmp_path / "kept", port=taken_port)
    with pytest.raises(RuntimeError, match="Address already in use"):
        server.start()
    server.stop()


def test_cluster_ports_stay_out_of_the_ephemeral_range():
    low, _ = _ephemeral_ports()
    taken: set[int] = set()
    for _ in range(20):
        port = free_cluster_port(taken)
        if low - 10001 - 10000 >= 1000:  # room below the range: both the port and its bus port stay there
            assert port + 10000 < low
