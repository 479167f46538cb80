"""The checks ``batch`` makes on every job of a job file before any job runs.

What can be known without reading a source is checked here, so a typo costs seconds, not a failed job hours
into a run: the job's name, its scheme, format and engines, whether the format stores the scheme and the
engines load it (for any head: refusals that only hold for MLA heads need the head's headers, read at the
job's turn), the shard size and the upload's repo id. Messages name the job file's keys, not CLI flags.
"""

from __future__ import annotations

import re
from typing import Any

from eaglequant.common.errors import EagleQuantError, InputError
from eaglequant.conversion.options import OPTION_NAMES, OPTION_SPECS, ConversionOptions

# A job name is a CI matrix value, an ``--only`` argument and part of a summary's file name: keep it plain.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
_FLAG = re.compile(r"--(scheme|format|engine) (\S+)")
_KEYS = {name: spec.job_key for name, spec in OPTION_SPECS.items()}
_PARAMETER = re.compile(r"\b(" + "|".join(OPTION_NAMES) + r")=(?=\S)")


def check_name(where: str, name: str) -> None:
    if not _NAME.match(name):
        raise InputError(
            f"{where}: name {name!r} is not a usable job name: letters, digits, '.', '_', '+', '-' only "
            "(it selects the job on the command line and in CI matrices)",
            hint='set name = "..." in the job (it defaults to the destination\'s directory name)',
        )


def conversion_options(where: str, settings: dict[str, Any]) -> ConversionOptions:
    """A job's :class:`ConversionOptions` (``settings``: its fields by name, paths already resolved), every error
    in the job file's words; then whether the format stores the scheme and the engines load it."""
    from eaglequant.engines.support import check_engines
    from eaglequant.formats import get_format
    from eaglequant.schemes.model import builtin_names_by_kinds

    try:
        options = ConversionOptions(**settings)
    except EagleQuantError as exc:
        hint = "paths are relative to the job file" if exc.message.endswith("no such file") else exc.hint
        raise InputError(f"{where}: {_as_keys(exc.message)}", hint=_as_keys(hint)) from exc
    scheme, fmt = options.resolved_scheme, get_format(options.format)
    if not fmt.supports(scheme):
        raise InputError(
            f"{where}: format = {fmt.name!r} cannot store scheme = {options.scheme!r}",
            hint=f"formats that can: {', '.join(_formats_storing(scheme)) or 'none'}",
        )
    try:  # "mha": what a targeted engine refuses for every head (an MLA head may be refused more at its turn)
        check_engines(scheme.kinds, scheme.name, fmt.name, list(options.engines), "mha", builtin_names_by_kinds())
    except InputError as exc:
        raise InputError(f"{where}: {exc.message}", hint=_as_keys(exc.hint)) from exc
    return options


def check_repo_id(where: str, repo_id: str) -> None:
    """``repo_id`` of ``[job.upload]``: ``org/name``, its branch given apart as ``revision``."""
    from eaglequant.hub.client import parse_repo_ref

    parsed = parse_repo_ref(repo_id)
    if parsed is None:
        raise InputError(f"{where}: repo_id = {repo_id!r} is not a Hub repo id", hint="write it as org/name")
    if parsed[1] is not None:
        raise InputError(
            f"{where}: repo_id = {repo_id!r} names a revision",
            hint=f'write repo_id = "{parsed[0]}" and revision = "{parsed[1]}" in [job.upload]',
        )


def _as_keys(text: str | None) -> str | None:
    """A message written for the library (``max_shard_size='5 gigs'``) or a hint for the command line (``use
    --format modelopt``) in the job file's words (``max_shard_size = '5 gigs'``, ``use format = "modelopt"``)."""
    if text is None:
        return None
    text = _PARAMETER.sub(lambda m: f"{_KEYS.get(m[1], m[1])} = ", text)
    return _FLAG.sub(lambda m: f'{"engines" if m[1] == "engine" else m[1]} = "{m[2].rstrip(",")}"', text)


def _formats_storing(scheme: Any) -> list[str]:
    from eaglequant.formats import FORMATS

    return [f.name for f in FORMATS.values() if f.supports(scheme)]
