"""The text encoders' output for a prompt, kept so the same prompt is encoded once.

A batch, `n` > 1, a retry, the page's "use these settings" and a pipeline driven by webhooks send
one prompt again and again. On a one-step recipe the encoding is a visible share of the image.
The cache lives on the loaded pipeline: a model freed or swapped out takes its entries with it.
Its key is every argument the pipeline passes to `encode_prompt`, so the output is the one the
pipeline would compute (the same bytes). LoRAs (MODEL_ADAPTERS) are fused at the load, so they
are the pipeline's own: a cache per pipeline keys them."""

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

ATTRIBUTE = "_imagegen_prompt_cache"
# The LoRAs applied to the pipeline for this run (imagegen.model.loras_applied), with their
# weights: they change what the text encoders compute, so they are part of the key.
LORAS_ATTRIBUTE = "_imagegen_prompt_loras"


class PromptCache:
    """At most `entries` encodings, the least recently used dropped first."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._kept: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def encoded(self, key: tuple, encode: Any) -> Any:
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                self.hits += 1
                return _copied(self._kept[key])
        value = encode()
        with self._lock:
            self.misses += 1
            self._kept[key] = _copied(value)
            while len(self._kept) > self.entries:
                self._kept.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._kept)


def attach(pipe: Any, entries: int) -> None:
    """Gives a loaded pipeline its cache; 0 entries gives none."""
    if entries > 0:
        setattr(pipe, ATTRIBUTE, PromptCache(entries))


def cache_of(pipe: Any) -> PromptCache | None:
    return getattr(pipe, ATTRIBUTE, None)


@contextlib.contextmanager
def used(pipe: Any, runs: Any) -> Iterator[None]:
    """`runs` (the pipeline, or an edit pipeline sharing its text encoders) reads `pipe`'s cache
    while the block runs. One generation runs on a pipeline at a time."""
    cache = cache_of(pipe)
    encode = getattr(runs, "encode_prompt", None)
    if cache is None or encode is None:
        yield
        return

    def cached(*args: Any, **kwargs: Any) -> Any:
        if any(_is_tensor(v) for v in (*args, *kwargs.values())):  # embeddings sent: no key
            return encode(*args, **kwargs)
        # The class: an edit pipeline's encode_prompt is its own copy of the code.
        key = (
            type(runs).__name__, _plain(args), _plain(sorted(kwargs.items())),
            getattr(pipe, LORAS_ATTRIBUTE, ()),
        )  # fmt: skip
        return cache.encoded(key, lambda: encode(*args, **kwargs))

    runs.encode_prompt = cached
    try:
        yield
    finally:
        del runs.encode_prompt  # the class's method again


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "dtype") and hasattr(value, "shape")


def _plain(value: Any) -> Any:
    """A hashable form: lists become tuples, a device its name."""
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _copied(value: Any) -> Any:
    """Tensors cloned: a caller that changes its encoding in place must not change the cache."""
    if isinstance(value, tuple | list):
        return type(value)(_copied(v) for v in value)
    return value.clone() if _is_tensor(value) else value
