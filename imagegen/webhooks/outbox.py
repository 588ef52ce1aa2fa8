"""Where deliveries wait, kept where the jobs are, so a sender's restart loses none.

A *watch* is a job that named a webhook and has not ended. A *delivery* is its event, its body
made once. A *record* is what the job's answer shows of it. Each due delivery goes to one
sender only. A claim is a lease: one claimed by a process that stopped is due again after
CLAIM_LEASE. So it is sent at least once, never lost."""

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from imagegen.atomic_files import is_partial, write_atomically

# Longer than a try may take (10 s and the name's resolution).
CLAIM_LEASE = 30.0


@dataclass(frozen=True)
class Watch:
    """A job to tell about when it ends."""

    job_id: str
    url: str
    origin: str  # scheme://host of the image link the event carries
    signer: str  # "service" (WEBHOOK_SECRET) or "key:<name>" (that key's signing secret)


@dataclass
class Delivery:
    """`id` is every try's `webhook-id`, so a receiver can drop a repeat. Times are Unix seconds."""

    id: str
    job_id: str
    url: str
    signer: str
    event: str
    body: str
    created: float
    due: float
    tries: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> "Delivery":
        return cls(**json.loads(text))


def delivery_id(job_id: str) -> str:
    """A job ends once, so its event's id is the job's."""
    return f"msg_{job_id}"


def record_of(delivery: Delivery, state: str) -> dict[str, Any]:
    """The job's `webhook` field: receiver, event, state and each try."""
    return {"url": delivery.url, "event": delivery.event, "state": state, "tries": delivery.tries}


def waiting_record(watch: Watch) -> dict[str, Any]:
    return {"url": watch.url, "event": None, "state": "waiting", "tries": []}


class Outbox(Protocol):
    def watch(self, watch: Watch) -> None: ...

    def watches(self) -> list[Watch]: ...

    def unwatch(self, job_id: str) -> None:
        """For a job forgotten before it was seen ending."""

    def enqueue(self, delivery: Delivery) -> bool:
        """Turns the job's watch into this delivery, due now; False when another process did it
        first."""

    def claim(self, now: float, limit: int) -> list[Delivery]:
        """Up to `limit` due deliveries, each handed to this caller alone."""

    def retry(self, delivery: Delivery) -> None:
        """Puts a claimed delivery back, due at its `due`."""

    def settle(self, delivery: Delivery, state: str) -> None:
        """Ends a claimed delivery: `delivered` or `given up`."""

    def record(self, job_id: str) -> dict[str, Any] | None: ...

    def pending(self) -> tuple[int, float | None]:
        """The count waiting, and the oldest's creation time."""


class DiskOutbox:
    """The in-process outbox: files beside the image records.

    The due time is in a pending file's name, so a scan reads names only. A rename claims a
    file once; the share has no file locks. Every file is written whole."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for name in ("watching", "pending", "claimed", "records"):
            (root / name).mkdir(parents=True, exist_ok=True)

    def _files(self, folder: str) -> list[Path]:
        return [p for p in (self.root / folder).iterdir() if not p.name.startswith(".")]

    def watch(self, watch: Watch) -> None:
        write_atomically(self.root / "records" / f"{watch.job_id}.json",
                         json.dumps(waiting_record(watch)).encode())  # fmt: skip
        write_atomically(
            self.root / "watching" / f"{watch.job_id}.json", json.dumps(asdict(watch)).encode()
        )

    def watches(self) -> list[Watch]:
        found = []
        for path in self._files("watching"):
            try:
                found.append(Watch(**json.loads(path.read_bytes())))
            except FileNotFoundError:
                continue
        return found

    def unwatch(self, job_id: str) -> None:
        (self.root / "watching" / f"{job_id}.json").unlink(missing_ok=True)

    def enqueue(self, delivery: Delivery) -> bool:
        watching = self.root / "watching" / f"{delivery.job_id}.json"
        if not watching.exists():
            return False
        self._put(delivery)
        self._record(delivery, "pending")
        watching.unlink(missing_ok=True)
        return True

    def _put(self, delivery: Delivery) -> None:
        name = f"{int(delivery.due * 1000):015d}-{delivery.id}.json"
        write_atomically(self.root / "pending" / name, delivery.to_json().encode())

    def _record(self, delivery: Delivery, state: str) -> None:
        text = json.dumps(record_of(delivery, state))
        write_atomically(self.root / "records" / f"{delivery.job_id}.json", text.encode())

    def claim(self, now: float, limit: int) -> list[Delivery]:
        self._release_stale(now)
        claimed: list[Delivery] = []
        for path in sorted(self._files("pending")):
            due_ms, _, rest = path.name.partition("-")
            if is_partial(path) or len(claimed) >= limit or int(due_ms) > now * 1000:
                continue
            target = self.root / "claimed" / rest
            try:
                os.rename(path, target)  # the claim: of two renames of one file, one succeeds
            except FileNotFoundError:
                continue
            os.utime(target, (now, now))
            try:
                claimed.append(Delivery.from_json(target.read_bytes()))
            except ValueError:  # not a delivery: set aside, never retried
                os.rename(target, target.with_suffix(".broken"))
        return claimed

    def _release_stale(self, now: float) -> None:
        """Claims older than the lease go back to pending, due now: their process stopped."""
        for path in self._files("claimed"):
            try:
                if path.suffix == ".json" and path.stat().st_mtime < now - CLAIM_LEASE:
                    os.rename(path, self.root / "pending" / f"{0:015d}-{path.name}")
            except FileNotFoundError:
                continue

    def retry(self, delivery: Delivery) -> None:
        claimed = self.root / "claimed" / f"{delivery.id}.json"
        write_atomically(claimed, delivery.to_json().encode())
        self._record(delivery, "pending")
        name = f"{int(delivery.due * 1000):015d}-{delivery.id}.json"
        os.rename(claimed, self.root / "pending" / name)

    def settle(self, delivery: Delivery, state: str) -> None:
        self._record(delivery, state)
        (self.root / "claimed" / f"{delivery.id}.json").unlink(missing_ok=True)

    def record(self, job_id: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.root / "records" / f"{job_id}.json").read_bytes())
        except (FileNotFoundError, ValueError):
            return None

    def pending(self) -> tuple[int, float | None]:
        oldest = None
        paths = [p for p in self._files("pending") + self._files("claimed") if p.suffix == ".json"]
        for path in paths:
            try:
                created = Delivery.from_json(path.read_bytes()).created
            except (FileNotFoundError, ValueError):
                continue
            oldest = created if oldest is None else min(oldest, created)
        return len(paths), oldest

    def forget_records(self, older_than: float) -> None:
        """Records of jobs long gone: the process keeps jobs only while it lives."""
        cutoff = time.time() - older_than
        for path in self._files("records"):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except FileNotFoundError:
                continue
