"""The schemes a written checkpoint was converted with, thresholds included: as its report records them, else the
built-in schemes of the kinds its config.json declares."""

from __future__ import annotations

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import InputError
from eaglequant.common.findings import Finding
from eaglequant.kinds import KindPair
from eaglequant.layouts.head import HeadDescription
from eaglequant.record.report import REPORT_NAME, ConversionReport
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import Scheme, builtin_scheme_for


def checkpoint_schemes(
    checkpoint: Checkpoint,
    recorded: ConversionReport | None,
    written: tuple[ConversionReport, Scheme] | None = None,
    head: HeadDescription | None = None,
) -> tuple[SchemeAssignment, Finding | None]:
    """Each linear's scheme, thresholds included: as the conversion recorded them (``written``: as it has just
    written them), else the built-in schemes of the kinds config.json declares for it. ``head``: the written head
    (default: described from ``checkpoint``)."""
    from eaglequant.readback.explanation import read_written_config
    from eaglequant.readback.module_kinds import linear_kinds
    from eaglequant.readback.written_head import describe_written_head

    _, config = read_written_config(checkpoint)
    declared = linear_kinds(config, head or describe_written_head(checkpoint))
    recorded = recorded if written is None else written[0]
    recorded_own = {} if recorded is None else recorded.own_schemes
    main_kinds = _main_kinds(config.kinds, declared, recorded_own)
    if written is None:
        main, note = recorded_scheme(recorded, main_kinds)
    else:
        main, note = declared_as(written[1], main_kinds), None
    own = {}
    for module, kinds in declared.items():
        if kinds != main.kinds:
            text = recorded_own.get(module)
            own[module] = builtin_scheme_for(kinds) if text is None else declared_as(_parsed(text, module), kinds)
    return SchemeAssignment.per_module(main, own), note


def _main_kinds(config_kinds: KindPair, declared: dict[str, KindPair], recorded_own: dict[str, str]) -> KindPair:
    """The kinds of the linears a report gives no scheme of their own (those the main scheme must have been written
    as), where a per-module config declares one for them; else the config's main kinds."""
    kinds = {kinds for module, kinds in declared.items() if module not in recorded_own}
    return next(iter(kinds)) if len(kinds) == 1 else config_kinds


def recorded_scheme(recorded: ConversionReport | None, kinds: KindPair) -> tuple[Scheme, Finding | None]:
    """The scheme the conversion recorded (its thresholds included), or, for a checkpoint another tool wrote
    (no report), the built-in scheme of the same kinds, with a note saying so (``no-recorded-scheme``, about the
    built-in scheme)."""
    if recorded is None:
        fallback = builtin_scheme_for(kinds)
        text = f"no scheme recorded (not written by eaglequant): the thresholds of {fallback.name}"
        return fallback, Finding("no-recorded-scheme", fallback.name, text)
    return declared_as(_parsed(recorded.scheme_toml, None), kinds), None


def _parsed(text: str, module: str | None) -> Scheme:
    from eaglequant.common import toml
    from eaglequant.schemes.model import parse_scheme

    where = f"{REPORT_NAME} " + ("scheme_toml" if module is None else f"own_schemes.{module}")
    try:
        return parse_scheme(toml.loads(text), where)
    except toml.TOMLDecodeError as exc:
        raise InputError(f"{where} is not TOML ({exc})", hint="convert it again") from None


def declared_as(scheme: Scheme, kinds: KindPair) -> Scheme:
    """The recorded scheme as config.json declares it (weight-only when it was written without calibration)."""
    if kinds not in (scheme.kinds, scheme.without_calibration().kinds):
        raise InputError(
            f"{REPORT_NAME}: the recorded scheme {scheme.name} ({scheme.kinds}) is not what config.json declares "
            f"({kinds})",
            hint="the checkpoint was changed after conversion; convert it again",
        )
    return scheme if scheme.kinds == kinds else scheme.without_calibration()
