"""The todo routes: parse the request, call one service or selector, wrap the answer."""

from django.http import HttpRequest
from ninja import Router

from config.auth import token_required
from config.version import app_version
from todos import selectors, services
from todos.errors import IdRequired
from todos.schemas import (
    DeletedCountEnvelope,
    ErrorEnvelope,
    TodoBatchBody,
    TodoBody,
    TodoEnvelope,
    TodoListEnvelope,
    VersionEnvelope,
)

router = Router(tags=["todos"])

ERRORS = {400: ErrorEnvelope, 404: ErrorEnvelope, 409: ErrorEnvelope, 503: ErrorEnvelope}


def ok(data: object) -> dict:
    return {"data": data, "error": None}


@router.get("/", response={200: VersionEnvelope}, summary="Application version")
def version(request: HttpRequest):
    return ok({"version": app_version()})


@router.post(
    "/todo", auth=token_required(), response={201: TodoEnvelope, **ERRORS}, summary="Create a todo"
)
def todo_create(request: HttpRequest, payload: TodoBody):
    todo = services.todo_create(title=payload.todo.title, description=payload.todo.description)
    return 201, ok(todo.to_output())


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
    return ok(selectors.todo_get(todo_id=todo_id).to_output())


@router.put(
    "/todo/{todo_id}",
    auth=token_required(),
    response={202: TodoEnvelope, **ERRORS},
    summary="Update a todo",
)
def todo_update(request: HttpRequest, todo_id: str, payload: TodoBody):
    todo = services.todo_update(
        todo_id=todo_id, title=payload.todo.title, description=payload.todo.description
    )
    return 202, ok(todo.to_output())


@router.delete(
    "/todo/{todo_id}",
    auth=token_required(),
    response={202: TodoEnvelope, **ERRORS},
    summary="Delete a todo",
)
def todo_delete(request: HttpRequest, todo_id: str):
    return 202, ok(services.todo_delete(todo_id=todo_id).to_output())


@router.get("/todos", response={200: TodoListEnvelope, **ERRORS}, summary="List todos")
def todo_list(request: HttpRequest):
    return ok([todo.to_output() for todo in selectors.todo_list()])


@router.patch(
    "/todos",
    auth=token_required(),
    response={201: TodoListEnvelope, **ERRORS},
    summary="Insert todos",
)
def todos_insert(request: HttpRequest, payload: TodoBatchBody):
    todos = services.todos_insert_batch(items=[(t.title, t.description) for t in payload.todos])
    return 201, ok([todo.to_output() for todo in todos])


@router.delete(
    "/todos",
    auth=token_required(),
    response={202: DeletedCountEnvelope, **ERRORS},
    summary="Delete all",
)
def todos_delete_all(request: HttpRequest):
    return 202, ok({"deletedCount": services.todos_delete_all()})
