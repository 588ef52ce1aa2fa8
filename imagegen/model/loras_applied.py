"""The LoRAs a request's prompt names, applied to the loaded pipeline for one run and taken off
after it, as unfused peft adapter layers.

Unfused, the model's own weights are never written: taking the layers off (diffusers'
unload_lora_weights) puts back the very modules that were there, so the next image, with no
LoRA, is the one made before any LoRA ran, bit for bit. A weight of 0 applies nothing. The
LoRA's tensors are read as fp32, the model's dtype."""

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from imagegen.model import prompt_cache


@contextlib.contextmanager
def applied(pipe: Any, loras: Sequence[tuple[Path, float]]) -> Iterator[None]:
    """The pipeline runs with these (file, weight) LoRAs for the block; weight 0 is skipped."""
    loras = [(file, weight) for file, weight in loras if weight != 0]
    if not loras:
        yield
        return
    import torch
    from safetensors.torch import load_file

    names = []
    try:
        for index, (file, _) in enumerate(loras):
            state = {k: v.to(torch.float32) for k, v in load_file(file).items()}
            name = f"request_{index}"
            pipe.load_lora_weights(state, adapter_name=name)
            names.append(name)
        pipe.set_adapters(names, adapter_weights=[weight for _, weight in loras])
        setattr(pipe, prompt_cache.LORAS_ATTRIBUTE, tuple((str(f), w) for f, w in loras))
        yield
    finally:
        if hasattr(pipe, prompt_cache.LORAS_ATTRIBUTE):
            delattr(pipe, prompt_cache.LORAS_ATTRIBUTE)
        if names:
            pipe.unload_lora_weights()
