"""Plans built for tests as the API builds them: a :class:`ConversionRequest` made from options, with the scheme
object a test holds (a built-in one, or one made from kinds) given to every linear."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from eaglequant.conversion.options import ConversionOptions
from eaglequant.conversion.plan import ConversionPlan, build_plan
from eaglequant.conversion.request import ConversionRequest
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import Scheme


def plan_for(
    head: HeadDescription,
    scheme: Scheme,
    fmt: str,
    *,
    input_amax: dict[str, float] | None = None,
    **settings: Any,
) -> ConversionPlan:
    """The plan for ``head`` in ``scheme`` and the format named ``fmt``; ``settings``: other ConversionOptions fields
    (``engines``, ``exclude``, ``target_layers``, ...)."""
    options = ConversionOptions(format=fmt, **settings)
    request = replace(ConversionRequest.of(options, head.config), assignment=SchemeAssignment(scheme))
    return build_plan(head, request, input_amax=input_amax)
