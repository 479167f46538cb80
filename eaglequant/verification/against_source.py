"""What ``verify`` checks against the source checkpoint: the tensors and config fields the conversion copied, each
quantized linear's parity through the dequant-GEMM kernel, and the whole draft's fidelity (see
:mod:`eaglequant.verification.verify` for the order of the checks)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.errors import InputError, given, words
from eaglequant.common.findings import Finding
from eaglequant.common.memory import return_freed_memory
from eaglequant.layouts.head import HeadDescription
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.verification.copies import CopyCheck, compare_config, compare_copies
from eaglequant.verification.fidelity import HeadFidelity, head_fidelity, synthetic_inputs
from eaglequant.verification.layer_parity import LayerParity, ParityRun, parity_input, run_alone

if TYPE_CHECKING:
    from eaglequant.common.config_change import ConfigChange
    from eaglequant.draft.weights import CanonicalWeights
    from eaglequant.formats import Format
    from eaglequant.kinds.base import StoredLinear


@dataclass
class SourceComparison:
    problems: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    layers: list[LayerParity] = field(default_factory=list)  # in module order
    fidelity: HeadFidelity | None = None
    copies: CopyCheck | None = None


def compare_with_source(
    checkpoint: Checkpoint,
    src: Checkpoint,
    head: HeadDescription,
    fmt: Format,
    schemes: SchemeAssignment,
    quantized: set[str],
    draft_inputs: tuple[int, int, Path | None],  # seed, synthetic positions, captured inputs
    config_changes: Sequence[ConfigChange] = (),
) -> SourceComparison:
    """``checkpoint`` (DST, ``head`` as written) against ``src``, the checkpoint it was made from; ``quantized``:
    DST's quantized linears by checkpoint name; ``config_changes``: what its conversion recorded writing into
    config.json other than the source's. One linear in memory at a time."""
    import torch

    from eaglequant.conversion.devices import available_device
    from eaglequant.draft.weights import CanonicalWeights
    from eaglequant.layouts.detect import describe_head

    device = available_device()
    src_head = describe_head(src)
    by_module = {lin.checkpoint_module: lin for lin in src_head.linears}
    missing = sorted(quantized - set(by_module))
    if missing:
        raise InputError(
            words(given("source", str(src.root)), f": has no linear {missing[0]}"),
            hint="pass the checkpoint DST was made from",
        )
    copies = compare_copies(checkpoint, src, quantized)
    config_problems = compare_config(checkpoint.config, src.config, config_changes)
    compared = SourceComparison(copies.problems + config_problems, [copies.note], copies=copies.record())
    weights = CanonicalWeights(src, src_head)
    generator = torch.Generator().manual_seed(draft_inputs[0])

    def stored(module: str) -> StoredLinear:
        linear = next(lin for lin in head.linears if lin.checkpoint_module == module)
        scheme = schemes.of(linear.module)
        names = [spec.name for spec in fmt.tensor_specs(linear, scheme)]
        return fmt.stored_linear(linear, scheme, {name: checkpoint.read(name) for name in names}).to(device)

    runs: dict[str, ParityRun] = {}  # module -> its parity, on activations drawn in this order
    for module in sorted(quantized):  # one linear in memory at a time
        try:
            linear = stored(module)
        except KeyError:  # a missing tensor: already a structure problem
            unread = f"{module}: parity not checked (tensors missing)"
            compared.notes.append(Finding("parity-not-checked", module, unread))
            continue
        x = parity_input(generator, linear.in_features)
        runs[module] = ParityRun(module, by_module[module].module, weights, linear, x)
        del linear
    if len(runs) < len(quantized):
        compared.layers = _parity_alone(runs, stored, schemes)
        unread = "draft-head fidelity not checked: some quantized linears cannot be read"
        compared.notes.append(Finding("fidelity-not-checked", "", unread))
        return compared
    by_canonical = {by_module[m].module: m for m in quantized}

    def stored_linear(canonical: str) -> StoredLinear | None:
        module = by_canonical.get(canonical)
        return None if module is None else stored(module)

    sequences, described = _draft_inputs(src_head, weights, draft_inputs)
    own = (head, CanonicalWeights(checkpoint, head))  # the quantized draft reads DST's kept tensors and config
    riding = {run.name.removesuffix(".weight"): run for run in runs.values()}  # by canonical module
    limits = schemes.head_thresholds()
    compared.fidelity = head_fidelity(
        src_head, weights, stored_linear, limits, sequences, device, described, own, copies.identical, riding
    )
    alone = {run.module for run in riding.values()}  # linears the quantized draft never ran (none, usually)
    compared.layers = _parity_alone(runs, stored, schemes, alone)
    return compared


def _draft_inputs(
    head: HeadDescription, weights: CanonicalWeights, draft_inputs: tuple[int, int, Path | None]
) -> tuple[list[tuple[Any, Any]], str]:
    """The fidelity run's sequences (captured, else seeded synthetic ones) and their description."""
    from eaglequant.draft.calibrate import load_calibration

    seed, tokens, inputs = draft_inputs
    if inputs is not None:
        sequences = load_calibration(inputs, head, "inputs")
        positions = sum(len(aux) for aux, _ in sequences)
        return sequences, f"captured: {inputs.name} ({len(sequences)} sequences, {positions} positions)"
    return synthetic_inputs(head, weights, seed, tokens), f"synthetic: seed {seed}, {tokens} positions"


def _parity_alone(
    runs: dict[str, ParityRun],
    stored: Callable[[str], StoredLinear],
    schemes: SchemeAssignment,
    alone: set[str] | None = None,
) -> list[LayerParity]:
    """Every run's result, in module order, gathering those in ``alone`` (default: all) on their own first, one
    linear in memory at a time."""
    for module in sorted(runs if alone is None else alone):
        run_alone(runs[module], stored(module))
        return_freed_memory()
    return [runs[module].result(schemes.of(runs[module].name.removesuffix(".weight"))) for module in sorted(runs)]
