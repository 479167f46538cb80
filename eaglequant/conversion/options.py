"""A conversion's options: one frozen type, its defaults declared once, every value checked once.

:func:`eaglequant.api.convert`, :func:`~eaglequant.api.inspect` and :func:`~eaglequant.api.manifest_key` take a
:class:`ConversionOptions` (or its fields as keyword arguments), the CLI's ``convert`` and ``inspect`` build one
from their flags, and ``batch`` from a job's keys. Errors name the parameter (``max_shard_size='lots'``); the CLI
says the flag instead (``--max-shard-size 'lots'``), ``batch`` the job file's key (``max_shard_size = 'lots'``).

Importing this module is cheap (no torch): the CLI declares its defaults from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant.common.errors import EagleQuantError, InputError, Param, given, suggested, words
from eaglequant.layouts.rules import compiled_rule

if TYPE_CHECKING:
    from eaglequant.engines import Engine
    from eaglequant.formats import Format
    from eaglequant.schemes.assignment import SchemeAssignment
    from eaglequant.schemes.model import Scheme

DEFAULT_SCHEME = "fp8-per-channel"
DEFAULT_FORMAT = "quark"
DEFAULT_ENGINES = ("vllm",)
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9  # the largest shard unless asked otherwise (convert, prune): transformers' 5 GB
DEFAULT_MAX_SHARD_SIZE = f"{DEFAULT_MAX_SHARD_BYTES // 10**9}GB"  # the same, as max_shard_size is written
DEFAULT_DEVICE = "cpu"

_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


LARGEST_MAX_SHARD_SIZE = 2**50  # 1 PiB, in bytes: no shard is larger; a max_shard_size past it is a typo (or inf)
MAX_WORKERS = 256
MAX_TARGET_LAYERS = 10_000


def parse_size(text: str | int) -> int:
    """``5GB``, ``500MB``, ``2GiB``, ``1048576`` -> bytes: at least one, at most :data:`LARGEST_MAX_SHARD_SIZE`."""
    if isinstance(text, int) and not isinstance(text, bool):
        if not 1 <= text <= LARGEST_MAX_SHARD_SIZE:
            raise InputError(
                words(given("max_shard_size", text), " is not a size"),
                hint=f"give a number of bytes from 1 to {LARGEST_MAX_SHARD_SIZE} (1 PiB)",
            )
        return text
    cleaned = str(text).strip().upper().replace(" ", "")
    number = cleaned.rstrip("KMGTIB")
    unit = cleaned[len(number) :]
    try:
        value = float(number)
    except ValueError:
        value = -1
    if unit not in _SIZE_UNITS or not math.isfinite(value) or value <= 0:
        raise InputError(words(given("max_shard_size", text), " is not a size"), hint="write e.g. 5GB, 500MB or 2GiB")
    size = value * _SIZE_UNITS[unit]
    if not 1 <= size <= LARGEST_MAX_SHARD_SIZE:
        raise InputError(
            words(given("max_shard_size", text), " is not a shard size"), hint="give one from 1 byte to 1 PiB, e.g. 5GB"
        )
    return int(size)


@dataclass(frozen=True)
class OptionSpec:
    """How each front end spells one option: the CLI's flags and help, and a batch job file's key and TOML type
    (``job_type`` None: not a job key)."""

    name: str
    flags: tuple[str, ...]
    help: str
    job_key: str
    job_type: type | None
    switch: bool  # a flag that takes no value (True when given)

    @property
    def flag(self) -> str:
        return self.flags[0]


def _option(
    default: Any, flags: tuple[str, ...], job_type: type | None, help: str, *, job_key: str | None = None
) -> Any:
    """A :class:`ConversionOptions` field declared once: its default, and how the CLI and job files spell it."""
    return field(default=default, metadata={"spec": (flags, help, job_key, job_type)})


@dataclass(frozen=True)
class ConversionOptions:
    """What a conversion is asked to do besides its source and destination.

    ``scheme``: a built-in scheme name or a .toml file; ``format``: the output format; ``engines``: those that must load
    the result as intended (``"all"``: every engine); ``exclude`` / ``quantize``: rules (a glob or ``re:<regex>`` over
    checkpoint names) that keep linears unquantized / quantize those kept by default (fc, lm_head); ``target_layers`` or
    ``target_config``: the target model's layer count, or its config.json to read it from; ``max_shard_size``: the
    largest output shard (``5GB``, or bytes); ``calib``: captured draft inputs for static activation scales;
    ``verify_output``: run verify before the output is moved into place; ``repo_id``: the Hub repo the card's serving
    lines name; ``workers``: threads that copy and quantize (default: one per core, at most 4); ``device``: where the
    quantization math runs (``cpu``, ``cuda``, ``cuda:N``).

    The last two change how fast, never what is written: they are not part of the manifest
    (:func:`eaglequant.conversion.manifest_options.manifest_options`).
    Values are normalised on construction (names to the registries' spelling, lists to tuples, sizes to bytes).
    """

    scheme: str = _option(
        DEFAULT_SCHEME, ("--scheme", "-s"), str, "Built-in scheme name (see `eaglequant schemes`) or a .toml file."
    )
    format: str = _option(
        DEFAULT_FORMAT,
        ("--format",),
        str,
        "Output format (`eaglequant schemes` lists each scheme's formats and engines).",
    )
    engines: tuple[str, ...] = _option(
        DEFAULT_ENGINES,
        ("--engine", "-e"),
        list,
        "Engine that must load the result as intended (`eaglequant schemes`; all: every engine; "
        "vllm==0.33.0 picks a release). Repeatable.",
    )
    scheme_for: tuple[str, ...] = _option(
        (),
        ("--scheme-for",),
        list,
        "PATTERN=SCHEME: matching linears (syntax as --exclude, or inside their layer) in a scheme of their "
        "own, e.g. lm_head=nvfp4 or 'mlp.*=nvfp4'; the first match decides. Repeatable.",
    )
    exclude: tuple[str, ...] = _option(
        (),
        ("--exclude", "-x"),
        list,
        "Keep matching linears unquantized: a glob or 're:<regex>' over names as `inspect` shows them. Repeatable.",
    )
    quantize: tuple[str, ...] = _option(
        (),
        ("--quantize",),
        list,
        "Quantize matching linears kept by default (fc, lm_head); syntax as --exclude. Refused where an engine "
        "runs them unquantized. Repeatable.",
    )
    target_layers: int | None = _option(
        None,
        ("--target-layers",),
        int,
        "The target model's layer count (vLLM numbers the draft's layers after it). When unknown, exclusion rules "
        "are written to work for any count.",
    )
    target_config: Path | None = _option(
        None,
        ("--target-config",),
        str,
        "The target model's config.json (or its directory): its layer count and context length.",
    )
    match_target_context: bool = _option(
        False,
        ("--match-context",),
        bool,
        "Raise the draft's max_position_embeddings to the target's context (for vLLM 0.33; needs --target-config).",
    )
    max_shard_size: str | int = _option(
        DEFAULT_MAX_SHARD_SIZE, ("--max-shard-size",), str, "Largest output shard, e.g. 5GB."
    )
    calib: Path | None = _option(
        None,
        ("--calib",),
        str,
        "Captured draft inputs (.safetensors) to calibrate nvfp4's static activation scales (W4A4); without it "
        "nvfp4 is written W4A16.",
    )
    verify_output: bool = _option(
        False,
        ("--verify",),
        bool,
        "Then run `verify` against SRC and store eaglequant_verify.json in DST.",
        job_key="verify",
    )
    repo_id: str | None = _option(
        None,
        ("--repo-id",),
        None,  # a job's repo_id is its [job.upload]'s
        "Hub repo the result will be uploaded to: the card's serving lines name the draft by it (default: DST).",
    )
    workers: int | None = _option(
        None,
        ("--workers",),
        None,  # the runner's, not the job's
        "Threads that copy and quantize (default: one per core, at most 4); the same bytes whatever the number.",
    )
    device: str = _option(
        DEFAULT_DEVICE,
        ("--device",),
        None,  # the runner's, not the job's
        "Where the quantization math runs: cpu or cuda (same bytes).",
    )
    # Derived once, on construction:
    max_shard_bytes: int = field(init=False, repr=False)
    resolved_scheme: Scheme = field(init=False, repr=False, compare=False)
    assignment: SchemeAssignment = field(init=False, repr=False, compare=False)  # the scheme, with --scheme-for's
    resolved_format: Format = field(init=False, repr=False, compare=False)
    resolved_engines: tuple[Engine, ...] = field(init=False, repr=False, compare=False)  # "all": every release

    def __post_init__(self) -> None:
        from eaglequant.conversion.devices import check_device_name
        from eaglequant.engines import expanded_engines, get_engine
        from eaglequant.formats import get_format
        from eaglequant.hub.client import check_repo_id
        from eaglequant.schemes.model import load_scheme

        scheme = str(self.scheme) if isinstance(self.scheme, Path) else _text("scheme", self.scheme)
        _set(self, "scheme", scheme)
        _set(self, "resolved_scheme", _named("scheme", scheme, load_scheme))
        _set(self, "scheme_for", _rules("scheme_for", self.scheme_for))
        _set(self, "assignment", _assignment(self.resolved_scheme, self.scheme_for))
        _set(self, "resolved_format", _named("format", _text("format", self.format), get_format))
        _set(self, "format", self.resolved_format.name)
        engines = _rules("engines", self.engines)
        engines = expanded_engines(engines)
        _set(self, "resolved_engines", tuple(dict.fromkeys(_named("engines", name, get_engine) for name in engines)))
        _set(self, "engines", tuple(engine.key for engine in self.resolved_engines))
        _set(self, "exclude", _patterns("exclude", self.exclude))
        _set(self, "quantize", _patterns("quantize", self.quantize))
        _set(self, "target_layers", _count("target_layers", self.target_layers, minimum=1, maximum=MAX_TARGET_LAYERS))
        _set(self, "target_config", _existing("target_config", self.target_config))
        _set(self, "max_shard_bytes", parse_size(self.max_shard_size))
        _set(self, "calib", _existing("calib", self.calib))
        if self.calib is not None and not self.assignment.needs_calibration:
            raise InputError(
                words(
                    given("calib", str(self.calib)),
                    f" was given, but scheme {scheme!r} has no calibrated activation scale",
                ),
                hint=words(
                    "leave ", Param("calib"), " out, or use a scheme whose activations have global_scale = true (nvfp4)"
                ),
            )
        if not isinstance(self.verify_output, bool):
            raise InputError(words(Param("verify_output"), f" must be True or False, not {self.verify_output!r}"))
        if self.repo_id is not None:
            _named("repo_id", _text("repo_id", self.repo_id), check_repo_id)
        _set(self, "workers", _count("workers", self.workers, minimum=1, maximum=MAX_WORKERS))
        check_device_name(_text("device", self.device))

    @classmethod
    def build(cls, options: ConversionOptions | None = None, **settings: Any) -> ConversionOptions:
        """``options`` (default: the defaults) with ``settings`` (any of its fields by name) changed."""
        unknown = sorted(set(settings) - {f.name for f in fields(cls) if f.init})
        if unknown:
            raise TypeError(f"unexpected option {unknown[0]!r} (options: {', '.join(OPTION_NAMES)})")
        if options is None:
            return cls(**settings)
        return replace(options, **settings) if settings else options


OPTION_NAMES = tuple(f.name for f in fields(ConversionOptions) if f.init)
OPTION_SPECS = {
    f.name: OptionSpec(f.name, flags, help, job_key or f.name, job_type, isinstance(f.default, bool))
    for f in fields(ConversionOptions)
    if f.init
    for flags, help, job_key, job_type in [f.metadata["spec"]]
}


def _set(options: ConversionOptions, name: str, value: Any) -> None:
    object.__setattr__(options, name, value)  # the dataclass is frozen: normalised once, here


def _named(parameter: str, value: str, check: Any) -> Any:
    """``check(value)``, its error restated to name ``parameter`` (same error type, same hint)."""
    try:
        return check(value)
    except EagleQuantError as exc:
        raise type(exc)(words(given(parameter, value), ": ", *exc.words), hint=exc.hint_words) from exc


def _text(parameter: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(words(Param(parameter), f" must be a non-empty string, not {value!r}"))
    return value


def _rules(parameter: str, values: Any) -> tuple[str, ...]:
    if isinstance(values, str) or not all(isinstance(v, str) and v for v in values):
        raise InputError(words(Param(parameter), f" must be a list of non-empty strings, not {values!r}"))
    return tuple(values)


def _assignment(main: Scheme, entries: tuple[str, ...]) -> SchemeAssignment:
    """``PATTERN=SCHEME`` entries (``lm_head=nvfp4``, ``mlp.*=nvfp4``) as rules over ``main``, in order; a pattern
    given twice is refused, a ``re:`` pattern must compile (matching happens when the plan is built)."""
    from eaglequant.schemes.assignment import SchemeAssignment, SchemeRule
    from eaglequant.schemes.model import load_scheme

    rules: dict[str, SchemeRule] = {}
    for entry in entries:
        pattern, _, name = entry.rpartition("=")
        if not pattern or not name:
            raise InputError(
                words(given("scheme_for", entry), ": not PATTERN=SCHEME"),
                hint=words(
                    "e.g. ", suggested("scheme_for", "lm_head=nvfp4"), "; the other linears take ", Param("scheme")
                ),
            )
        if pattern in rules:
            raise InputError(words(given("scheme_for", entry), f": {pattern} is given a scheme twice"))
        compiled_rule(pattern, "scheme_for")
        rules[pattern] = SchemeRule(pattern, _named("scheme_for", name, load_scheme))
    return SchemeAssignment(main, tuple(rules.values()))


def _patterns(parameter: str, rules: Any) -> tuple[str, ...]:
    """Rules as given; a ``re:`` rule must compile (matching happens when the plan is built)."""
    checked = _rules(parameter, rules)
    for rule in checked:
        compiled_rule(rule, parameter)
    return checked


def _count(parameter: str, value: Any, *, minimum: int, maximum: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(words(Param(parameter), f" must be an integer, not {value!r}"))
    if value < minimum:
        raise InputError(words(Param(parameter), f" must be >= {minimum}, not {value}"))
    if value > maximum:
        raise InputError(words(Param(parameter), f" must be <= {maximum}, not {value}"))
    return value


def _existing(parameter: str, value: str | Path | None) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    if not path.exists():
        raise InputError(words(given(parameter, str(value)), ": no such file"))
    return path
