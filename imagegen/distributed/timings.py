"""The estimates' measurements in Redis: workers record, every replica reads.

One hash per model and decoder, with a field per size, `native` and `counted`. No expiry: a
figure holds until newer images replace it. Two workers writing one size at once may lose a
measurement. They never write a wrong one."""

import json
from dataclasses import asdict

import redis

from imagegen.distributed.store import PREFIX, decoded
from imagegen.generation.estimates import KEPT, Measurements, Size, Timing, fastest
from imagegen.model.hub import ModelSource

NATIVE = "native"
COUNTED = "counted"  # the model's counted work, as a worker published it (imagegen.generation.work)


def measured_model(source: ModelSource) -> str:
    """The model and its decoder; adapters are fused, so they cost nothing per step."""
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
