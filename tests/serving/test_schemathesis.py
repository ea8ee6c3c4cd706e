"""Property-based API tests from the OpenAPI schema (schemathesis) against a real `rcb serve`: no 5xx, ever.

Generated requests hit every operation with valid and invalid bodies, paths and query strings; a
few campaigns are registered first so bids and slot updates also reach their success paths.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from artifact_fixtures import exported_runs
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, status_code_conformance

from .app_fixtures import rcb_serve


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    models = exported_runs(tmp_path_factory)
    with rcb_serve(models.cbrl_model, RCB_MAX_UTILITIES="5000") as process:
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
