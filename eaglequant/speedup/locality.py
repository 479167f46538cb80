"""The routing locality the speed-up model prices a MoE verification with: stated (a number, default
:data:`~.model.ROUTING_LOCALITY`), fitted to a measurement (``fit``, :func:`~.model.calibrate_locality`), or
measured from the target's own router by ``capture`` (a capture file: :mod:`eaglequant.capturing.routing`).

A measurement is the target's only where it was made on the same routing: the experts E and the k a token is routed
to are checked against the target priced (:func:`check_measured_on`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from eaglequant.common.errors import InputError, given, words
from eaglequant.draft.capture_routing import RoutingLocality
from eaglequant.speedup.model import ROUTING_LOCALITY, Timing
from eaglequant.speedup.target_step import TargetWeights


def given_locality(text: str | None) -> tuple[float, bool, RoutingLocality | None]:
    """``--routing-locality`` as given: (rho, fitted, measured). None: the stated default; a number from 0 to 1:
    stated; ``fit``: fitted to the measurement; a capture file: measured by capture from the target's router."""
    if text is None:
        return ROUTING_LOCALITY, False, None
    if text == "fit":
        return ROUTING_LOCALITY, True, None
    try:
        rho = float(text)
    except ValueError:
        rho = math.nan
    if 0.0 <= rho <= 1.0:
        return rho, False, None
    if text.endswith(".safetensors") or Path(text).is_file():
        from eaglequant.capturing.routing import measured_locality

        measured = measured_locality(Path(text))
        return measured.estimate, False, measured
    raise InputError(
        words(given("routing_locality", text), ": not from 0 to 1, nor 'fit', nor a capture file"),
        hint="e.g. 0.5, or measure it: eaglequant capture --target T --draft DRAFT CAPTURE.safetensors",
    )


def check_measured_on(measured: RoutingLocality, target: TargetWeights) -> None:
    """Refuse a routing locality measured on another routing than ``target``'s (its E experts, k a token), in one
    line naming both."""
    if (measured.experts, measured.experts_per_token) != (target.experts, target.experts_per_token):
        routes = f"routes to {target.experts_per_token} of {target.experts}" if target.experts else "is dense"
        raise InputError(
            f"routing locality: {measured.measured_by} measured it on a target routing to {measured.experts_per_token} "
            f"of {measured.experts} experts; {target.name} {routes}",
            hint="capture the target priced (eaglequant capture --target T ...), or state it: --routing-locality 0.5",
        )


def with_measured(timing: Timing, measured: RoutingLocality | None) -> Timing:
    """``timing`` with the routing locality ``measured`` (its estimate, and the measurement printed with it)."""
    if measured is None:
        return timing
    return replace(timing, routing_locality=measured.estimate, routing_measured=measured)


def captured_locality(capture: Path, target: TargetWeights) -> RoutingLocality | None:
    """The routing locality the capture at ``capture`` measured, where it measured one on ``target``'s routing
    (None: it records no routing, or another target's: the stated default stands)."""
    from eaglequant.capturing.routing import routing_locality
    from eaglequant.draft.capture_routing import has_routing, read_counts

    if not (capture.is_file() and has_routing(capture)):
        return None
    measured = routing_locality(read_counts(capture, "inputs"), f"capture ({capture.name})")
    same = (measured.experts, measured.experts_per_token) == (target.experts, target.experts_per_token)
    return measured if same else None
