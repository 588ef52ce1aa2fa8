"""Schema fuzzing: schemathesis generates requests from the service's own OpenAPI document and
sends them to the app under gunicorn (tiny pipeline, small generation bounds, a real
wire-protocol database). Any 5xx, any status the document does not declare, and any
schema-valid request the service refuses fails the test, except the reviewed entries of
ALLOWED_REFUSALS, each of which says why refusing is right.

Each operation gets a bounded number of examples, positive (schema-valid) and negative
(schema-invalid), so the whole run takes a minute or two; they are derandomised, so a run is
repeatable and CI does not pass or fail by chance.
"""

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from django.conf import settings as django_settings
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.specs.openapi.checks import positive_data_acceptance, status_code_conformance

from config.text import NOT_BLANK
from imagegen.api.a1111 import SAMPLER_RULE, batch_limit
from scripts.embedded_mongo import EmbeddedMongo
from tests.support.model_service import ready_app
from tests.support.processes import AppServer
from todos.cursors import NOT_A_CURSOR

EXAMPLES = 20  # per operation and generation mode
CHECKS = [not_a_server_error, status_code_conformance, positive_data_acceptance]

# Refusals of schema-valid requests that are right, by (field, message) of the 400's details.
ALLOWED_REFUSALS = {
    ("prompt", NOT_BLANK): (
        "the not-blank rule counts format characters and combining marks as invisible; JSON "
        "Schema's regular expressions have no Unicode-category classes to say so, so the "
        "document states the rule in words (the description)"
    ),
    ("title", NOT_BLANK): "a todo title's not-blank rule, the same rule as the prompt's",
    ("after", NOT_A_CURSOR): (
        "a page cursor is opaque: only one the service wrote into a Link header is valid, and "
        "no schema can enumerate those"
    ),
    ("n_iter", batch_limit(django_settings.GEN_MAX_N)): (
        "A1111's txt2img makes batch_size x n_iter images, at most GEN_MAX_N in all; JSON Schema "
        "bounds each field but cannot bound their product, so n_iter's description states it"
    ),
    ("sampler_name", SAMPLER_RULE): (
        "A1111's sampler and schedule type are each one of a listed set (their enums), but not "
        "every sampler has every schedule type; JSON Schema states no such pairs on a field"
    ),
}


def allowed_refusal(response) -> bool:
    """A 400 whose every refused field is an entry of ALLOWED_REFUSALS (a todo title is
    named by its place, `todo.title` or `todos.3.title`)."""
    if response.status_code != 400:
        return False
    details = response.json()["error"].get("details") or [{}]
    return all(
        (re.sub(r"^todos?\.(\d+\.)?", "", d.get("field", "")), d.get("message")) in ALLOWED_REFUSALS
        for d in details
    )


@pytest.fixture(scope="module")
def fuzz_app(
    hub_root: Path, mongo: EmbeddedMongo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AppServer]:
    env = {
        "MONGODB_URI": mongo.uri(),
        # Images of one step at 64x64: dozens of generated jobs stay seconds of work, so a
        # synchronous request never waits its GEN_SYNC_TIMEOUT out behind them.
        "GEN_MAX_STEPS": "1",
        "GEN_DEFAULT_STEPS": "1",
        "GEN_MAX_SIDE": "64",
        "GEN_QUEUE_MAX": "100",  # a full queue's 503 is tested elsewhere
        "GEN_SYNC_TIMEOUT": "60",
    }
    with ready_app(hub_root, tmp_path_factory.mktemp("fuzz"), **env) as app:
        yield app


def fuzz(operation, mode: GenerationMode, base_url: str) -> list[str]:
    """Sends EXAMPLES generated requests to one operation; returns what failed, one line each."""
    failures: list[str] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              database=None, derandomize=True)  # fmt: skip
    def send(case) -> None:
        response = case.call(base_url=base_url, timeout=90)
        try:
            case.validate_response(response, checks=CHECKS)
        except (Failure, FailureGroup) as failure:
            if not (mode is GenerationMode.POSITIVE and allowed_refusal(response)):
                failures.append(f"{operation.label} [{mode.value}]: {failure}"[:2000])

    try:
        send()
    except Unsatisfiable:  # nothing to negate: an operation with no parameters and no body
        assert mode is GenerationMode.NEGATIVE, operation.label
    return failures


def test_every_operation_keeps_its_documented_contract(fuzz_app: AppServer):
    schema = schemathesis.openapi.from_url(fuzz_app.url("/api/openapi.json"))
    failures = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failures += fuzz(operation, mode, fuzz_app.base_url)
    assert not failures, "\n\n".join(failures)
