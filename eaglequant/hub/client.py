"""The Hugging Face Hub: resolving a ``org/name[@revision]`` source to a local snapshot, and uploading a
quantized head.

Everything goes through ``huggingface_hub``, so ``HF_HOME``, ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``,
``HF_ENDPOINT`` and ``HF_TOKEN`` (or a saved login) apply as they do for every Hub tool. eaglequant never
reads, prints or stores the token itself; error messages are scrubbed of it in case a server echoes it.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglequant.common.errors import InputError, Param, Words, given, words
from eaglequant.common.json_fields import JsonRecord

# ``org/name`` as the Hub spells repo ids (96 characters at most), optionally ``@revision``.
_REPO_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96})(?:@(?P<revision>[\w./-]+))?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256_BLOB = re.compile(r"^[0-9a-f]{64}$")

# Names a Hub repo even where a local path of the same name could be meant (huggingface_hub's own URL scheme).
HUB_PREFIX = "hf://"
# What a conversion reads or carries over besides the weights; weights are chosen per repo below.
SIDE_FILE_PATTERNS = ("*.json", "README.md", "LICENSE*", "NOTICE*")
# Never uploaded: huggingface_hub's resumable-upload state and eaglequant's own bookkeeping.
UPLOAD_IGNORE = (".cache/*", ".cache/**", ".eaglequant/*", ".eaglequant/**", ".git/*", ".git/**")


class HubError(InputError):
    """The Hub refused or could not be reached; the message says what to do. Exit code 2."""


@dataclass(frozen=True)
class SourceRef(JsonRecord):
    """Where a checkpoint came from: a local directory, possibly a Hub snapshot of ``repo_id``."""

    path: Path
    repo_id: str | None = None
    revision: str | None = None
    commit: str | None = None

    @property
    def label(self) -> str:
        if self.repo_id is None:
            return str(self.path)
        return self.repo_id if self.revision in (None, "main") else f"{self.repo_id}@{self.revision}"


def parse_repo_ref(text: str) -> tuple[str, str | None] | None:
    """``org/name`` or ``org/name@revision`` -> (repo_id, revision); None when ``text`` is not a repo id."""
    match = _REPO_ID.match(text)
    if match is None or text.startswith((".", "/", "~")) or ".." in text:
        return None
    return match["repo"], match["revision"]


def is_hub_reference(src: str | Path) -> bool:
    """Whether ``src`` names a Hub repo: ``hf://org/name[@revision]`` always, ``org/name[@revision]`` when no local
    path of that name exists (a local directory always wins)."""
    return _hub_reference(src) is not None


def _hub_reference(src: str | Path) -> tuple[str, str | None] | None:
    if not isinstance(src, str):
        return None
    if src.startswith(HUB_PREFIX):
        parsed = parse_repo_ref(src.removeprefix(HUB_PREFIX))
        if parsed is None:
            raise InputError(f"{src}: not a Hub repo id", hint=f"write {HUB_PREFIX}org/name[@revision]")
        return parsed
    return None if Path(src).exists() else parse_repo_ref(src)


def _hub_repo(src: str, param: str | None = None) -> tuple[str, str | None, bool]:
    """(repo_id, revision, typed_as_path) of a Hub source. ``org/name`` typed where a relative path's parent exists
    (``fixtures/nope``: ``fixtures/`` is here) is taken as a mistyped path: no such directory, and how to say Hub."""
    parsed = _hub_reference(src)
    assert parsed is not None
    typed_as_path = not src.startswith(HUB_PREFIX)
    parent = Path(parsed[0]).parent
    if typed_as_path and parent.is_dir():
        raise InputError(
            words(*_named(src, param), f": no such directory ({parent}/ exists, but holds no {Path(parsed[0]).name})"),
            hint=f"check the path; to read the Hub repo {parsed[0]} instead, write {HUB_PREFIX}{src}",
        )
    return parsed[0], parsed[1], typed_as_path


def _named(src: str | Path, param: str | None) -> Words:
    """How a message names a source: as it was typed (SRC), or as the parameter that gave it (``source='x'``)."""
    return (str(src),) if param is None else (given(param, str(src)),)


def resolve_source(src: str | Path, param: str | None = None) -> SourceRef:
    """A local directory as is (recognising Hub cache snapshots), or a Hub repo id downloaded with
    ``snapshot_download`` restricted to the files a conversion needs. ``param``: the parameter that gave ``src``,
    named in errors (default: it is SRC)."""
    if not is_hub_reference(src):
        path = Path(src)
        if not path.exists() and not path.is_symlink():
            what = "SRC must be" if param is None else "pass"
            raise InputError(
                words(*_named(src, param), ": does not exist"),
                hint=f"{what} a checkpoint directory, or a Hub repo id org/name[@revision]",
            )
        return _local_source(path)
    repo_id, revision, typed_as_path = _hub_repo(str(src), param)
    return _download(repo_id, revision, typed_as_path)


def _local_source(path: Path) -> SourceRef:
    """Recognise ``.../models--org--name/snapshots/<commit>`` so the card can name the base model."""
    real = path.resolve()
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        parts = real.parent.parent.name.split("--")[1:]
        if len(parts) == 2:
            return SourceRef(path, f"{parts[0]}/{parts[1]}", None, real.name)
    return SourceRef(path)


def _download(repo_id: str, revision: str | None, typed_as_path: bool = False) -> SourceRef:
    from huggingface_hub import constants, snapshot_download

    label = repo_id if revision is None else f"{repo_id}@{revision}"
    with _hub_errors(label, typed_as_path=typed_as_path):
        patterns = _needed_patterns(repo_id, revision)
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=patterns)
    path = Path(folder)
    if not (path / "config.json").is_file():
        where = "the local Hugging Face cache" if constants.HF_HUB_OFFLINE else "the repository"
        raise HubError(f"{label}: {where} has no config.json", hint="is this an EAGLE-3 draft head repository?")
    return SourceRef(path, repo_id, revision or "main", path.name if _COMMIT.match(path.name) else None)


def _needed_patterns(repo_id: str, revision: str | None) -> list[str]:
    """The side files plus the one weight set the reader will use (safetensors before .bin), chosen from
    the repository's file list, or offline from the cached snapshot's."""
    from huggingface_hub import HfApi, constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE:
        cached = try_to_load_from_cache(repo_id, "config.json", revision=revision)
        names = [p.name for p in Path(cached).parent.iterdir()] if isinstance(cached, str) else []
    else:
        names = [s.rfilename for s in HfApi().model_info(repo_id, revision=revision).siblings or []]
    return needed_patterns(names)


def needed_patterns(names: list[str]) -> list[str]:
    return [*SIDE_FILE_PATTERNS, *weight_patterns(names)]


def weight_patterns(names: list[str]) -> list[str]:
    """Which weight files to fetch, in the order :meth:`Checkpoint.open` looks for them."""
    top = [n for n in names if "/" not in n]
    if "model.safetensors.index.json" in top:
        return ["*.safetensors"]
    if "model.safetensors" in top:
        return ["model.safetensors"]
    safetensors = [n for n in top if n.endswith(".safetensors")]
    if safetensors:
        return safetensors
    return ["pytorch_model*.bin"]


def hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


# -- reading a repo without its weights ------------------------------------------------------------


@dataclass(frozen=True)
class RepoListing:
    """A repo's files at one commit: for each, its size and, when stored with LFS (weights), its SHA-256."""

    repo_id: str
    commit: str
    lfs_sha256: dict[str, str | None]  # path -> the LFS object's SHA-256 (None: a regular git file)

    def fetch(self, name: str) -> Path:
        """A small (non-LFS) file of this commit, downloaded into the Hugging Face cache."""
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(self.repo_id, name, revision=self.commit))

    def sha256(self, name: str) -> str:
        """The SHA-256 of ``name``: from the listing for an LFS file (never downloaded), else of its bytes."""
        from eaglequant.checkpoint.hashing import file_sha256

        return self.lfs_sha256[name] or file_sha256(self.fetch(name))


def repo_listing(repo_id: str, revision: str | None) -> RepoListing | None:
    """The files of ``repo_id`` at ``revision`` in one request (``model_info`` with ``files_metadata``), no
    file content; None when the repo or the revision does not exist (or the token cannot see it)."""
    from huggingface_hub import HfApi, errors

    label = repo_id if revision is None else f"{repo_id}@{revision}"
    with _hub_errors(label):
        try:
            info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
        except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError):
            return None
    files = {s.rfilename: (s.lfs.sha256 if s.lfs else None) for s in info.siblings or []}
    assert info.sha is not None
    return RepoListing(repo_id, info.sha, files)


def remote_source_digests(src: str) -> tuple[dict[str, str], dict[str, Any]]:
    """For a Hub source: what :func:`eaglequant.record.manifest.source_digests` gives once :func:`resolve_source` has
    downloaded it (the SHA-256 of every file a conversion fetches), and its config.json, without downloading
    the weights: their SHA-256 is in the listing; only the small side files are fetched."""
    from huggingface_hub.utils import filter_repo_objects

    from eaglequant.checkpoint.reader import load_json_object

    repo_id, revision, typed_as_path = _hub_repo(src)
    with _hub_errors(src.removeprefix(HUB_PREFIX), typed_as_path=typed_as_path):
        listing = repo_listing(repo_id, revision)
        if listing is None:
            raise HubError(f"{src}: repository or revision not found, or your token cannot access it")
        names = sorted(listing.lfs_sha256)
        needed = list(filter_repo_objects(names, allow_patterns=needed_patterns(names)))
        if "config.json" not in needed:
            raise HubError(f"{src}: the repository has no config.json", hint="is this an EAGLE-3 draft head?")
        digests = {name: listing.sha256(name) for name in needed}
        config = load_json_object(listing.fetch("config.json"), "config.json")
    return digests, config


def remote_safetensors_headers(
    src: str, with_headers: bool = True
) -> tuple[dict[str, Any], dict[str, Any], dict[str, tuple[str, tuple[int, ...], int]]]:
    """A Hub repo's config.json, its side quantization config (``hf_quant_config.json``, by name, where the repo has
    one), and each tensor's dtype, shape and bytes read from its safetensors headers (``get_safetensors_metadata``:
    a ranged request per file) without downloading the weights ({} where the repo holds no safetensors, or
    ``with_headers`` is False)."""
    from huggingface_hub import HfApi, errors, hf_hub_download

    from eaglequant.checkpoint.reader import load_json_object

    repo_id, revision, typed_as_path = _hub_repo(src)
    side = "hf_quant_config.json"
    with _hub_errors(src.removeprefix(HUB_PREFIX), typed_as_path=typed_as_path):
        api = HfApi()
        config = load_json_object(Path(hf_hub_download(repo_id, "config.json", revision=revision)), "config.json")
        extra: dict[str, Any] = {}
        if api.file_exists(repo_id, side, revision=revision):
            extra[side] = load_json_object(Path(hf_hub_download(repo_id, side, revision=revision)), side)
        files = {}
        with suppress(errors.NotASafetensorsRepoError):
            files = api.get_safetensors_metadata(repo_id, revision=revision).files_metadata if with_headers else {}
    tensors = {
        name: (str(info.dtype), tuple(info.shape), info.data_offsets[1] - info.data_offsets[0])
        for file in files.values()
        for name, info in file.tensors.items()
    }
    return config, extra, tensors


@contextmanager
def _hub_errors(label: str, *, uploading: bool = False, typed_as_path: bool = False) -> Iterator[None]:
    """huggingface_hub's exceptions -> one actionable line (exit 2), with the token scrubbed. ``uploading``:
    the cache cannot stand in for the Hub, so the hints never suggest HF_HUB_OFFLINE. ``typed_as_path``: the
    repo id was written as a local path could be (``org/name``, no ``hf://``), so a repo the Hub cannot give
    says that no local directory of that name exists either."""
    from huggingface_hub import constants, errors

    who = f"{label}: no local directory of that name, and" if typed_as_path else f"{label}:"
    check, or_path = ("check the path, or", "check the path, or ") if typed_as_path else ("check", "")
    try:
        yield
    except errors.OfflineModeIsEnabled as exc:
        raise HubError(f"{label}: the Hub is needed but HF_HUB_OFFLINE is set", hint="unset HF_HUB_OFFLINE") from exc
    except (errors.RepositoryNotFoundError, errors.GatedRepoError) as exc:
        raise HubError(
            f"{who} repository not found, or your token cannot access it",
            hint=f"{check} the id, and set HF_TOKEN to a token with access",
        ) from exc
    except errors.RevisionNotFoundError as exc:
        raise HubError(f"{label}: no such revision", hint="check the branch, tag or commit after '@'") from exc
    except errors.IncompleteSnapshotError as exc:
        raise HubError(
            f"{label}: the cached snapshot lacks files the conversion needs ({_scrub(str(exc)).split('(', 1)[-1]}",
            hint="download it again with network access",
        ) from exc
    except errors.LocalEntryNotFoundError as exc:
        cache = constants.HF_HUB_CACHE
        if constants.HF_HUB_OFFLINE:
            raise HubError(
                f"{who} not in the local Hugging Face cache ({cache}) and HF_HUB_OFFLINE is set",
                hint=f"{or_path}download it once with network access ({_download_command(label)}), or unset it",
            ) from exc
        raise HubError(
            f"{who} the Hub ({constants.ENDPOINT}) cannot be reached and the cache ({cache}) does not have it",
            hint=f"{check} the network (and HF_ENDPOINT), then run it again",
        ) from exc
    except errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise HubError(
            f"{label}: the Hub answered HTTP {status}: {_scrub(str(exc).splitlines()[0])}",
            hint="for 401/403 check that HF_TOKEN has write access",
        ) from exc
    except _transport_errors() as exc:
        hint = f"{check} the network (and HF_ENDPOINT), then run it again"
        if uploading:
            hint = "check the network and run it again: the upload resumes where it stopped"
        raise HubError(f"{who} cannot reach the Hub ({constants.ENDPOINT}): {_scrub(str(exc))}", hint=hint) from exc


# The HTTP clients huggingface_hub is built on: httpx under 1.x, httpx2 under 2.x. Their errors (a refused
# connection, a timeout) are not OSError, and neither derives from the other's.
HTTP_CLIENTS = ("httpx", "httpx2")


def _transport_errors() -> tuple[type[BaseException], ...]:
    """OSError and the base error of each HTTP client already imported. Evaluated when an error is being
    matched, so a client that raised it is imported by then; one that is not installed is never imported."""
    classes: list[type[BaseException]] = [OSError]
    for name in HTTP_CLIENTS:
        base = getattr(sys.modules.get(name), "HTTPError", None)
        if isinstance(base, type) and issubclass(base, BaseException):
            classes.append(base)
    return tuple(classes)


def _download_command(label: str) -> str:
    """``hf download org/name --revision r`` for ``org/name@r``."""
    name, _, revision = label.partition("@")
    return f"hf download {name}" + (f" --revision {revision}" if revision else "")


def _scrub(text: str) -> str:
    from huggingface_hub import get_token

    token = get_token()
    return text.replace(token, "***") if token else text


# -- upload ---------------------------------------------------------------------------------------


def upload_files(dst: Path) -> dict[str, int]:
    """The files of ``dst`` that go to the Hub, with their sizes (bookkeeping directories left out)."""
    files = {}
    for path in sorted(dst.rglob("*")):
        relative = path.relative_to(dst).as_posix()
        if path.is_file() and not any(fnmatch.fnmatch(relative, p) for p in UPLOAD_IGNORE):
            files[relative] = path.stat().st_size
    return files


def check_repo_id(repo_id: str) -> None:
    parsed = parse_repo_ref(repo_id)
    if parsed is None or parsed[1] is not None:
        branch = words("write it as org/name (use ", Param("revision"), " for a branch)")
        raise InputError(f"{repo_id!r} is not a Hub repo id", hint=branch)


def upload_folder(folder: Path, repo_id: str, *, revision: str, private: bool, message: str) -> tuple[str, str]:
    """Create the repo (and branch) if needed and upload ``folder``; the commit's URL and id.

    ``upload_folder`` is huggingface_hub's resumable path for big folders (since 1.x, which deprecated
    ``upload_large_folder`` in its favour): with hf_xet it uploads deduplicated chunks, splits very large
    folders into several commits, and a rerun resumes where an interrupted one stopped.
    """
    from huggingface_hub import HfApi

    api = HfApi()
    with _hub_errors(repo_id, uploading=True):
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        if revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            revision=revision,
            commit_message=message,
            ignore_patterns=list(UPLOAD_IGNORE),
        )
    return info.commit_url, info.oid


def blob_sha256(path: Path) -> str | None:
    """The SHA-256 of a Hub cache file, for free: LFS blobs are named by it. None for other files."""
    if not path.is_symlink():
        return None
    target = Path(os.path.realpath(path))
    if target.parent.name == "blobs" and _SHA256_BLOB.match(target.name):
        return target.name
    return None
