"""The OpenAPI document is the contract: what the docs (docs/*.md) promise is declared there."""

import json

import pytest

from config.urls import api
from imagegen.generation.schedulers import A1111_NAMES, NAMES

SCHEMA = json.loads(json.dumps(api.get_openapi_schema()))  # as served: string keys

PROTECTED = [  # docs/operations.md, "Access control"
    ("post", "/model/pull"),
    ("post", "/generate"),
    ("get", "/jobs"),
    ("get", "/jobs/{job_id}"),
    ("get", "/jobs/{job_id}/events"),
    ("delete", "/jobs/{job_id}"),
    ("post", "/jobs/{job_id}/cancel"),
    ("get", "/images"),
    ("get", "/metrics"),  # docs/metrics.md
    ("get", "/images/{image_id}"),
    ("get", "/images/{image_id}.png"),
    ("delete", "/images/{image_id}"),
    ("get", "/images/inputs/{digest}"),
    ("post", "/todo"),
    ("put", "/todo/{todo_id}"),
    ("delete", "/todo/{todo_id}"),
    ("patch", "/todos"),
    ("delete", "/todos"),
    # docs/protocols.md, "OpenAI-compatible images API" and "AUTOMATIC1111 API": each route
    ("post", "/v1/images/generations"),
    ("post", "/v1/images/edits"),
    ("get", "/v1/models"),
    ("post", "/sdapi/v1/txt2img"),
    ("post", "/sdapi/v1/img2img"),
    ("post", "/sdapi/v1/png-info"),
    ("get", "/sdapi/v1/progress"),
    ("post", "/sdapi/v1/interrupt"),
    ("post", "/sdapi/v1/skip"),
    ("get", "/sdapi/v1/options"),
    ("post", "/sdapi/v1/options"),
    ("get", "/sdapi/v1/sd-models"),
    ("get", "/sdapi/v1/samplers"),
    ("get", "/sdapi/v1/schedulers"),
    ("get", "/sdapi/v1/upscalers"),
    ("get", "/sdapi/v1/sd-vae"),
    ("get", "/sdapi/v1/latent-upscale-modes"),
    ("get", "/sdapi/v1/loras"),
    ("get", "/sdapi/v1/scripts"),
]


@pytest.mark.parametrize(
    ("method", "path"),
    [("post", "/generate"), ("post", "/v1/images/edits"), ("post", "/todo"),
     ("put", "/todo/{todo_id}"), ("patch", "/todos"), ("post", "/sdapi/v1/img2img"),
     ("post", "/sdapi/v1/png-info")],
)  # fmt: skip
def test_every_route_with_a_body_declares_413(method, path):
    assert "413" in SCHEMA["paths"][path][method]["responses"]


def test_the_not_blank_rules_are_stated():
    todo = SCHEMA["components"]["schemas"]["TodoIn"]["properties"]["title"]
    assert "visible character" in todo["description"]


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_every_token_protected_route_declares_401(method, path):
    assert "401" in SCHEMA["paths"][path][method]["responses"]


def test_generate_declares_every_answer_readme_lists():
    responses = SCHEMA["paths"]["/generate"]["post"]["responses"]
    assert {"200", "202", "400", "401", "409", "413", "503", "504"} <= set(responses)


def test_the_generate_form_is_documented_as_sent():
    body = SCHEMA["paths"]["/generate"]["post"]["requestBody"]["content"]
    for media_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = body[media_type]["schema"]
        assert form["additionalProperties"] is False
        assert form["properties"]["async"]["type"] == "boolean"
        assert form["properties"]["steps"] == {
            "maximum": 100, "minimum": 1, "title": "Steps", "type": "integer"
        }  # fmt: skip
        assert "anyOf" not in str(form)  # a form has no null
        scheduler = form["properties"]["scheduler"]
        # The table's ids, then A1111's name for each (what records answer, taken back).
        assert (scheduler["type"], scheduler["enum"]) == ("string", [*NAMES, *A1111_NAMES])
        assert "Euler a" in scheduler["enum"] and "DPM++ 2M Karras" in scheduler["enum"]
        size = form["properties"]["size"]["pattern"]
        assert size.startswith("^(?:2048|2040|") and size.endswith("|72|64)$")
        strength = form["properties"]["strength"]
        assert (strength["exclusiveMinimum"], strength["maximum"]) == (0, 1)
        assert {"resize_mode", "only_masked", "only_masked_padding"} <= set(form["properties"])
    multipart = body["multipart/form-data"]["schema"]["properties"]
    for part in ("image", "mask"):  # file parts: multipart only
        assert (multipart[part]["type"], multipart[part]["format"]) == ("string", "binary")
        assert part not in body["application/x-www-form-urlencoded"]["schema"]["properties"]


def test_the_event_stream_is_documented_as_one():
    route = SCHEMA["paths"]["/jobs/{job_id}/events"]["get"]
    assert list(route["responses"]["200"]["content"]) == ["text/event-stream"]
    assert {"400", "404", "503"} <= set(route["responses"])
    header = next(p for p in route["parameters"] if p["in"] == "header")
    assert header["name"] == "Last-Event-ID"


OPERATIONS = [
    (method, path, operation)
    for path, operations in SCHEMA["paths"].items()
    for method, operation in operations.items()
]


@pytest.mark.parametrize(("method", "path", "operation"), OPERATIONS)
def test_every_success_answer_has_a_schema(method, path, operation):
    """A client generated from the document knows what each route answers: JSON with its
    schema, or the media type of a file or a stream."""
    for code, response in operation["responses"].items():
        if code.startswith("2"):
            content = response.get("content")
            assert content, f"{method} {path}: {code} has no content"
            assert all("schema" in media for media in content.values())


@pytest.mark.parametrize(("method", "path", "operation"), OPERATIONS)
def test_every_route_declares_the_405_its_path_answers(method, path, operation):
    assert "405" in operation["responses"]
    assert operation["responses"]["405"]["content"]["application/json"]["schema"]


def test_a_todo_path_declares_its_405_in_the_todo_envelope():
    schema = SCHEMA["paths"]["/todos"]["get"]["responses"]["405"]["content"]
    assert schema == SCHEMA["paths"]["/todos"]["get"]["responses"]["404"]["content"]


def test_model_pull_declares_its_503():
    assert "503" in SCHEMA["paths"]["/model/pull"]["post"]["responses"]


def test_the_index_lists_every_route_of_the_image_service(client):
    """GET /api is built from the router, so a route added there is listed without anyone
    remembering to (the list was once kept by hand)."""
    listed = {(r["method"], r["path"]) for r in client.get("/api").json()["routes"]}
    declared = {
        (method.upper(), path)
        for method, path, operation in OPERATIONS
        if "imagegen" in operation.get("tags", [])
    }
    assert declared <= listed
    assert listed - declared == {("GET", "/api/docs"), ("GET", "/api/openapi.json")}


def test_the_todo_version_route_declares_its_405_in_the_todo_envelope():
    schema = SCHEMA["paths"]["/"]["get"]["responses"]["405"]["content"]["application/json"]
    assert schema["schema"]["required"] == ["data", "error"]


@pytest.mark.parametrize(
    ("path", "name", "fields"),
    [
        ("/sdapi/v1/sd-models", "SdModel", {"sha256", "config"}),
        ("/sdapi/v1/samplers", "Sampler", {"aliases", "options"}),
        ("/sdapi/v1/schedulers", "ScheduleType", {"aliases", "default_rho", "need_inner_model"}),
    ],
)
def test_a1111_lists_declare_every_key_they_always_send_as_required(path, name, fields):
    assert fields <= set(SCHEMA["components"]["schemas"][name]["required"])


def test_the_openai_edit_is_documented_as_multipart_with_its_parts_and_fields():
    """docs/protocols.md, "Editing an image": multipart only (an image cannot travel
    urlencoded), `image` and `prompt` required, the mask a file part, the extensions and the
    output formats listed; other fields are ignored, so none is refused by the document."""
    operation = SCHEMA["paths"]["/v1/images/edits"]["post"]
    body = operation["requestBody"]
    assert body["required"] is True and list(body["content"]) == ["multipart/form-data"]
    form = body["content"]["multipart/form-data"]["schema"]
    assert sorted(form["required"]) == ["image", "prompt"]
    assert form["additionalProperties"] is True
    for part in ("image", "mask"):
        assert (form["properties"][part]["type"], form["properties"][part]["format"]) == (
            "string", "binary"
        )  # fmt: skip
    fields = {"prompt", "model", "n", "size", "response_format", "output_format",
              "output_compression", "negative_prompt", "steps", "guidance_scale", "seed",
              "strength", "mask_blur"}  # fmt: skip
    assert fields <= set(form["properties"])
    assert form["properties"]["output_format"]["enum"] == ["png", "jpeg", "webp"]
    compression = form["properties"]["output_compression"]
    assert (compression["minimum"], compression["maximum"]) == (0, 100)
    assert "anyOf" not in str(form)  # a form has no null
    assert {"200", "400", "401", "409", "413", "503", "504"} <= set(operation["responses"])


def test_generations_document_the_output_formats():
    schema = SCHEMA["components"]["schemas"]["ImageGenerationIn"]["properties"]
    assert schema["output_format"]["anyOf"][0]["enum"] == ["png", "jpeg", "webp"]
    assert (schema["output_compression"]["anyOf"][0]["maximum"]) == 100


def test_a1111_img2img_declares_its_image_fields_and_their_bounds():
    """docs/protocols.md, "img2img": each field it lists, with the bounds it states."""
    body = SCHEMA["paths"]["/sdapi/v1/img2img"]["post"]["requestBody"]["content"]
    ref = body["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    fields = SCHEMA["components"]["schemas"][ref]["properties"]
    for name in (
        "init_images",
        "mask",
        "denoising_strength",
        "resize_mode",
        "mask_blur",
        "inpainting_fill",
        "inpaint_full_res",
        "inpaint_full_res_padding",
        "inpainting_mask_invert",
        "include_init_images",
        "prompt",
        "seed",
        "sampler_name",
        "batch_size",
        "n_iter",
        "cfg_scale",
        "width",
        "height",
    ):
        assert name in fields, name  # fmt: skip
    assert (fields["init_images"]["minItems"], fields["init_images"]["maxItems"]) == (1, 1)
    strength = fields["denoising_strength"]["anyOf"][0]
    assert (strength["exclusiveMinimum"], strength["maximum"]) == (0, 1)
    assert "400" in SCHEMA["paths"]["/sdapi/v1/img2img"]["post"]["responses"]


GENERATING_ROUTES = [
    ("post", "/generate"),
    ("post", "/v1/images/generations"),
    ("post", "/v1/images/edits"),
    ("post", "/sdapi/v1/txt2img"),
    ("post", "/sdapi/v1/img2img"),
]


@pytest.mark.parametrize(("method", "path"), GENERATING_ROUTES)
def test_every_generating_route_declares_the_429_of_a_key_past_its_limits(method, path):
    """An API key past --max-queued or --per-minute (docs/keys.md)."""
    assert "429" in SCHEMA["paths"][path][method]["responses"]


def _answered(schema: dict) -> dict:
    """The object a 200 answer is (a list's item, a page's item), its refs followed."""
    while True:
        if "$ref" in schema:
            schema = SCHEMA["components"]["schemas"][schema["$ref"].rpartition("/")[2]]
        elif schema.get("type") == "array":
            schema = schema["items"]
        elif "items" in schema.get("properties", {}) and "next" in schema["properties"]:
            schema = schema["properties"]["items"]
        elif "anyOf" in schema:  # GET /jobs: its bare list or its page, of the same items
            shapes = [_answered(option) for option in schema["anyOf"]]
            assert all(shape == shapes[0] for shape in shapes), shapes
            return shapes[0]
        else:
            return schema


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "/jobs"), ("get", "/jobs/{job_id}"), ("delete", "/jobs/{job_id}"),
     ("get", "/images"), ("get", "/images/{image_id}"), ("delete", "/images/{image_id}")],
)  # fmt: skip
def test_jobs_and_images_document_the_owner_told_to_admins(method, path):
    """docs/keys.md: an admin key is told whose each job and image is, by the key's name."""
    answer = SCHEMA["paths"][path][method]["responses"]["200"]["content"]["application/json"]
    shape = _answered(answer["schema"])
    assert "owner" in shape["properties"] and "owner" not in shape.get("required", [])
    assert "only to an admin key" in shape["properties"]["owner"]["description"]
