"""What the todo services can refuse; config/api.py turns each into its HTTP answer."""

from config.errors import ServiceError


class IdRequired(ServiceError):
    status = 400
    message = "id is required"


class TodoNotFound(ServiceError):
    status = 404
    message = "Todo not found"


class TitleTaken(ServiceError):
    status = 409

    def __init__(self, title: str | None = None) -> None:
        if title is None:
            super().__init__("title must be unique: one of the titles is already taken")
        else:
            super().__init__(f"title must be unique: {title!r} is already taken")


class TitleDuplicated(TitleTaken):
    """One title twice in one batch: no todo has it yet, so "already taken" would mislead;
    the message names both places."""

    def __init__(self, title: str, first: int, second: int) -> None:
        ServiceError.__init__(
            self,
            f"title must be unique: {title!r} is duplicated within the batch: "
            f"todos.{first}.title and todos.{second}.title",
        )


class IdempotencyKeyReused(ServiceError):
    status = 409
    message = (
        "This Idempotency-Key was already used for a different request; use a new key for new todos"
    )
