"""WORKER_MODELS: the offered models a worker may run, so a pool of workers serves one model."""

from imagegen.generation.catalog import Catalog, UnknownModel


def worker_models(catalog: Catalog, setting: str) -> tuple[str, ...]:
    """The repo ids `setting` names (repo ids or unique name parts, comma-separated), in the
    catalog's order; every offered model when it names none. ValueError names a bad entry."""
    names = [name.strip() for name in setting.split(",") if name.strip()]
    if not names:
        return tuple(catalog.ids)
    chosen = set()
    for name in names:
        try:
            chosen.add(catalog.find(name).id)
        except UnknownModel as exc:
            raise ValueError(f"WORKER_MODELS: {exc.rule}") from None
    return tuple(model for model in catalog.ids if model in chosen)
