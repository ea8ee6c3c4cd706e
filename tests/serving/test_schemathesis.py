"""Property-based API tests from the OpenAPI schema (schemathesis) against a real `rcb serve`: no 5xx, ever.

Generated requests hit every operation with valid and invalid bodies, paths and query strings; a
few campaigns are registered first so bids and slot updates also reach their success paths.
"""

from __future__ import annotations

import sys

import httpx
import pytest
import schemathesis
from artifact_fixtures import exported_runs
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, status_code_conformance

from loadtest.run_server import free_port, start_process


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    models = exported_runs(tmp_path_factory)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "rcb.cli",
        "serve",
        "--model",
        str(models.cbrl_model),
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    with start_process(cmd, port, cpu=None, ready_path="/readyz", env={"RCB_MAX_UTILITIES": "5000"}) as process:
        with httpx.Client(base_url=process.url) as http:
            for campaign in ("shop-42", "a", "0"):
                http.put(f"/v1/campaigns/{campaign}", json={"episode": "e1", "roi_target": 1.0, "budget": 100.0})
        yield process


def test_no_server_errors(server):
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    checks = [not_a_server_error, status_code_conformance, content_type_conformance]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8
    statuses: list[int] = []
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            statuses.append(case.call_and_validate(base_url=server.url, checks=checks).status_code)

        check()
    # The generated traffic reached both the success paths and the refusals.
    assert len(statuses) >= 100 and any(s < 300 for s in statuses) and any(400 <= s < 500 for s in statuses)
