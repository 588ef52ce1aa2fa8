"""What the key services refuse, each naming the field and the rule."""

from core.errors import ServiceError


class KeyRefused(Exception):
    """Base of the key services' refusals (the command prints the message)."""


class KeyNameTaken(KeyRefused):
    def __init__(self, name: str) -> None:
        super().__init__(f"name: a key named {name!r} exists (names of revoked keys stay taken)")


class KeyNotFound(KeyRefused):
    def __init__(self, name: str) -> None:
        super().__init__(f"name: no live key named {name!r}")


class BadKeyField(KeyRefused):
    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")


class KeyStoreUnreachable(ServiceError):
    """A key that must be looked up while MongoDB does not answer: 503, never 401, since the
    key may well be good (API_TOKEN is compared without the database and still works)."""

    status = 503
    message = (
        "The key store (MongoDB) is unreachable, so this API key cannot be checked; "
        "try again shortly"
    )
    retry_after = 5


class KeyLacksPower(ServiceError):
    """A live key presented to a route its kind may not call: 403 (it is known, so not 401),
    saying what the route needs."""

    status = 403

    def __init__(self, needs: str) -> None:
        super().__init__(f"This API key may not call this route: it needs {needs}")
