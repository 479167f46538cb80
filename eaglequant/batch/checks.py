"""The checks ``batch`` makes on every job of a job file before any job runs.

What can be known without reading a source is checked here, so a typo costs seconds, not a failed job hours
into a run: the job's name, its scheme, format and engines, whether the format stores the scheme and the
engines load it (for any head: refusals that only hold for MLA heads need the head's headers, read at the
job's turn), the shard size and the upload's repo id. Messages name the job file's keys, not CLI flags.
"""

from __future__ import annotations

import re
from typing import Any

from eaglequant.common.errors import EagleQuantError, InputError, Param, Style, worded
from eaglequant.conversion.options import OPTION_SPECS, ConversionOptions
from eaglequant.layouts.head import Attention

# A job name is a CI matrix value, an ``--only`` argument and part of a summary's file name: keep it plain.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


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
    from eaglequant.formats import FORMATS
    from eaglequant.schemes.model import builtin_names_by_kinds

    try:
        options = ConversionOptions(**settings)
    except EagleQuantError as exc:
        hint = "paths are relative to the job file" if exc.message.endswith("no such file") else exc.hint_words
        raise InputError(f"{where}: {worded(exc.words, job_wording)}", hint=worded(hint, job_wording)) from exc
    scheme, fmt = options.resolved_scheme, options.resolved_format
    engines = list(options.resolved_engines)
    try:  # MHA: what a targeted engine refuses for every head (an MLA head may be refused more at its turn)
        fmt.check_stores(scheme, FORMATS.values())
        check_engines(scheme.kinds, scheme.name, fmt, engines, Attention.MHA, builtin_names_by_kinds())
    except InputError as exc:
        raise InputError(f"{where}: {exc.message}", hint=worded(exc.hint_words, job_wording)) from exc
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


def job_wording(param: Param) -> str:
    """A parameter as a job file says it: ``max_shard_size = '5 gigs'``, ``format = "modelopt"``, ``verify``."""
    spec = OPTION_SPECS.get(param.name)
    key = param.name if spec is None else spec.job_key
    if param.style is None:
        return key
    if param.style is Style.SWITCH:
        return f"{key} = true"
    return f"{key} = {param.value!r}" if param.style is Style.GIVEN else f'{key} = "{param.value}"'
