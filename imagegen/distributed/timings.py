"""The measurements behind the estimates (imagegen.generation.estimates) in distributed mode:
every worker records what its jobs measured, every web replica reads them, so a synchronous
request is estimated from the workers' real pace whichever replica it reaches.

One hash per model (`imagegen:timings:<MODEL_ID>|<VAE_DECODER>`: another model, or the tiny
decoder, costs something else): a field per size measured (`WIDTHxHEIGHT`: the last KEPT
images' timings as a JSON list, newest first), `native`, the size of a request that names
none, and `counted`: the model's work counted over the pace a worker measured, at its load
(imagegen.generation.work), the estimate before any image. It has no expiry: a figure stays
true until newer images at its size replace it, and with GEN_MIN_SIDE to GEN_MAX_SIDE in steps
of 8 it holds a bounded number of fields. Two
workers finishing at one size at the same moment may keep one image of the two: a lost
measurement, never a wrong one.
"""

import json
from dataclasses import asdict

import redis

from imagegen.distributed.store import PREFIX, decoded
from imagegen.generation.estimates import KEPT, Measurements, Size, Timing, fastest
from imagegen.model.hub import ModelSource

NATIVE = "native"
COUNTED = "counted"  # the model's counted work, as a worker published it (imagegen.generation.work)


def measured_model(source: ModelSource) -> str:
    """What a measurement is of: the model and its decoder (adapters are fused: a step costs
    what it cost without them)."""
    return f"{source.model_id}|{source.decoder.kind}"


def _size(text: str) -> Size:
    width, height = text.split("x")
    return int(width), int(height)


class RedisTimings:
    def __init__(self, client: redis.Redis, model: str) -> None:
        self.redis = client
        self.key = f"{PREFIX}timings:{model}"  # model: measured_model(the configured source)

    def record(self, timing: Timing, *, native: bool) -> None:
        size = f"{timing.width}x{timing.height}"
        stored = self.redis.hget(self.key, size)
        kept = [asdict(timing), *json.loads(stored or "[]")][:KEPT]
        fields = [size, json.dumps(kept), *((NATIVE, size) if native else ())]
        self.redis.hset(self.key, items=fields)

    def count(self, timing: Timing) -> None:
        self.redis.hset(self.key, COUNTED, json.dumps(asdict(timing)))

    def measurements(self) -> Measurements:
        stored = self.redis.hgetall(self.key)
        fields = {decoded(name): decoded(value) for name, value in stored.items()}
        native = fields.pop(NATIVE, None)
        counted = fields.pop(COUNTED, None)
        timings = tuple(
            fastest(Timing(**kept) for kept in json.loads(value)) for value in fields.values()
        )
        return Measurements(
            timings,
            _size(native) if native else None,
            Timing(**json.loads(counted)) if counted else None,
        )
