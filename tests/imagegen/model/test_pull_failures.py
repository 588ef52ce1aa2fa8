"""A failed pull says what happened and what to do, in the model's status `error` (what
/model/status, the page, the gate and a refused /generate show), with the raw cause kept at
its end: the hub unreachable (its name, a closed port, no answer in time), a gated, missing
or refused repo, the hub's own fault, a full disk. In process: real pulls against the local
hub or a closed port on 127.0.0.1, through the loader and the distributed mode's shared
model; the failures no test can cause for real (a name that does not resolve, a full share)
are the errors the libraries raise for them."""

import errno
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx2
import huggingface_hub
import pytest

from imagegen.distributed.shared_model import SharedModel
from imagegen.model.hub import DownloadProgress, ModelSource, download_to_share
from imagegen.model.pull_failures import explain_pull_failure, hub_address
from tests.support.distributed import RedisServer
from tests.support.loaders import new_loader, wait_for
from tests.support.model_service import SD_REPO
from tests.support.processes import free_port

ADVICE = (
    "check this machine's network, set HF_ENDPOINT to a mirror of the hub that it can reach, "
    "or try the offline demo (./scripts/serve --demo)."
)


@pytest.fixture(autouse=True)
def no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub would otherwise ask its default endpoint for an agent registry before
    its first request; these tests talk to 127.0.0.1 only."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_TELEMETRY", True)


def closed_hub() -> SimpleNamespace:
    """An HF_ENDPOINT where nothing listens: a free port on 127.0.0.1."""
    return SimpleNamespace(url=f"http://127.0.0.1:{free_port()}")


def source_at(endpoint: str | None, tmp_path: Path, **fields) -> ModelSource:
    """The tiny model's source (MODEL_ID, MODEL_REVISION, ...), with `fields` changed."""
    defaults = {"model_id": SD_REPO, "revision": "main", "variant": "fp16"}
    return ModelSource(
        **{**defaults, **fields}, model_dir=tmp_path / "share", cache_dir=tmp_path / "cache",
        endpoint=endpoint,
    )  # fmt: skip


def pull_failure(source: ModelSource) -> str:
    """The status `error` of a pull of `source` (the download raises; the loader and the
    shared model report it through explain_pull_failure)."""
    with pytest.raises(Exception) as raised:
        download_to_share(source, DownloadProgress())
    return explain_pull_failure(raised.value, source)


def test_a_pull_from_an_unreachable_hub_names_it_and_the_way_out(share, tmp_path):
    hub = closed_hub()
    loader = new_loader(hub, share, tmp_path / "cache")
    assert loader.pull()
    assert wait_for(loader, {"ready", "failed"}) == "failed"
    error = loader.status().error
    assert error == (
        f"The model hub at {hub.url} (HF_ENDPOINT) is unreachable: nothing accepts "
        f"connections there: {ADVICE} Cause: ConnectError: [Errno 111] Connection refused"
    )


def test_the_distributed_download_says_the_same(share, tmp_path):
    hub = closed_hub()
    with RedisServer(tmp_path / "redis") as redis_server:
        shared = SharedModel(new_loader(hub, share, tmp_path / "cache"), redis_server.client())
        assert shared.pull()
        deadline = time.monotonic() + 60
        while (status := shared.status()).state != "failed":
            assert time.monotonic() < deadline, status
            time.sleep(0.05)
    assert status.error.startswith(f"The model hub at {hub.url} (HF_ENDPOINT) is unreachable")
    assert status.error.endswith("Cause: ConnectError: [Errno 111] Connection refused")


def failed_with(exc_type: type[BaseException], cause: BaseException) -> BaseException:
    """`exc_type` raised while handling `cause`, as the hub client raises it."""
    try:
        try:
            raise cause
        except BaseException as inner:
            raise exc_type(str(inner)) from inner
    except BaseException as outer:
        return outer


def test_a_host_name_that_does_not_resolve(tmp_path):
    source = source_at("http://hub.example.invalid", tmp_path)
    unresolved = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    error = explain_pull_failure(failed_with(httpx2.ConnectError, unresolved), source)
    assert error == (
        "The model hub at http://hub.example.invalid (HF_ENDPOINT) is unreachable: its host "
        f"name does not resolve: {ADVICE} Cause: ConnectError: [Errno -2] Name or service "
        "not known"
    )


@pytest.fixture
def silent_hub() -> Iterator[str]:
    """A port that takes connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_hub_that_does_not_answer_in_time(silent_hub, tmp_path):
    with pytest.raises(httpx2.TimeoutException) as raised:  # the hub client's own transport
        httpx2.get(f"{silent_hub}/api/models/{SD_REPO}", timeout=0.2)
    error = explain_pull_failure(raised.value, source_at(silent_hub, tmp_path))
    assert error.startswith(f"The model hub at {silent_hub} (HF_ENDPOINT) did not answer in time")
    assert error.endswith(f"{ADVICE} Cause: ReadTimeout: timed out")


def test_a_gated_repo_asks_for_its_terms_and_a_token(hub, tmp_path):
    hub.gated.add(SD_REPO)
    error = pull_failure(source_at(hub.url, tmp_path))
    assert error.startswith(
        f"{SD_REPO} is a gated repo on the model hub at {hub.url} (HTTP 401): sign in there, "
        "accept its terms, and set HF_TOKEN to a token of that account. Cause: GatedRepoError: "
    )


def test_a_repo_the_hub_does_not_have_names_it_and_model_id(hub, tmp_path):
    error = pull_failure(source_at(hub.url, tmp_path, model_id="testorg/no-such-model"))
    assert error.startswith(
        f"The model hub at {hub.url} has no repo testorg/no-such-model, or it is private "
        "(HTTP 404): check MODEL_ID; for a private repo, set HF_TOKEN to a token with access "
        "to it. Cause: RepositoryNotFoundError: "
    )


def test_a_revision_the_repo_does_not_have_names_model_revision(hub, tmp_path):
    error = pull_failure(source_at(hub.url, tmp_path, revision="v9"))
    assert error.startswith(
        f"{SD_REPO} on the model hub at {hub.url} has no revision v9 (HTTP 404)"
    )
    assert "check MODEL_REVISION. Cause: RevisionNotFoundError: " in error


@pytest.mark.parametrize(
    ("status", "token", "says"),
    [
        (401, None, "refused access to testorg/tiny-sd (HTTP 401): set HF_TOKEN to a token"),
        (403, "hf_wrong", "(HTTP 403): the HF_TOKEN set was refused or has no access"),
        (429, None, "is limiting requests (HTTP 429): pull again later"),
        (500, None, "failed (HTTP 500), a fault on its side: pull again later, or set "
                    "HF_ENDPOINT to a mirror"),
    ],
)  # fmt: skip
def test_the_hubs_refusals_and_faults_say_what_to_do(hub, tmp_path, status, token, says):
    hub.fail_status = status
    error = pull_failure(source_at(hub.url, tmp_path, token=token))
    assert error.startswith(f"The model hub at {hub.url} ")
    assert says in error
    assert "Cause: HfHubHTTPError: " in error and str(status) in error.split("Cause: ")[1]


def test_a_full_disk_says_which_file_and_which_settings(tmp_path):
    with pytest.raises(OSError) as raised, open("/dev/full", "wb") as full:
        full.write(b"x")  # the kernel's full device: ENOSPC on the write
    assert raised.value.errno == errno.ENOSPC
    no_space = OSError(errno.ENOSPC, raised.value.strerror, "/models/m/unet/w.safetensors.tmp")
    error = explain_pull_failure(no_space, source_at(closed_hub().url, tmp_path))
    assert error == (
        "A disk is full writing /models/m/unet/w.safetensors.tmp: the pull needs room for the "
        "model on the share (MODEL_DIR) and for the files in flight in DOWNLOAD_CACHE_DIR; "
        "free some space and pull again. Cause: OSError: [Errno 28] No space left on device: "
        "'/models/m/unet/w.safetensors.tmp'"
    )


def test_a_failure_of_another_kind_keeps_its_raw_cause(tmp_path):
    assert explain_pull_failure(ValueError("odd"), source_at("http://x", tmp_path)) == (
        "ValueError: odd"
    )


def test_the_hub_is_named_without_what_its_address_may_hide(tmp_path):
    mirror = "https://user:secret@mirror.example:8443/hf/?key=k#top"
    assert hub_address(source_at(mirror, tmp_path)) == "https://mirror.example:8443/hf"
    assert hub_address(source_at(None, tmp_path)) == huggingface_hub.constants.ENDPOINT
