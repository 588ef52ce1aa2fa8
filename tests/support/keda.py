"""KEDA's Redis list scaler (a `type: redis` rule) as its documentation describes it, so a test
can ask of a rendered rule what the scaler would connect to and how many replicas it would ask
for, rather than only whether the YAML has the keys.

From KEDA's "Redis Lists" scaler page: `address` is `host:port` (or `host` and `port` apart);
`listName` and `listLength` are required, `listLength` being the average target value per
replica; `activationListLength` (default 0) is the length above which the scaler is active;
`enableTLS` (default false) and `databaseIndex` (default 0) are optional; the password comes
from the trigger's `auth` (`triggerParameter: password`). The count of replicas is the HPA's
for an average-value target: ceil(length / listLength), within the app's minimum and maximum
(below the activation length, the minimum).
"""

import math
from dataclasses import dataclass

# Go's strconv.ParseBool, which KEDA parses its boolean metadata with; anything else is an
# error in KEDA (the scaler is not built at all).
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def _go_bool(value: str, name: str) -> bool:
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"KEDA refuses {name}={value!r}: not a Go boolean")


def _integer(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"KEDA refuses {name}={value!r}: not an integer") from None


@dataclass(frozen=True)
class RedisListScaler:
    host: str
    port: int
    tls: bool
    database: int
    list_name: str
    list_length: int
    activation_length: int
    password_secret: str | None  # the secret the password is read from

    @classmethod
    def from_rule(cls, rule: dict) -> "RedisListScaler":
        """A Container Apps scale rule (`custom: {type: redis, metadata, auth}`)."""
        custom = rule["custom"]
        if custom["type"] != "redis":
            raise ValueError(f"not KEDA's Redis list scaler: type {custom['type']!r}")
        meta = custom["metadata"]
        if "address" in meta:
            host, _, port = meta["address"].rpartition(":")
        else:
            host, port = meta["host"], meta["port"]
        for required in ("listName", "listLength"):
            if required not in meta:
                raise ValueError(f"KEDA's Redis list scaler needs {required}")
        auth = {a["triggerParameter"]: a["secretRef"] for a in custom.get("auth", [])}
        return cls(
            host=host,
            port=_integer(port, "port"),
            tls=_go_bool(meta.get("enableTLS", "false"), "enableTLS"),
            database=_integer(meta.get("databaseIndex", "0"), "databaseIndex"),
            list_name=meta["listName"],
            list_length=_integer(meta["listLength"], "listLength"),
            activation_length=_integer(
                meta.get("activationListLength", "0"), "activationListLength"
            ),
            password_secret=auth.get("password"),
        )

    def replicas(self, length: int, *, minimum: int, maximum: int) -> int:
        """The replicas asked for with `length` entries on the list."""
        if length <= self.activation_length:
            return minimum
        return max(minimum, min(maximum, math.ceil(length / self.list_length)))
