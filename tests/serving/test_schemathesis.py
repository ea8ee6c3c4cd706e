"""Property-based API tests from the OpenAPI schema (schemathesis) on a real `rcb serve`: the schema is the contract.

Schemathesis' engine runs in process as ``schemathesis run URL --checks all`` does: every phase (the schema's
examples, coverage of each constraint's edges, fuzzing, stateful sequences along the inferred links) and every check
(no 5xx; documented status codes, content types, headers and bodies; requests the schema forbids refused and those it
allows accepted; ``Allow`` of 405 and OPTIONS answers). A few campaigns are registered first so bids and slot updates
also reach their success paths. The rules the schema cannot state (relations between fields) shape the valid
requests through ``schemathesis_hooks``.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from artifact_fixtures import exported_runs
from schemathesis.engine import Status, events, from_schema

from . import schemathesis_hooks  # noqa: F401  (registers the hooks)
from .app_fixtures import rcb_serve

MAX_EXAMPLES = 50
"""Examples per operation and phase: the whole run stays well under a minute on a busy 2-core machine."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    models = exported_runs(tmp_path_factory)
    with rcb_serve(models.cbrl_model, RCB_MAX_UTILITIES="5000") as process:
        with httpx.Client(base_url=process.url) as http:
            for campaign in ("shop-42", "a", "0"):
                http.put(f"/v1/campaigns/{campaign}", json={"episode": "e1", "roi_target": 1.0, "budget": 100.0})
        yield process


def test_the_service_keeps_its_openapi_contract(server):
    config = schemathesis.Config()
    config.update(seed=20261126, max_failures=None)
    config.projects.override.checks.update(included_check_names=["all"])
    config.projects.override.generation.update(max_examples=MAX_EXAMPLES)
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=config)
    assert len(list(schema.get_all_operations())) >= 10

    failures: list[str] = []
    errors: list[str] = []
    statuses: list[int] = []
    checks_run: set[str] = set()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            for interaction in event.recorder.interactions.values():
                if interaction.response is not None:
                    statuses.append(interaction.response.status_code)
            for checks in event.recorder.checks.values():
                for check in checks:
                    checks_run.add(check.name)
                    if check.status == Status.FAILURE and check.failure_info is not None:
                        failure = check.failure_info.failure
                        failures.append(f"{event.recorder.label}: {failure.title}\n{failure.message}\n"
                                        f"{check.failure_info.code_sample}")  # fmt: skip
        elif isinstance(event, events.NonFatalError | events.FatalError):
            errors.append(str(getattr(event, "info", event)))
    assert not errors, "\n\n".join(errors)
    assert not failures, "\n\n".join(dict.fromkeys(failures))
    # Every check took part, and the generated traffic reached both the success paths and the refusals.
    assert {"not_a_server_error", "positive_data_acceptance", "negative_data_rejection"} <= checks_run
    assert {"response_schema_conformance", "status_code_conformance", "allow_header_conformance"} <= checks_run
    assert len(statuses) >= 500 and any(s < 300 for s in statuses) and any(400 <= s < 500 for s in statuses)
