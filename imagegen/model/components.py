"""The components a pipeline's model_index.json names, read by one rule everywhere.

A `[null, null]` pair is an optional component the repo does not ship."""

from typing import Any


def pipeline_components(model_index: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """{name: (library, class)} in name order."""
    return {
        name: (value[0], value[1])
        for name, value in sorted(model_index.items())
        if not name.startswith("_")
        and isinstance(value, list)
        and len(value) == 2
        and None not in value
    }
