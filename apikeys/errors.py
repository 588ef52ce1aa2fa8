"""What the key services refuse, each naming the field and the rule."""


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
