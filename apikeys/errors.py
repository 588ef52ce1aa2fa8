"""What the key services refuse, each naming the field and the rule."""

from core.errors import ServiceError


class KeyRefused(Exception):
    """The command prints the message."""


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
    """503, never 401, when MongoDB does not answer: the key may well be good."""

    status = 503
    message = (
        "The key store (MongoDB) is unreachable, so this API key cannot be checked; "
        "try again shortly"
    )
    retry_after = 5


class KeyLacksPower(ServiceError):
    """403 (the key is known) saying what the route needs."""

    status = 403

    def __init__(self, needs: str) -> None:
        super().__init__(f"This API key may not call this route: it needs {needs}")
