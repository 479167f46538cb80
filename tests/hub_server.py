"""A small stand-in for the Hugging Face Hub on 127.0.0.1, for the tests (the real Hub is unreachable).

It implements the endpoints ``huggingface_hub`` calls to create a repo and a branch, upload a folder
(preupload, LFS batch + basic PUT, NDJSON commit; also through ``upload_large_folder``), list commits,
and download a snapshot (repo info, with file metadata as ``model_info(files_metadata=True)`` asks; tree;
resolve, with a ``Range`` answered 206 as the Hub's CDN answers it, which ``get_safetensors_metadata`` asks). It
keeps every file's bytes and records every request and the bytes each answer sent, so tests check what arrived,
byte for byte, and which headers came with it. Start it with ``python tests/hub_server.py`` to point a real
``HF_ENDPOINT`` at it by hand.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_REPO = r"(?P<repo>[^/]+/[^/]+?)"


@dataclass
class Commit:
    oid: str
    title: str
    files: dict[str, bytes]  # the whole tree after this commit


@dataclass
class Repo:
    private: bool
    branches: dict[str, list[Commit]] = field(default_factory=lambda: {"main": []})

    def tree(self, revision: str) -> dict[str, bytes]:
        for commits in self.branches.values():
            for commit in commits:
                if commit.oid == revision:
                    return commit.files
        commits = self.branches.get(revision) or []
        return commits[-1].files if commits else {}

    def knows(self, commit: str) -> bool:
        return any(c.oid == commit for commits in self.branches.values() for c in commits)

    def head(self, revision: str) -> str:
        commits = self.branches.get(revision)
        if commits:
            return commits[-1].oid
        return revision  # a commit id


@dataclass
class Request:
    method: str
    path: str
    authorization: str | None
    query: str = ""


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.requests: list[Request] = []
        self.validated: list[dict[str, Any]] = []  # README metadata checked by /api/validate-yaml
        self.sent: list[tuple[str, int]] = []  # (path, body bytes sent) of every answer
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def seed(self, repo_id: str, files: dict[str, bytes], title: str = "initial") -> str:
        """Create ``repo_id`` holding ``files`` on main; returns the commit id."""
        repo = self.repos.setdefault(repo_id, Repo(private=False))
        return self._commit(repo, "main", title, files)

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        return dict(self.repos[repo_id].tree(revision))

    def _commit(self, repo: Repo, branch: str, title: str, changes: dict[str, bytes]) -> str:
        commits = repo.branches.setdefault(branch, [])
        tree = {**(commits[-1].files if commits else {}), **changes}
        oid = hashlib.sha1(f"{len(self.requests)}:{title}:{sorted(tree)}".encode()).hexdigest()
        commits.append(Commit(oid, title, tree))
        return oid

    # -- request handling (runs on server threads) ------------------------------------------------

    def handle(self, method: str, path: str, body: bytes, query: str) -> tuple[int, Any, dict[str, str]]:
        with self._lock:
            for pattern, verb, action in self._routes():
                match = re.fullmatch(pattern, path)
                if match and verb == method:
                    return action(body=body, query=query, **match.groupdict())
        return 404, {"error": f"fake hub: no route for {method} {path}"}, {}

    def _routes(self) -> list[tuple[str, str, Any]]:
        return [
            (r"/api/repos/create", "POST", self._create_repo),
            (r"/api/validate-yaml", "POST", self._validate_yaml),
            (rf"/api/models/{_REPO}/branch/(?P<branch>.+)", "POST", self._create_branch),
            (rf"/api/models/{_REPO}/preupload/(?P<revision>.+)", "POST", self._preupload),
            (rf"/{_REPO}\.git/info/lfs/objects/batch", "POST", self._lfs_batch),
            (r"/_lfs/(?P<oid>[0-9a-f]{64})", "PUT", self._lfs_put),
            (rf"/api/models/{_REPO}/commit/(?P<revision>.+)", "POST", self._commit_endpoint),
            (rf"/api/models/{_REPO}/commits/(?P<revision>.+)", "GET", self._list_commits),
            (rf"/api/models/{_REPO}/revision/(?P<revision>.+)", "GET", self._repo_info),
            (rf"/api/models/{_REPO}", "GET", self._repo_info),
            (rf"/api/models/{_REPO}/tree/(?P<revision>[^/]+)(?:/.*)?", "GET", self._tree),
            (rf"/{_REPO}/resolve/(?P<revision>[^/]+)/(?P<file>.+)", "HEAD", self._resolve),
            (rf"/{_REPO}/resolve/(?P<revision>[^/]+)/(?P<file>.+)", "GET", self._resolve),
        ]

    def _create_repo(self, body: bytes, **_: Any) -> tuple[int, Any, dict[str, str]]:
        payload = json.loads(body)
        repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
        if repo_id in self.repos:
            return 409, {"error": "You already created this model repo", "url": f"{self.endpoint}/{repo_id}"}, {}
        self.repos[repo_id] = Repo(private=payload.get("visibility") == "private" or bool(payload.get("private")))
        return 200, {"url": f"{self.endpoint}/{repo_id}", "name": repo_id}, {}

    def _validate_yaml(self, body: bytes, **_: Any) -> tuple[int, Any, dict[str, str]]:
        """The Hub checks a README's metadata on commit; the part eaglequant's cards can get wrong."""
        import yaml

        content = json.loads(body)["content"]
        front = content.split("---", 2)[1] if content.startswith("---") else ""
        meta = yaml.safe_load(front) or {}
        self.validated.append(meta)
        errors = []
        if "base_model_relation" in meta and "base_model" not in meta:
            errors.append({"message": '"base_model_relation" requires "base_model"'})
        if not isinstance(meta.get("tags", []), list):
            errors.append({"message": '"tags" must be an array'})
        if errors:
            return 400, {"error": errors[0]["message"], "errors": errors}, {}
        return 200, {"errors": [], "warnings": []}, {}

    def _create_branch(self, repo: str, branch: str, **_: Any) -> tuple[int, Any, dict[str, str]]:
        state = self.repos.get(repo)
        if state is None:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        if unquote(branch) in state.branches:
            return 409, {"error": "Reference already exists"}, {}
        state.branches[unquote(branch)] = list(state.branches["main"])
        return 200, {}, {}

    def _preupload(self, repo: str, body: bytes, **_: Any) -> tuple[int, Any, dict[str, str]]:
        files = json.loads(body)["files"]
        modes = [
            {
                "path": f["path"],
                "uploadMode": "lfs" if _is_lfs(f["path"], f["size"]) else "regular",
                "shouldIgnore": False,
            }
            for f in files
        ]
        return 200, {"files": modes}, {}

    def _lfs_batch(self, repo: str, body: bytes, **_: Any) -> tuple[int, Any, dict[str, str]]:
        objects = []
        for obj in json.loads(body)["objects"]:
            entry: dict[str, Any] = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.lfs:
                entry["actions"] = {"upload": {"href": f"{self.endpoint}/_lfs/{obj['oid']}", "header": {}}}
            objects.append(entry)
        return 200, {"transfer": "basic", "objects": objects}, {}

    def _lfs_put(self, oid: str, body: bytes, **_: Any) -> tuple[int, Any, dict[str, str]]:
        if hashlib.sha256(body).hexdigest() != oid:
            return 400, {"error": "sha256 mismatch"}, {}
        self.lfs[oid] = body
        return 200, {}, {}

    def _commit_endpoint(self, repo: str, revision: str, body: bytes, **_: Any) -> tuple[int, Any, dict[str, str]]:
        state = self.repos.get(repo)
        branch = unquote(revision)
        if state is None or branch not in state.branches:
            return 404, {"error": f"{repo}@{branch} not found"}, {}
        title, changes = "", {}
        for line in body.splitlines():
            item = json.loads(line)
            value = item["value"]
            if item["key"] == "header":
                title = value["summary"]
            elif item["key"] == "file":
                changes[value["path"]] = base64.b64decode(value["content"])
            elif item["key"] == "lfsFile":
                if value["oid"] not in self.lfs:
                    return 400, {"error": f"LFS object {value['oid']} was never uploaded"}, {}
                changes[value["path"]] = self.lfs[value["oid"]]
        oid = self._commit(state, branch, title, changes)
        return 200, {"commitUrl": f"{self.endpoint}/{repo}/commit/{oid}", "commitOid": oid}, {}

    def _list_commits(self, repo: str, revision: str, **_: Any) -> tuple[int, Any, dict[str, str]]:
        commits = self.repos[repo].branches.get(unquote(revision), [])
        listing = [
            {"id": c.oid, "title": c.title, "message": "", "authors": [], "date": "2026-11-21T00:00:00.000Z"}
            for c in reversed(commits)
        ]
        return 200, listing, {}

    def _repo_info(self, repo: str, query: str, revision: str = "main", **_: Any) -> tuple[int, Any, dict[str, str]]:
        """As the Hub answers: with ``?blobs=true`` (``files_metadata=True``) each sibling has its size, git
        blob id and, for an LFS file, ``lfs: {sha256, size, pointerSize}``; an unknown revision is a 404."""
        state = self.repos.get(repo)
        if state is None:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        sha = state.head(unquote(revision))
        if unquote(revision) not in state.branches and not state.knows(sha):
            return 404, {"error": f"Invalid rev id: {unquote(revision)}"}, {"X-Error-Code": "RevisionNotFound"}
        blobs = parse_qs(query).get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = [_sibling(name, data, blobs) for name, data in sorted(state.tree(sha).items())]
        return 200, {"id": repo, "modelId": repo, "sha": sha, "private": state.private, "siblings": siblings}, {}

    def _tree(self, repo: str, revision: str, **_: Any) -> tuple[int, Any, dict[str, str]]:
        entries = []
        for name, data in sorted(self.repos[repo].tree(unquote(revision)).items()):
            entry: dict[str, Any] = {"type": "file", "path": name, "size": len(data), "oid": _git_oid(data)}
            if _is_lfs(name, len(data)):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            entries.append(entry)
        return 200, entries, {}

    def _resolve(self, repo: str, revision: str, file: str, **_: Any) -> tuple[int, Any, dict[str, str]]:
        state = self.repos.get(repo)
        name = unquote(file)
        tree = state.tree(unquote(revision)) if state else {}
        if name not in tree:
            return 404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"}
        data = tree[name]
        etag = hashlib.sha256(data).hexdigest() if _is_lfs(name, len(data)) else _git_oid(data)
        headers = {"X-Repo-Commit": state.head(unquote(revision)), "ETag": f'"{etag}"'}  # type: ignore[union-attr]
        if _is_lfs(name, len(data)):
            headers["X-Linked-Etag"] = f'"{etag}"'
            headers["X-Linked-Size"] = str(len(data))
        return 200, data, headers


def _sibling(name: str, data: bytes, blobs: bool) -> dict[str, Any]:
    sibling: dict[str, Any] = {"rfilename": name}
    if blobs:
        sibling.update(size=len(data), blobId=_git_oid(data))
        if _is_lfs(name, len(data)):
            sibling["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
    return sibling


def _mode(path: str, size: int) -> str:
    return "lfs" if _is_lfs(path, size) else "regular"


def _is_lfs(path: str, size: int) -> bool:
    return path.endswith((".safetensors", ".bin")) or size > 10 * 1024 * 1024


def _git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _serve(self, send_body: bool = True) -> None:
            url = urlsplit(self.path)
            body = self._body()
            hub.requests.append(Request(self.command, url.path, self.headers.get("Authorization"), url.query))
            status, payload, headers = hub.handle(self.command, url.path, body, url.query)
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            ranged = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
            if ranged and status == 200 and isinstance(payload, bytes):  # as the Hub's CDN answers a ranged GET
                start, stop = int(ranged[1]), min(int(ranged[2]) + 1, len(data))
                headers = {**headers, "Content-Range": f"bytes {start}-{stop - 1}/{len(data)}"}
                status, data = 206, data[start:stop]
            hub.sent.append((url.path, len(data) if send_body else 0))
            self.send_response(status)
            content_type = "application/octet-stream" if isinstance(payload, bytes) else "application/json"
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if send_body:
                self.wfile.write(data)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    chunk = self.rfile.read(size)
                    self.rfile.readline()
                    if size == 0:
                        return b"".join(chunks)
                    chunks.append(chunk)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def do_PUT(self) -> None:
            self._serve()

        def do_HEAD(self) -> None:
            self._serve(send_body=False)

    return Handler


if __name__ == "__main__":
    server = FakeHub().start()
    print(f"fake Hub at {server.endpoint} (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()
