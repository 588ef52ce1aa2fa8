"""The models this service offers: MODEL_ID (the default, with its adapters, decoder,
inpainting checkpoint and GEN_* rules) and each entry of MODELS beside it.

Why: clients choose a model per request by name (OpenAI's `model`, A1111's checkpoint titles),
and on a CPU the choice is the biggest speed lever there is. A MODELS entry is a hub repo id
with an optional revision (`org/name@revision`); it gets the preset its id is recognised
for (imagegen.generation.presets) and none of MODEL_ID's extras, so what runs is what the
entry says. A request names a model by its repo id or by the name part alone where no other
offered model has that name part.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from core.errors import FieldError
from imagegen.generation.presets import GenerationRules
from imagegen.model.adapters import REPO_RULE, is_repo_id
from imagegen.model.hub import ModelSource

ENTRY_RULE = "org/name or org/name@revision (a branch, tag or commit), comma-separated"


@dataclass(frozen=True)
class ModelEntry:
    """One MODELS entry as written."""

    repo: str
    revision: str = "main"


def parse_models(raw: str) -> list[ModelEntry]:
    """MODELS' entries, in order. Raises ValueError naming the first malformed entry (not a
    repo id, an empty revision, an entry given twice)."""
    entries: list[ModelEntry] = []
    for written in raw.split(","):
        text = written.strip()
        if not text:
            continue
        repo, at, revision = text.partition("@")
        revision = revision.strip()
        if not is_repo_id(repo.strip()):
            raise ValueError(f"MODELS: {text!r} is not a hub repo id ({REPO_RULE}; {ENTRY_RULE})")
        if at and (not revision or any(c.isspace() or c == "@" for c in revision)):
            raise ValueError(f"MODELS: {text!r} has no usable revision after '@' ({ENTRY_RULE})")
        entry = ModelEntry(repo=repo.strip(), revision=revision or "main")
        if any(e.repo.lower() == entry.repo.lower() for e in entries):
            raise ValueError(f"MODELS: {entry.repo!r} is listed twice")
        entries.append(entry)
    return entries


def name_part(model_id: str) -> str:
    return model_id.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class OfferedModel:
    """A model requests may name: where it comes from and the rules its requests meet."""

    source: ModelSource
    rules: GenerationRules  # its defaults and caps; `rules.preset` names its preset
    default: bool = False  # MODEL_ID

    @property
    def id(self) -> str:
        return self.source.model_id

    @property
    def name(self) -> str:
        return name_part(self.id)


class UnknownModel(FieldError):
    """A request naming a model this service does not offer: 400 naming `model`."""

    def __init__(self, asked: str, offered: Iterable[str], rule: str = "is not offered") -> None:
        super().__init__("model", f"{asked!r} {rule}; offered: {', '.join(offered)}")


@dataclass(frozen=True)
class Catalog:
    """The offered models, MODEL_ID's first."""

    models: tuple[OfferedModel, ...]

    def __post_init__(self) -> None:
        assert self.models and self.models[0].default, "the default model comes first"

    @property
    def default(self) -> OfferedModel:
        return self.models[0]

    @property
    def ids(self) -> list[str]:
        return [m.id for m in self.models]

    @property
    def several(self) -> bool:
        """Whether MODELS offers any model beside MODEL_ID."""
        return len(self.models) > 1

    def find(self, name: str) -> OfferedModel:
        """The model `name` names: its repo id (any case, as the hub's), else its name part
        when that is unique among the offered. Raises UnknownModel."""
        wanted = name.strip().lower()
        for model in self.models:
            if model.id.lower() == wanted:
                return model
        named = [m for m in self.models if m.name.lower() == wanted]
        if len(named) == 1:
            return named[0]
        if named:
            raise UnknownModel(name, self.ids, "names more than one offered model: send a repo id")
        raise UnknownModel(name, self.ids)
