"""Bounds of request fields that a setting sets (GEN_MAX_STEPS, GEN_MAX_N, ...), read at
each request and each schema rendering rather than once at import: a changed setting takes
effect in the running process. A value past one is refused as a fixed bound's would be (400
naming the field, "Input should be less than or equal to 100"), among the other fields'
refusals, and the OpenAPI schema shows the bound in force."""

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema


def _shown(bound: float) -> float:
    """The bound as pydantic's own messages show it: 30.0 as 30."""
    return int(bound) if isinstance(bound, float) and bound.is_integer() else bound


@dataclass(frozen=True)
class _SettingBound:
    setting: str  # the setting's name: read when a value is checked
    rule = ""  # pydantic's error type
    message = ""  # pydantic's message for it
    ctx = ""  # the name the message gives the bound
    keyword = ""  # the JSON schema's keyword

    def bound(self) -> float:
        value: float = getattr(settings, self.setting)
        return value

    def passes(self, value: float, bound: float) -> bool:
        raise NotImplementedError

    def check(self, value: Any) -> Any:
        bound = self.bound()
        if value is not None and not self.passes(value, bound):
            raise PydanticCustomError(self.rule, self.message, {self.ctx: _shown(bound)})
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema[self.keyword] = _shown(self.bound())
        return json_schema


class AtMost(_SettingBound):
    """At most the setting's value: `Annotated[int, AtMost("GEN_MAX_STEPS")]`."""

    rule, message = "less_than_equal", "Input should be less than or equal to {le}"
    ctx, keyword = "le", "maximum"

    def passes(self, value: float, bound: float) -> bool:
        return value <= bound


class AtLeast(_SettingBound):
    """At least the setting's value: `Annotated[int, AtLeast("GEN_MIN_SIDE")]`."""

    rule, message = "greater_than_equal", "Input should be greater than or equal to {ge}"
    ctx, keyword = "ge", "minimum"

    def passes(self, value: float, bound: float) -> bool:
        return value >= bound
