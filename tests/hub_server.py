"""A tiny Hugging Face Hub look-alike for tests: real `huggingface_hub` / `transformers` talk to it over HTTP.

    with HubServer(tmp_path / "hub", tokens={"hf_test_token"}) as hub:
        HfApi(endpoint=hub.url, token="hf_test_token").upload_folder(repo_id="me/tiny", folder_path=...)
        hub.repo_files("me/tiny")  # -> {"config.json": b"...", ...}

Storage: `root/<type>s/<namespace>/<name>/<commit sha>/<files>`, one full snapshot folder per commit (hard links make
that cheap). Branches, pull-request refs (`refs/pr/N`), privacy and owner live in memory for the server's lifetime.

Only the Hub behaviour the clients actually depend on is mimicked (read from huggingface_hub 2.4 / transformers 5.24):
* preupload answers `uploadMode: "regular"` for every file, so file bytes arrive base64-encoded inside the NDJSON
  commit and hf_xet / LFS are never engaged, whatever the file size;
* errors carry the `X-Error-Code` header (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`) that
  `hf_raise_for_status` maps to its exception classes; transformers relies on `EntryNotFound` to skip optional files;
* `/resolve/` answers carry `X-Repo-Commit` and an `ETag` (the git blob id), without which downloads are refused.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Self
from urllib.parse import parse_qs, unquote, urlsplit

URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}  # how each repo type appears in web URLs
API_SEGMENTS = {"models": "model", "datasets": "dataset", "spaces": "space"}  # ... and in /api/<segment>/ URLs


class HubError(Exception):
    """Answered as an HTTP error shaped like the Hub's, so huggingface_hub raises its usual exception class."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        commit: str | None = None,
        headers: dict[str, str] | None = None,
        **body,
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.commit, self.body = status, message, code, commit, body
        self.headers = headers or {}


@dataclass
class _Repo:
    path: Path
    private: bool
    owner: str  # the token that created the repo: the only one allowed to write to it or to read it when private
    refs: dict[str, str] = field(default_factory=dict)  # "main", "dev", "refs/pr/1", ... -> commit sha
    pull_requests: list[str] = field(default_factory=list)  # titles; PR number N is pull_requests[N - 1]


def git_blob_id(data: bytes) -> str:
    """The id git gives a file; the Hub uses it as ETag and preupload `oid` for files not stored in LFS."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer:
    def __init__(self, root: str | os.PathLike, tokens: set[str] | None = None):
        """`tokens`: the accepted tokens (any other gets 401); None accepts any non-empty token."""
        self.root = Path(root)
        self.tokens = set(tokens) if tokens is not None else None
        self.url: str | None = None  # http://127.0.0.1:<port>, set by start()
        self.tokens_seen: list[str] = []  # bearer tokens of all requests, in arrival order
        self.requests: list[tuple[str, str]] = []  # (method, path with query) of all requests
        self.errors: list[str] = []  # tracebacks of server bugs, so a test can assert there were none
        # Failure modes, by route name (see `route_name`; "resolve:<path>" for one file): `failures` answers with
        # (status, message, headers) instead, "{token}" in them replaced by the request's bearer token (a hostile
        # or careless Hub quoting it back); `after` is called once a request was handled, before it is answered.
        self.failures: dict[str, tuple[int, str, dict[str, str]]] = {}
        self.after: dict[str, Callable[[], None]] = {}
        self._repos: dict[tuple[str, str], _Repo] = {}
        self.collections: dict[str, dict] = {}  # slug -> the collection as the Hub answers it
        self._lock = threading.RLock()  # requests are served on several threads
        self._httpd: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ lifecycle and test helpers

    def start(self) -> Self:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)  # port 0: the OS picks a free port
        self._httpd.hub = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="hub-server", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def refs(self, repo_id: str, repo_type: str = "model") -> dict[str, str]:
        """Branches and PR refs of a repo, each mapped to its commit sha."""
        with self._lock:
            return dict(self._repos[(repo_type, repo_id)].refs)

    def repo_files(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> dict[str, bytes]:
        """Every file of `repo_id` at `revision` (branch, `refs/pr/N` or commit sha), read straight from disk."""
        with self._lock:
            repo = self._repos[(repo_type, repo_id)]
            return {path: file.read_bytes() for path, file in self._files(repo, self._resolve(repo, revision)).items()}

    # ------------------------------------------------------------------ repository model

    def _repo(self, repo_type: str, repo_id: str, token: str | None, write: bool = False) -> _Repo:
        repo = self._repos.get((repo_type, repo_id))
        if repo is None or (repo.private and token != repo.owner):
            # The Hub hides private repos behind the same answer as missing ones: 401 anonymous, 404 otherwise.
            raise HubError(404 if token else 401, "Repository not found", "RepoNotFound")
        if write and token != repo.owner:
            raise HubError(403, "You don't have the rights to write to this repository")
        return repo

    def _resolve(self, repo: _Repo, revision: str) -> str:
        if revision in repo.refs:
            return repo.refs[revision]
        if len(revision) == 40 and (repo.path / revision).is_dir():
            return revision
        raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def _files(self, repo: _Repo, sha: str) -> dict[str, Path]:
        snapshot = repo.path / sha
        return {f.relative_to(snapshot).as_posix(): f for f in sorted(snapshot.rglob("*")) if f.is_file()}

    def _commit(self, repo: _Repo, ref: str, operations: list[tuple[str, str, bytes]], parent: str | None) -> str:
        """Applies (kind, path, data) operations on top of `ref` as a new commit and moves `ref` to it."""
        base = self._resolve(repo, ref)
        if parent is not None and not base.startswith(parent):
            raise HubError(412, f"Parent commit {parent} is not the head of {ref} ({base})")
        sha = secrets.token_hex(20)
        # Hard links: a snapshot costs no copy, and safe since files are only ever replaced, never modified in place.
        shutil.copytree(repo.path / base, repo.path / sha, copy_function=os.link)
        for kind, path, data in operations:
            target = repo.path / sha / path
            if kind == "deletedFolder":
                shutil.rmtree(target, ignore_errors=True)
                continue
            target.unlink(missing_ok=True)
            if kind == "file":
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        repo.refs[ref] = sha
        return sha

    def _open_pull_request(self, repo: _Repo, title: str, base: str = "main") -> int:
        repo.pull_requests.append(title)
        num = len(repo.pull_requests)
        repo.refs[f"refs/pr/{num}"] = self._resolve(repo, base)
        return num

    # ------------------------------------------------------------------ endpoints

    def handle(self, method: str, raw_path: str, query: dict, body: bytes, token: str | None):
        """Returns (status, headers, body) for one request; `raw_path` is still percent-encoded."""
        if token:
            self.tokens_seen.append(token)
        segs = [unquote(s) for s in raw_path.strip("/").split("/")]
        route = route_name(segs)
        names = [f"resolve:{'/'.join(segs[4:])}", route] if route == "resolve" else [route]
        if failure := next((self.failures[name] for name in names if name in self.failures), None):
            status, message, headers = failure

            def echo(text: str) -> str:
                return text.replace("{token}", token or "")

            raise HubError(status, echo(message), headers={name: echo(value) for name, value in headers.items()})
        answer = self._answer(method, raw_path, query, body, token)
        if hook := self.after.get(route):
            hook()
        return answer

    def _answer(self, method: str, raw_path: str, query: dict, body: bytes, token: str | None):
        if token:
            if self.tokens is not None and token not in self.tokens:
                raise HubError(401, "Invalid credentials in Authorization header")
        # Segments are decoded one by one: clients percent-encode a revision like `refs/pr/1` into one segment.
        segs = [unquote(s) for s in raw_path.strip("/").split("/")]
        if segs[0] != "api":
            return self._resolve_file(method, segs, token)
        if method == "POST" and segs == ["api", "repos", "create"]:
            return self._create_repo(json.loads(body), token)
        if method == "POST" and segs == ["api", "validate-yaml"]:  # upload_folder checks a README.md's metadata
            return self._validate_yaml(json.loads(body)["content"])
        if segs[:2] == ["api", "collections"]:
            return self._collection_request(method, segs[2:], json.loads(body or b"{}"), token)
        if segs == ["api", "agent-harnesses"]:  # build_hf_headers() fetches this once per process from HF_ENDPOINT
            return _json({"standardEnvVars": [], "harnesses": {}})
        if len(segs) < 4 or segs[1] not in API_SEGMENTS:
            raise HubError(404, f"hub_server does not implement {method} {raw_path}")
        repo_type, repo_id, rest = API_SEGMENTS[segs[1]], f"{segs[2]}/{segs[3]}", segs[4:]
        route = (method, rest[0] if rest else "")
        if route == ("GET", "") or route == ("GET", "revision"):
            return self._repo_info(repo_type, repo_id, rest[1] if rest else "main", token)
        if route == ("GET", "tree"):
            return self._tree(repo_type, repo_id, rest[1], "/".join(rest[2:]), query, token)
        if method == "POST" and rest:
            if not token:
                raise HubError(401, "Write access needs an `Authorization: Bearer <token>` header")
            repo = self._repo(repo_type, repo_id, token, write=True)
            if rest[0] == "preupload":
                return self._preupload(repo, rest[1], json.loads(body))
            if rest[0] == "commit":
                return self._receive_commit(repo, repo_type, repo_id, rest[1], body, query)
            if rest[0] == "branch":
                return self._create_branch(repo, rest[1], json.loads(body or b"{}"))
            if rest == ["discussions"]:
                return self._create_discussion(repo, json.loads(body))
        if route == ("GET", "discussions") and len(rest) == 2:
            return self._discussion(self._repo(repo_type, repo_id, token), repo_type, repo_id, int(rest[1]))
        raise HubError(404, f"hub_server does not implement {method} {raw_path}")

    def _validate_yaml(self, content: str):
        """The card's YAML front matter must parse to a mapping (the Hub checks much more, e.g. model-index)."""
        import yaml

        match = re.match(r"^---\n(.*?)\n---\n", content, re.S)
        try:
            metadata = yaml.safe_load(match.group(1)) if match else {}
        except yaml.YAMLError as error:
            return _json({"errors": [{"message": f"invalid YAML: {error}"}]}, status=400)
        if not isinstance(metadata, dict):
            return _json({"errors": [{"message": "metadata is not a mapping"}]}, status=400)
        for entry in metadata.get("model-index", []):
            if not {"name", "results"} <= set(entry):
                return _json({"errors": [{"message": "model-index entries need name and results"}]}, status=400)
        return _json({"errors": [], "warnings": []})

    def _create_repo(self, payload: dict, token: str | None):
        if not token:
            raise HubError(401, "Creating a repo needs an `Authorization: Bearer <token>` header")
        if not payload.get("organization"):  # the Hub would use the token's user name; this server has no users
            raise HubError(400, "hub_server needs a 'namespace/name' repo id")
        repo_type = payload.get("type") or "model"
        if repo_type == "space" and payload.get("sdk") not in ("gradio", "docker", "static"):
            raise HubError(400, "A Space needs an `sdk`: gradio, docker or static")  # as the Hub refuses one
        repo_id = f"{payload['organization']}/{payload['name']}"
        with self._lock:
            url = f"{self.url}/{URL_PREFIXES[repo_type]}{repo_id}"
            if (repo_type, repo_id) in self._repos:
                # create_repo(exist_ok=True) swallows the 409 but still reads the repo "url" from its body.
                raise HubError(409, "You already created this repo", url=url)
            private = payload.get("visibility", "private" if payload.get("private") else "public") == "private"
            repo = _Repo(self.root / f"{repo_type}s" / repo_id, private=private, owner=token)
            initial = secrets.token_hex(20)  # like the Hub, a new repo has one (here empty) commit on main
            (repo.path / initial).mkdir(parents=True)
            repo.refs["main"] = initial
            self._repos[(repo_type, repo_id)] = repo
        return _json({"url": url, "name": repo_id})

    def _collection_request(self, method: str, rest: list[str], payload: dict, token: str | None):
        """Collections as huggingface_hub's create_collection / add_collection_item / get_collection use them: a
        title is unique per namespace (a second create answers 409 with the slug); an item must be a repo that
        exists, and only once (409)."""
        with self._lock:
            if method == "POST" and not rest:
                if not token:
                    raise HubError(401, "Creating a collection needs an `Authorization: Bearer <token>` header")
                namespace, title = payload["namespace"], payload["title"]
                for slug, collection in self.collections.items():
                    if collection["owner"]["name"] == namespace and collection["title"] == title:
                        raise HubError(409, "You already have a collection with this title", slug=slug)
                slug = f"{namespace}/{re.sub(r'[^a-z0-9]+', '-', title.lower()).strip('-')}-{secrets.token_hex(12)}"
                self.collections[slug] = {
                    "slug": slug,
                    "title": title,
                    "description": payload.get("description"),
                    "owner": {"name": namespace},
                    "items": [],
                    "lastUpdated": "2026-01-01T00:00:00.000Z",
                    "position": 0,
                    "private": bool(payload.get("private")),
                    "theme": "default",
                    "upvotes": 0,
                }
                return _json(self.collections[slug])
            slug = "/".join(rest[:2])
            if slug not in self.collections:
                raise HubError(404, f"Collection {slug} not found")
            collection = self.collections[slug]
            if method == "GET" and len(rest) == 2:
                return _json(collection)
            if method == "POST" and rest[2:] == ["items"]:
                if not token:
                    raise HubError(401, "Adding to a collection needs an `Authorization: Bearer <token>` header")
                item = payload["item"]
                self._repo(item["type"], item["id"], token)  # 404 unless the repo exists and is visible
                if any(known["id"] == item["id"] for known in collection["items"]):
                    raise HubError(409, "Item already in the collection")
                entry = {"_id": secrets.token_hex(12), "id": item["id"], "type": item["type"]}
                entry["position"] = len(collection["items"])
                if payload.get("note"):
                    entry["note"] = {"text": payload["note"]}
                collection["items"].append(entry)
                return _json(collection)
        raise HubError(404, f"hub_server does not implement {method} /api/collections/{'/'.join(rest)}")

    def _repo_info(self, repo_type: str, repo_id: str, revision: str, token: str | None):
        with self._lock:
            repo = self._repo(repo_type, repo_id, token)
            sha = self._resolve(repo, revision)
            siblings = [{"rfilename": path} for path in self._files(repo, sha)]
        return _json(
            {
                "id": repo_id,
                "author": repo_id.split("/")[0],
                "sha": sha,
                "private": repo.private,
                "disabled": False,
                "gated": False,
                "tags": [],
                "siblings": siblings,
            }
        )

    def _tree(self, repo_type: str, repo_id: str, revision: str, under: str, query: dict, token: str | None):
        with self._lock:
            repo = self._repo(repo_type, repo_id, token)
            sha = self._resolve(repo, revision)
        snapshot = repo.path / sha
        if not (snapshot / under).is_dir():
            raise HubError(404, f"{under} does not exist on {revision}", "EntryNotFound", commit=sha)
        found = (snapshot / under).rglob("*") if query.get("recursive") == "true" else (snapshot / under).iterdir()
        entries = []
        for entry in sorted(found):
            path = entry.relative_to(snapshot).as_posix()
            if entry.is_dir():  # folders have a git tree id on the Hub; any stable value does here
                entries.append({"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "path": path})
            else:
                data = entry.read_bytes()
                entries.append({"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path})
        return _json(entries)

    def _preupload(self, repo: _Repo, revision: str, payload: dict):
        with self._lock:
            existing = self._files(repo, self._resolve(repo, revision))
        files = []
        for file in payload["files"]:
            # "regular" for every file: its bytes then come inline in the commit, and no LFS / Xet upload is tried.
            # `oid` of an identical existing file lets the client skip it, exactly as on the Hub.
            oid = git_blob_id(existing[file["path"]].read_bytes()) if file["path"] in existing else None
            files.append({"path": file["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": oid})
        return _json({"files": files})

    def _receive_commit(self, repo: _Repo, repo_type: str, repo_id: str, revision: str, body: bytes, query: dict):
        header, operations = {}, []
        for line in body.splitlines():
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                header = value
            elif key in ("file", "deletedFile", "deletedFolder"):
                path = PurePosixPath(value["path"])
                if path.is_absolute() or ".." in path.parts:
                    raise HubError(400, f"Invalid path in repo: {path}")
                data = base64.b64decode(value["content"]) if key == "file" else b""
                operations.append((key, str(path), data))
            else:  # "lfsFile": cannot happen, preupload never answers "lfs"
                raise HubError(400, f"hub_server only accepts regular files, got a {key!r} operation")
        with self._lock:
            ref, pr_url = revision, None
            if query.get("create_pr") == "1":
                num = self._open_pull_request(repo, header.get("summary", ""), base=revision)
                ref, pr_url = f"refs/pr/{num}", f"{self.url}/{URL_PREFIXES[repo_type]}{repo_id}/discussions/{num}"
            sha = self._commit(repo, ref, operations, header.get("parentCommit"))
        commit_url = f"{self.url}/{URL_PREFIXES[repo_type]}{repo_id}/commit/{sha}"
        return _json({"commitUrl": commit_url, "commitOid": sha, "pullRequestUrl": pr_url})

    def _create_branch(self, repo: _Repo, branch: str, payload: dict):
        with self._lock:
            if branch in repo.refs:
                raise HubError(409, f"Branch {branch} already exists")
            repo.refs[branch] = self._resolve(repo, payload.get("startingPoint") or "main")
        return _json({})

    def _create_discussion(self, repo: _Repo, payload: dict):
        # upload_folder(create_pr=True) opens the PR here first, then commits to its `refs/pr/N`.
        if not payload.get("pullRequest"):
            raise HubError(400, "hub_server only supports pull requests, not discussions")
        with self._lock:
            num = self._open_pull_request(repo, payload.get("title", ""))
        return _json({"num": num, "pullRequest": True})

    def _discussion(self, repo: _Repo, repo_type: str, repo_id: str, num: int):
        if not 0 < num <= len(repo.pull_requests):
            raise HubError(404, f"Discussion {num} not found")
        return _json(
            {
                "num": num,
                "title": repo.pull_requests[num - 1],
                "status": "draft",
                "isPullRequest": True,
                "createdAt": "2024-01-01T00:00:00.000Z",
                "author": {"name": "hub_server"},
                "events": [],
                "repo": {"name": repo_id, "type": repo_type},
                "changes": {"base": "refs/heads/main"},
                "filesWithConflicts": [],
            }
        )

    def _resolve_file(self, method: str, segs: list[str], token: str | None):
        """GET/HEAD /[datasets/|spaces/]<namespace>/<name>/resolve/<revision>/<path>."""
        repo_type = "model"
        if segs[0] in ("datasets", "spaces"):
            repo_type, segs = API_SEGMENTS[segs[0]], segs[1:]
        if method not in ("GET", "HEAD") or len(segs) < 5 or segs[2] != "resolve":
            raise HubError(404, f"hub_server does not implement {method} /{'/'.join(segs)}")
        with self._lock:
            repo = self._repo(repo_type, f"{segs[0]}/{segs[1]}", token)
            sha = self._resolve(repo, segs[3])
        file = repo.path / sha / "/".join(segs[4:])
        if not file.is_file():
            # X-Repo-Commit on a 404 lets huggingface_hub cache "this file does not exist at this commit".
            raise HubError(404, "Entry not found", "EntryNotFound", commit=sha)
        data = file.read_bytes()
        headers = {"X-Repo-Commit": sha, "ETag": f'"{git_blob_id(data)}"', "Content-Type": "application/octet-stream"}
        return 200, headers, data


def route_name(segs: list[str]) -> str:
    """What `HubServer.failures` and `.after` call a request: "create", "validate-yaml", "preupload", "commit",
    "branch", "discussions", "tree", "info" (repo info) or "resolve" (a file download)."""
    if segs[0] != "api":
        return "resolve"
    if len(segs) < 4 or segs[1] not in API_SEGMENTS:
        return "create" if segs[1:] == ["repos", "create"] else "/".join(segs[1:])
    return segs[4] if len(segs) > 4 and segs[4] != "revision" else "info"


def _json(obj, status: int = 200) -> tuple[int, dict, bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(obj).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the clients pool connections; needs Content-Length everywhere

    def _serve(self) -> None:
        hub: HubServer = self.server.hub  # type: ignore[attr-defined]
        hub.requests.append((self.command, self.path))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        auth = self.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
        try:
            status, headers, payload = hub.handle(self.command, url.path, query, body, token)
        except HubError as e:
            status, payload = e.status, json.dumps({"error": e.message, **e.body}).encode()
            # A header holds one line of printable text; the body keeps the message as it is.
            one_line = "".join(c for c in " ".join(e.message.splitlines()) if c.isprintable())
            headers = {"Content-Type": "application/json", "X-Error-Message": one_line}
            headers |= {"X-Error-Code": e.code} if e.code else {}
            headers |= {"X-Repo-Commit": e.commit} if e.commit else {}
            headers |= e.headers
        except Exception:
            # A server bug. Not a 500: huggingface_hub retries those with backoff, turning a bug into a slow test.
            hub.errors.append(traceback.format_exc())
            status, headers, payload = 400, {"X-Error-Message": "hub_server bug, see HubServer.errors"}, b""
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format, *args) -> None:  # keep test output clean; `HubServer.requests` has the log
        pass
