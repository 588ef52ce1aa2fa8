"""POST /generate's form rules, in-process through Django's whole stack (middleware, Ninja,
the exception handlers): every refused field is a 400 naming the field and the rule, and
nothing is queued."""

import pytest
from django.test import Client

from imagegen.generation.jobs import get_jobs


@pytest.mark.parametrize(
    ("fields", "field", "rule"),
    [
        ({}, "prompt", "required"),
        ({"prompt": ""}, "prompt", "at least 1"),
        ({"prompt": "   "}, "prompt", "non-space"),
        ({"prompt": "p" * 1001}, "prompt", "at most 1000"),
        ({"negative_prompt": "n" * 1001}, "negative_prompt", "at most 1000"),
        ({"steps": "0"}, "steps", "greater than or equal to 1"),
        ({"steps": "101"}, "steps", "less than or equal to 100"),
        ({"steps": "2.5"}, "steps", "valid integer"),
        ({"guidance": "-0.1"}, "guidance", "greater than or equal to 0"),
        ({"guidance": "30.5"}, "guidance", "less than or equal to 30"),
        ({"guidance": "nan"}, "guidance", "finite number"),
        ({"guidance": "inf"}, "guidance", "finite number"),
        ({"guidance": "lots"}, "guidance", "valid number"),
        ({"size": "64"}, "size", "WIDTHxHEIGHT"),
        ({"size": "60x64"}, "size", "multiples of 8"),
        ({"size": "56x64"}, "size", "between 64 and 2048"),
        ({"size": "64x4096"}, "size", "between 64 and 2048"),
        ({"seed": "-1"}, "seed", "greater than or equal to 0"),
        ({"seed": str(2**32)}, "seed", "less than or equal to 4294967295"),
        ({"force_cpu": "maybe"}, "force_cpu", "valid boolean"),
        ({"stpes": "3"}, "stpes", "not a field"),
    ],
)
def test_each_bad_field_is_a_400_naming_field_and_rule(fields, field, rule):
    data = {"prompt": "fine", **fields} if "prompt" not in fields and fields != {} else fields
    response = Client().post("/generate", data)
    assert response.status_code == 400, response.content
    details = {d["field"]: d["message"] for d in response.json()["error"]["details"]}
    assert rule in details[field]
    assert field in response.json()["error"]["message"]
    assert get_jobs().recent(1) == []  # refused before anything was queued


def test_several_bad_fields_are_each_named():
    response = Client().post("/generate", {"prompt": " ", "steps": "0", "size": "1x1"})
    assert response.status_code == 400
    fields = [d["field"] for d in response.json()["error"]["details"]]
    assert fields == ["prompt", "steps", "size"]
