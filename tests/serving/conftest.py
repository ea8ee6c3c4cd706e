"""Service test fixtures: real Redis servers (pytest-redis style) and one ``store`` per backend (limits style).

- ``redis_server`` (session): one redis-server on a free port; ``.url``, ``.port``, ``.pid``, ``.pause()``,
  ``.resume()``, ``.kill()``, ``.restart()``, ``.ensure_running()``, ``.client()`` (a sync redis-py client).
- ``redis_cluster`` (session): three cluster masters; ``.url`` (``redis+cluster://...``), ``.ports``, ``.servers``
  (each a server object as above), ``.ensure_running()``.
- ``store`` (function): an open store per backend (``memory``, ``redis`` marked ``redis``, ``cluster`` marked
  ``cluster``), with a unique key prefix; closed and its keys deleted afterwards. ``store_url`` is its URL
  (``"memory"`` for the memory store).

A test that pauses or kills a server does not break the next one: after every test that used ``redis_server`` or
``redis_cluster``, the servers are resumed or restarted. A missing redis-server fails these tests (never skips).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from artifact_fixtures import Exported
from fastapi.testclient import TestClient

from service.store import EpisodeStore, open_store

from .redis_servers import RedisClusterProcs, RedisNotInstalled, RedisServer, delete_prefix, running_cluster

STORE_KINDS = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
    pytest.param("cluster", id="cluster", marks=pytest.mark.cluster),
]


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    try:
        server = RedisServer(tmp_path_factory.mktemp("redis"))
    except RedisNotInstalled as e:
        pytest.fail(str(e), pytrace=False)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcs]:
    with running_cluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _heal_redis_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used a session server, resume or restart whatever it paused or killed."""
    yield
    for name in ("redis_server", "redis_cluster"):
        if name in request.fixturenames:
            request.getfixturevalue(name).ensure_running()


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest) -> str:
    """The URL of the backend under test: "memory", redis_server.url or redis_cluster.url."""
    kind = request.param
    if kind == "memory":
        return "memory"
    if kind == "redis":
        return request.getfixturevalue("redis_server").url
    if kind == "cluster":
        return request.getfixturevalue("redis_cluster").url
    raise ValueError(f"unknown store kind {kind!r}")


@pytest.fixture
async def store(store_url: str, anyio_backend: str) -> AsyncIterator[EpisodeStore]:
    """An open store with a fresh key prefix; closed and its keys deleted after the test."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    opened = await open_store(store_url, prefix=prefix)
    try:
        yield opened
    finally:
        await opened.aclose()
        await delete_prefix(store_url, prefix)


@pytest.fixture(scope="session")
def models(exported: Exported) -> Exported:
    """The session's tiny exported models (tests/conftest.py's ``exported``) under the serving tests' name."""
    return exported


@pytest.fixture
def client(models: Exported) -> Iterator[TestClient]:
    """The CBRL model served with the memory store (lifespan run: model loaded, store open)."""
    from .app_fixtures import serving

    with serving(models.cbrl_model) as c:
        yield c
