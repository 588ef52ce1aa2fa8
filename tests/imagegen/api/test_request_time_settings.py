"""Bounds and access that settings set are read at each request, in process: a changed
GEN_MAX_STEPS, GEN_MAX_N or API_TOKEN takes effect without a new process, in the answers
(the same 400 naming the field and the rule as a fixed bound's) and in the OpenAPI schema."""

from django.test import Client


def refusal(response) -> dict[str, str]:
    assert response.status_code == 400, response.content
    return {d["field"]: d["message"] for d in response.json()["error"]["details"]}


def test_a_changed_steps_bound_takes_effect_at_the_next_request(settings):
    settings.GEN_MAX_STEPS = 100
    details = refusal(Client().get("/generate/estimate", {"steps": 150}))
    assert details == {"steps": "Input should be less than or equal to 100"}
    settings.GEN_MAX_STEPS = 200
    assert Client().get("/generate/estimate", {"steps": 150}).status_code == 200
    settings.GEN_MAX_STEPS = 120
    details = refusal(Client().get("/generate/estimate", {"steps": 150}))
    assert details == {"steps": "Input should be less than or equal to 120"}


def test_a_changed_guidance_bound_is_refused_as_a_fixed_one_was(settings):
    settings.GEN_MAX_GUIDANCE = 7.5
    details = refusal(Client().get("/generate/estimate", {"guidance": 8}))
    assert details == {"guidance": "Input should be less than or equal to 7.5"}


def test_each_protocol_reads_the_images_bound_per_request(settings):
    settings.GEN_MAX_N = 1
    openai = Client().post(
        "/v1/images/generations", {"prompt": "a fox", "n": 2}, content_type="application/json"
    )
    assert openai.status_code == 400, openai.content
    assert openai.json()["error"]["param"] == "n"
    assert "less than or equal to 1" in openai.json()["error"]["message"]
    a1111 = Client().post(
        "/sdapi/v1/txt2img", {"prompt": "a fox", "batch_size": 2}, content_type="application/json"
    )
    assert a1111.status_code == 400, a1111.content
    assert "batch_size" in a1111.content.decode()
    assert "less than or equal to 1" in a1111.content.decode()


def test_the_schema_shows_the_bound_in_force(settings):
    settings.GEN_MAX_STEPS = 123
    schema = Client().get("/api/openapi.json").json()
    steps = schema["paths"]["/generate/estimate"]["get"]["parameters"]
    bounds = next(p["schema"] for p in steps if p["name"] == "steps")
    assert bounds["maximum"] == 123


def test_a_token_set_in_process_is_asked_for_at_the_next_request(settings):
    settings.API_TOKEN, settings.API_KEYS = "", False
    assert Client().get("/jobs").status_code == 200  # open
    assert "security" not in Client().get("/api/openapi.json").json()["paths"]["/jobs"]["get"]
    settings.API_TOKEN = "s3cret-token"
    refused = Client().get("/jobs")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Bearer"
    assert Client().get("/jobs", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200
    basic = Client().get("/sdapi/v1/options", HTTP_AUTHORIZATION="Basic dTpzM2NyZXQtdG9rZW4=")
    assert basic.status_code == 200, basic.content  # the token as Basic's password
    schema = Client().get("/api/openapi.json").json()
    assert schema["paths"]["/jobs"]["get"]["security"] == [{"ApiToken": []}]
    settings.API_TOKEN = ""
    assert Client().get("/jobs").status_code == 200  # open again


def test_every_bounded_body_field_shows_both_its_bounds_in_the_schema(settings):
    """A fixed lower bound beside a setting's upper one: both as JSON Schema keywords
    (`minimum`, `maximum`), which clients and the schema fuzzer read."""
    settings.GEN_MAX_STEPS = 77
    schemas = Client().get("/api/openapi.json").json()["components"]["schemas"]
    fields = {
        ("ImageGenerationIn", "steps"): (1, 77),
        ("ImageGenerationIn", "n"): (1, settings.GEN_MAX_N),
        ("ImageGenerationIn", "guidance_scale"): (0, settings.GEN_MAX_GUIDANCE),
        ("Txt2ImgIn", "steps"): (1, 77),
        ("Txt2ImgIn", "n_iter"): (1, settings.GEN_MAX_N),
        ("Img2ImgIn", "width"): (1, settings.GEN_MAX_SIDE),
    }
    for (schema, field), (low, high) in fields.items():
        shown = schemas[schema]["properties"][field]
        number = next(s for s in shown.get("anyOf", [shown]) if s.get("type") != "null")
        assert (number.get("minimum"), number.get("maximum")) == (low, high), (schema, field)
