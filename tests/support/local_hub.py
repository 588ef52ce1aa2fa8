"""A Hugging Face Hub look-alike on 127.0.0.1 for offline tests of real download code.

It speaks the subset of the Hub protocol that huggingface_hub's `model_info`,
`list_repo_tree`, `hf_hub_download` and `snapshot_download` use over plain HTTP (it never
advertises Xet), records every request, and can inject failures or throttle bodies.
`root/<org>/<name>/` is served as repo `<org>/<name>`; every repo has one commit, reachable
as "main" or by its 40-hex sha.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from time import sleep  # bound early: tests may stub time.sleep to skip client backoff
from urllib.parse import parse_qs, unquote, urlsplit

_LFS_SUFFIXES = (".safetensors", ".bin", ".msgpack", ".onnx", ".pt", ".ckpt")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_LAST_MODIFIED = "2024-01-01T00:00:00.000Z"


@functools.lru_cache(maxsize=1024)
def _digests(path: Path, mtime_ns: int, size: int) -> tuple[str, str]:
    """(git blob sha1, sha256) of a file; mtime/size in the key invalidate rebuilt files."""
    data = path.read_bytes()
    git = hashlib.sha1(b"blob %d\0" % size + data).hexdigest()
    return git, hashlib.sha256(data).hexdigest()


class _RepoFile:
    """What the Hub knows about one file: git oid, and LFS pointer data for big binaries."""

    def __init__(self, repo_dir: Path, rel: str) -> None:
        self.path = repo_dir / rel
        self.rel = rel
        stat = self.path.stat()
        self.size = stat.st_size
        git_oid, self.sha256 = _digests(self.path, stat.st_mtime_ns, self.size)
        self.is_lfs = rel.endswith(_LFS_SUFFIXES)
        if self.is_lfs:
            pointer = (
                "version https://git-lfs.github.com/spec/v1\n"
                f"oid sha256:{self.sha256}\nsize {self.size}\n"
            ).encode()
            self.pointer_size = len(pointer)
            git_oid = hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()
        self.oid = git_oid
        # The Hub's ETag is the git oid, except LFS files, whose "linked" ETag is the sha256.
        self.etag = self.sha256 if self.is_lfs else git_oid

    def tree_entry(self) -> dict:
        entry: dict = {"type": "file", "oid": self.oid, "size": self.size, "path": self.rel}
        if self.is_lfs:
            entry["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": self.pointer_size}
        return entry

    def sibling(self) -> dict:
        sibling: dict = {"rfilename": self.rel, "size": self.size, "blobId": self.oid}
        if self.is_lfs:
            lfs = {"sha256": self.sha256, "size": self.size, "pointerSize": self.pointer_size}
            sibling["lfs"] = lfs
        return sibling


class _HubError(Exception):
    """An error answer; huggingface_hub picks its exception class from `X-Error-Code`."""

    def __init__(
        self, status: int, message: str, code: str | None = None, headers: dict | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message = status, message
        self.headers = {"X-Error-Message": message, **(headers or {})}
        if code:
            self.headers["X-Error-Code"] = code


class _QuietServer(ThreadingHTTPServer):
    """Daemon handler threads, and no tracebacks when a test kills a client mid-request."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LocalHub:
    """Serve `root/<org>/<name>/` folders as Hub model repos on an ephemeral local port.

    Test hooks (all safe to set from the test thread while requests are in flight):
    `fail_status` answers every request with that status; `fail_paths` answers 500 for
    those repo file paths; `throttle_bytes_per_sec` slows file bodies so a client can be
    killed mid-download; `commits` overrides a repo's commit sha; `gated` repos answer as the
    Hub answers for a gated repo whose terms the caller has not accepted (401, GatedRepo).
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.fail_status: int | None = None
        self.fail_paths: set[str] = set()
        self.throttle_bytes_per_sec: int | None = None
        self.commits: dict[str, str] = {}
        self.gated: set[str] = set()
        self._log: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> str:
        """Bind a free port, serve in a daemon thread and return the endpoint URL."""
        handler = type("Handler", (_Handler,), {"hub": self})
        self._server = _QuietServer(("127.0.0.1", 0), handler)
        serve = functools.partial(self._server.serve_forever, poll_interval=0.05)  # fast stop()
        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join()
            self._server = self._thread = None

    def __enter__(self) -> LocalHub:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "LocalHub is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- observability -------------------------------------------------------------------

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, decoded URL path without query) of every request received so far."""
        with self._lock:
            return list(self._log)

    def file_gets(self) -> list[str]:
        """Paths of the GET /resolve/ requests, i.e. the file bodies actually fetched."""
        return [path for method, path in self.requests if method == "GET" and "/resolve/" in path]

    def reset_log(self) -> None:
        with self._lock:
            self._log.clear()

    def _record(self, method: str, path: str) -> None:
        with self._lock:
            self._log.append((method, path))

    # -- repo model ----------------------------------------------------------------------

    def commit(self, repo_id: str) -> str:
        """The repo's commit sha: `commits[repo_id]` or a stable hash of the repo id."""
        return self.commits.get(repo_id) or hashlib.sha1(repo_id.encode()).hexdigest()

    def _repo(self, org: str, name: str, revision: str) -> tuple[str, Path]:
        repo_id = f"{org}/{name}"
        repo_dir = self.root / org / name
        if ".." in (org, name) or not repo_dir.is_dir():
            raise _HubError(404, "Repository not found", "RepoNotFound")
        if repo_id in self.gated:
            message = f"Access to model {repo_id} is restricted. You must have access to it."
            raise _HubError(401, message, "GatedRepo")
        if revision not in ("main", self.commit(repo_id)):
            raise _HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo_id, repo_dir

    @staticmethod
    def _files(repo_dir: Path) -> list[_RepoFile]:
        rels = sorted(
            p.relative_to(repo_dir).as_posix()
            for p in repo_dir.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(repo_dir).parts
        )
        return [_RepoFile(repo_dir, rel) for rel in rels]

    def _model_info(self, org: str, name: str, revision: str) -> dict:
        repo_id, repo_dir = self._repo(org, name, revision)
        return {
            "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
            "id": repo_id,
            "modelId": repo_id,
            "author": org,
            "sha": self.commit(repo_id),
            "lastModified": _LAST_MODIFIED,
            "createdAt": _LAST_MODIFIED,
            "private": False,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "library_name": "diffusers",
            "pipeline_tag": "text-to-image",
            "tags": ["diffusers", "safetensors", "text-to-image"],
            "siblings": [f.sibling() for f in self._files(repo_dir)],
        }

    def _tree(self, org: str, name: str, revision: str, sub: str, recursive: bool) -> list:
        _, repo_dir = self._repo(org, name, revision)
        prefix = f"{sub.strip('/')}/" if sub.strip("/") else ""
        if prefix and (".." in sub.split("/") or not (repo_dir / prefix).is_dir()):
            raise _HubError(404, f"Entry not found: {sub}", "EntryNotFound")
        entries: dict[str, dict] = {}
        for f in self._files(repo_dir):
            if not f.rel.startswith(prefix):
                continue
            parts = f.rel[len(prefix) :].split("/")
            depth = len(parts) if recursive else 1
            for i in range(1, min(depth, len(parts) - 1) + 1):  # folders on the way down
                folder = prefix + "/".join(parts[:i])
                oid = hashlib.sha1(folder.encode()).hexdigest()
                entries[folder] = {"type": "directory", "oid": oid, "size": 0, "path": folder}
            if recursive or len(parts) == 1:
                entries[f.rel] = f.tree_entry()
        return [entries[key] for key in sorted(entries)]


class _Handler(BaseHTTPRequestHandler):
    """Routes Hub API and /resolve/ requests to the owning `LocalHub`."""

    hub: LocalHub
    protocol_version = "HTTP/1.1"  # keep-alive, like the real Hub; needs Content-Length

    def log_message(self, format: str, *args: object) -> None:
        """Stay quiet: tests inspect `LocalHub.requests` instead."""

    def do_GET(self) -> None:
        self._dispatch(send_body=True)

    def do_HEAD(self) -> None:
        self._dispatch(send_body=False)

    def _dispatch(self, send_body: bool) -> None:
        url = urlsplit(self.path)
        segments = [unquote(s) for s in url.path.split("/")[1:]]
        self.hub._record(self.command, "/" + "/".join(segments))
        try:
            if self.hub.fail_status is not None:
                raise _HubError(self.hub.fail_status, "Injected failure")
            match segments:
                case ["api", "agent-harnesses"]:
                    # huggingface_hub 2.4 fetches this registry from HF_ENDPOINT on its first
                    # request unless HF_HUB_DISABLE_TELEMETRY is set; empty = no agent.
                    self._json({"standardEnvVars": [], "harnesses": {}}, send_body)
                case ["api", "models", org, name]:
                    self._json(self.hub._model_info(org, name, "main"), send_body)
                case ["api", "models", org, name, "revision", revision]:
                    self._json(self.hub._model_info(org, name, revision), send_body)
                case ["api", "models", org, name, "tree", revision, *sub]:
                    flag = parse_qs(url.query).get("recursive", [""])[0].lower()
                    recursive = flag in ("1", "true")
                    tree = self.hub._tree(org, name, revision, "/".join(sub), recursive)
                    self._json(tree, send_body)
                case [org, name, "resolve", revision, *parts] if parts:
                    self._resolve(org, name, revision, "/".join(parts), send_body)
                case _:
                    raise _HubError(404, "Not found")
        except _HubError as error:
            body = json.dumps({"error": error.message}).encode()
            headers = {"Content-Type": "application/json", **error.headers}
            self._send(error.status, headers, body, send_body)

    def _resolve(self, org: str, name: str, revision: str, rel: str, send_body: bool) -> None:
        repo_id, repo_dir = self.hub._repo(org, name, revision)
        # X-Repo-Commit on a 404 lets huggingface_hub cache the file's absence (.no_exist).
        commit = {"X-Repo-Commit": self.hub.commit(repo_id)}
        if ".." in rel.split("/") or not (repo_dir / rel).is_file():
            raise _HubError(404, "Entry not found", "EntryNotFound", commit)
        if rel in self.hub.fail_paths:
            raise _HubError(500, f"Injected failure for {rel}", headers=commit)
        info = _RepoFile(repo_dir, rel)
        start, end = 0, info.size - 1
        status = 200
        headers = {
            **commit,
            "ETag": f'"{info.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if info.is_lfs:
            headers |= {"X-Linked-Etag": f'"{info.etag}"', "X-Linked-Size": str(info.size)}
        if match := _RANGE.fullmatch(self.headers.get("Range", "").strip()):
            first, last = match.groups()
            if first:
                start, end = int(first), min(int(last), info.size - 1) if last else info.size - 1
            elif last:  # suffix range: the final N bytes
                start = max(info.size - int(last), 0)
            if start >= info.size or start > end:
                self._send(
                    416, {**headers, "Content-Range": f"bytes */{info.size}"}, b"", send_body
                )
                return
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{info.size}"
        self._head(status, {**headers, "Content-Length": str(end - start + 1)})
        if send_body:
            self._stream(info.path, start, end - start + 1)

    def _stream(self, path: Path, start: int, length: int) -> None:
        """Write the byte range, in small paced chunks when the hub is throttled."""
        with path.open("rb") as f:
            f.seek(start)
            while length > 0:
                rate = self.hub.throttle_bytes_per_sec
                chunk = f.read(min(length, max(rate // 20, 1) if rate else 1 << 16))
                self.wfile.write(chunk)
                length -= len(chunk)
                if rate:
                    sleep(len(chunk) / rate)

    def _json(self, payload: object, send_body: bool) -> None:
        body = json.dumps(payload).encode()
        self._send(200, {"Content-Type": "application/json"}, body, send_body)

    def _send(self, status: int, headers: dict[str, str], body: bytes, send_body: bool) -> None:
        self._head(status, {**headers, "Content-Length": str(len(body))})
        if send_body:
            self.wfile.write(body)

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
