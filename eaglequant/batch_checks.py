"""The checks ``batch`` makes on every job of a job file before any job runs.

What can be known without reading a source is checked here, so a typo costs seconds, not a failed job hours
into a run: the job's name, its scheme, format and engines, whether the format stores the scheme and the
engines load it (for any head: refusals that only hold for MLA heads need the head's headers, read at the
job's turn), the shard size and the upload's repo id. Messages name the job file's keys, not CLI flags.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from eaglequant.errors import EagleQuantError, InputError

# A job name is a CI matrix value, an ``--only`` argument and part of a summary's file name: keep it plain.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
_FLAG = re.compile(r"--(scheme|format|engine) (\S+)")


def check_name(where: str, name: str) -> None:
    if not _NAME.match(name):
        raise InputError(
            f"{where}: name {name!r} is not a usable job name: letters, digits, '.', '_', '+', '-' only "
            "(it selects the job on the command line and in CI matrices)",
            hint='set name = "..." in the job (it defaults to the destination\'s directory name)',
        )


def check_convert_options(where: str, options: dict[str, Any]) -> None:
    """``options``: a job's keyword arguments of :func:`eaglequant.api.convert`, paths already resolved."""
    from eaglequant.api import DEFAULT_ENGINES, DEFAULT_FORMAT, DEFAULT_SCHEME
    from eaglequant.engines import get_engine
    from eaglequant.engines.support import check_engines
    from eaglequant.formats import get_format
    from eaglequant.schemes.model import builtin_names_by_kinds, load_scheme

    scheme_name = options.get("scheme", DEFAULT_SCHEME)
    scheme = _keyed(where, "scheme", scheme_name, load_scheme)
    fmt = _keyed(where, "format", options.get("format", DEFAULT_FORMAT), get_format)
    engines = list(dict.fromkeys(options.get("engines", DEFAULT_ENGINES)))
    for engine in engines:
        _keyed(where, "engines", engine, get_engine)
    if not fmt.supports(scheme):
        raise InputError(
            f"{where}: format = {fmt.name!r} cannot store scheme = {scheme_name!r}",
            hint=f"formats that can: {', '.join(_formats_storing(scheme)) or 'none'}",
        )
    try:  # "mha": what a targeted engine refuses for every head (an MLA head may be refused more at its turn)
        check_engines(scheme.kinds, scheme.name, fmt.name, engines, "mha", builtin_names_by_kinds())
    except InputError as exc:
        raise InputError(f"{where}: {exc.message}", hint=_as_keys(exc.hint)) from exc
    _check_options(where, options)


def _check_options(where: str, options: dict[str, Any]) -> None:
    from eaglequant.pipeline import parse_size

    if options.get("target_layers", 0) < 0:
        raise InputError(f"{where}: target_layers must be >= 0, not {options['target_layers']}")
    if "max_shard_size" in options:
        try:
            parse_size(options["max_shard_size"])
        except InputError as exc:
            raise InputError(
                f"{where}: max_shard_size = {options['max_shard_size']!r} is not a size", hint=exc.hint
            ) from exc
    for key in ("target_config", "calib"):
        if key in options and not Path(options[key]).exists():
            raise InputError(
                f"{where}: {key} = {options[key]!r}: no such file", hint="paths are relative to the job file"
            )


def check_repo_id(where: str, repo_id: str) -> None:
    """``repo_id`` of ``[job.upload]``: ``org/name``, its branch given apart as ``revision``."""
    from eaglequant.hub import parse_repo_ref

    parsed = parse_repo_ref(repo_id)
    if parsed is None:
        raise InputError(f"{where}: repo_id = {repo_id!r} is not a Hub repo id", hint="write it as org/name")
    if parsed[1] is not None:
        raise InputError(
            f"{where}: repo_id = {repo_id!r} names a revision",
            hint=f'write repo_id = "{parsed[0]}" and revision = "{parsed[1]}" in [job.upload]',
        )


def _keyed(where: str, key: str, value: str, check: Any) -> Any:
    """``check(value)``, its error restated for the job file's ``key``."""
    try:
        return check(value)
    except EagleQuantError as exc:
        raise InputError(f"{where}: {key} = {value!r}: {exc.message}", hint=_as_keys(exc.hint)) from exc


def _as_keys(hint: str | None) -> str | None:
    """A hint written for the command line (``use --format modelopt``) in the job file's words."""
    if hint is None:
        return None
    return _FLAG.sub(lambda m: f'{"engines" if m[1] == "engine" else m[1]} = "{m[2].rstrip(",")}"', hint)


def _formats_storing(scheme: Any) -> list[str]:
    from eaglequant.formats import FORMATS

    return [f.name for f in FORMATS.values() if f.supports(scheme)]
