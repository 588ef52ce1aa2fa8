"""The todo routes: parse the request, call one service or selector, wrap the answer.

Routes return raw stored documents; TodoOut shapes each into a todo's five keys."""

from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Status
from ninja.errors import ValidationError

from apikeys.auth import ADMIN, token_required
from core.version import app_version
from todos import selectors, services
from todos.errors import IdRequired
from todos.idempotency import idempotency_key
from todos.middleware import database_budget
from todos.schemas import (
    DeletedCountEnvelope,
    ErrorEnvelope,
    TodoBatchBody,
    TodoBody,
    TodoEnvelope,
    TodoListEnvelope,
    TodoListQuery,
    VersionEnvelope,
)

# The version at / touches no database; every other todo route runs within its budget.
version_router = Router(tags=["todos"])
router = Router(tags=["todos"])
router.add_decorator(database_budget, mode="view")

ERRORS = {400: ErrorEnvelope, 404: ErrorEnvelope, 409: ErrorEnvelope, 503: ErrorEnvelope}
# Writes answer 401 when API_TOKEN is set, and 413 for a body over MAX_BODY_BYTES.
WRITE_ERRORS = {**ERRORS, 401: ErrorEnvelope, 413: ErrorEnvelope}


def ok(data: object) -> dict:
    return {"data": data, "error": None}


def mark_replay(response: HttpResponse, replayed: bool) -> None:
    """This answer is an earlier request's outcome, sent again for its key."""
    if replayed:
        response["Idempotent-Replayed"] = "true"


@version_router.get("/", response={200: VersionEnvelope}, summary="Application version")
def version(request: HttpRequest):
    return ok({"version": app_version()})


@router.post(
    "/todo",
    auth=token_required(),
    response={201: TodoEnvelope, **WRITE_ERRORS},
    summary="Create a todo",
)
def todo_create(request: HttpRequest, response: HttpResponse, payload: TodoBody):
    todo, replayed = services.todo_create(
        title=payload.todo.title,
        description=payload.todo.description,
        idempotency_key=idempotency_key(request),
    )
    mark_replay(response, replayed)
    return Status(201, ok(todo))


@router.api_operation(
    ["GET", "PUT", "DELETE"], "/todo/", response={400: ErrorEnvelope}, include_in_schema=False
)
@router.api_operation(
    ["GET", "PUT", "DELETE"], "/todo", response={400: ErrorEnvelope}, include_in_schema=False
)
def todo_without_id(request: HttpRequest):
    raise IdRequired()


@router.get("/todo/{todo_id}", response={200: TodoEnvelope, **ERRORS}, summary="Get a todo")
def todo_get(request: HttpRequest, todo_id: str):
    return ok(selectors.todo_get(todo_id=todo_id))


@router.put(
    "/todo/{todo_id}",
    auth=token_required(),
    response={202: TodoEnvelope, **WRITE_ERRORS},
    summary="Update a todo",
)
def todo_update(request: HttpRequest, todo_id: str, payload: TodoBody):
    todo = services.todo_update(
        todo_id=todo_id, title=payload.todo.title, description=payload.todo.description
    )
    return Status(202, ok(todo))


@router.delete(
    "/todo/{todo_id}",
    auth=token_required(),
    response={202: TodoEnvelope, **WRITE_ERRORS},
    summary="Delete a todo",
)
def todo_delete(request: HttpRequest, todo_id: str):
    return Status(202, ok(services.todo_delete(todo_id=todo_id)))


# A cursor pages by a page size it does not carry: the Link header's address sends both.
LIMIT_WITH_AFTER = (
    "is required with after: send the page size beside the cursor (limit=1 to 1000), as the "
    "Link header's address does"
)


@router.get(
    "/todos",
    response={200: TodoListEnvelope, **ERRORS},
    summary="List todos",
    description="All todos up to TODO_LIST_MAX (1,000), or with `limit` one page of them; "
    'the next page\'s address in a `Link: <...>; rel="next"` header (none on the last page).',
)
def todo_list(request: HttpRequest, response: HttpResponse, query: Query[TodoListQuery]):
    if query.limit is None:
        if query.after is not None:
            raise ValidationError([{"loc": ("query", "limit"), "msg": LIMIT_WITH_AFTER}])
        limit = settings.TODO_LIST_MAX
        todos, following = selectors.todo_first_page(limit=limit)
    else:
        limit = query.limit
        todos, following = selectors.todo_page(limit=limit, after=query.after)
    if following is not None:
        next_page = urlencode({"limit": limit, "after": following.encode()})
        response["Link"] = f'</todos?{next_page}>; rel="next"'
    return ok(todos)


@router.patch(
    "/todos",
    auth=token_required(),
    response={201: TodoListEnvelope, **WRITE_ERRORS},
    summary="Insert todos",
)
def todos_insert(request: HttpRequest, response: HttpResponse, payload: TodoBatchBody):
    todos, replayed = services.todos_insert_batch(
        items=[(t.title, t.description) for t in payload.todos],
        idempotency_key=idempotency_key(request),
    )
    mark_replay(response, replayed)
    return Status(201, ok(todos))


@router.delete(
    "/todos",
    auth=token_required(ADMIN),
    response={202: DeletedCountEnvelope, **WRITE_ERRORS},
    summary="Delete all",
)
def todos_delete_all(request: HttpRequest):
    return Status(202, ok({"deletedCount": services.todos_delete_all()}))
