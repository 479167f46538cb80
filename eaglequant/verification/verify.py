"""``verify``: is a written checkpoint what the engines will load, and does it compute what the source did?

1. Structure: everything ``explain`` checks for each engine (tensors, dtypes, shapes, strays, rules),
   plus scales finite and positive, fused groups sharing their global and input scales, and the files
   matching the SHA-256 recorded in ``eaglequant_report.json``. With the source: every tensor the conversion
   copied (norms, embeddings, d2t, t2d, unquantized linears) byte for byte against the source's, and the
   config.json fields an engine builds the draft from (:mod:`eaglequant.verification.copies`).
2. Per-layer parity: each quantized linear through the fused dequant-GEMM kernel (the torch reference
   on CPU) on seeded bf16 activations, against the source weight's GEMM: SQNR, cosine, relative error.
3. Head fidelity: the whole draft (fc, attention, MLP, norms, lm_head) in float32 with the source weights
   and config, and with DST's own (its quantized linears, kept tensors and config), on seeded or captured
   inputs: TV and KL of the draft distributions, top-1 flips in target vocabulary ids (through each
   checkpoint's own d2t).

Thresholds come from the scheme file (``[verify]``). Parity needs the source checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from eaglequant.checkpoint.reader import Checkpoint
from eaglequant.common.background import in_background
from eaglequant.common.findings import Finding
from eaglequant.common.json_fields import NOT_WRITTEN, JsonObject, JsonRecord, named
from eaglequant.engine_load import LoadCheck
from eaglequant.engines import ENGINES
from eaglequant.engines.target import TargetModel
from eaglequant.formats import FORMATS
from eaglequant.layouts.head import HeadDescription
from eaglequant.prediction.figures import PredictionRecord
from eaglequant.readback.explanation import explain_checkpoint
from eaglequant.record.manifest import changed_files
from eaglequant.record.report import (
    ConversionReport,
    VerificationSummary,
    read_report,
    recorded_engines,
    recorded_source,
)
from eaglequant.record.schemes import checkpoint_schemes
from eaglequant.record.verification import VERIFY_NAME, Verdict
from eaglequant.schemes.assignment import SchemeAssignment
from eaglequant.schemes.model import Scheme, VerifyThresholds
from eaglequant.verification.against_source import compare_with_source
from eaglequant.verification.copies import CopyCheck
from eaglequant.verification.fidelity import DEFAULT_TOKENS, HeadFidelity
from eaglequant.verification.layer_parity import PARITY_ROWS, LayerParity

if TYPE_CHECKING:
    from eaglequant.prediction.predict import PredictionSettings

PASSED, FAILED, NOT_VERIFIED, INCONCLUSIVE = Verdict.PASSED, Verdict.FAILED, Verdict.NOT_VERIFIED, Verdict.INCONCLUSIVE
# Scales that must be strictly positive (a zero one would erase the linear) vs. block scales (zero only
# for all-zero blocks).
_POSITIVE_SCALES = ("weight_scale_2", "weight_global_scale", "input_scale", "input_global_scale")


@dataclass
class VerifyReport(JsonRecord):
    """What ``verify`` found (``eaglequant_verify.json``); ``ok`` in its JSON is whether it passed (a checkpoint not
    verified numerically is not)."""

    json_omitted = ("hashes_read",)
    json_computed = ("parity_rows", "passed", "verdict", "checks", "problems", "unsettled")
    json_renamed = named(passed="ok")
    json_values = named(module_schemes=lambda schemes: schemes or NOT_WRITTEN)  # written where there are some
    json_read = named(hashes_read=lambda obj, _field: _hashes_read(obj))
    json_first = (
        *("destination", "source", "format", "scheme", "module_schemes", "scheme_label", "thresholds"),
        *(*json_computed, "structure", "layers", "fidelity", "acceptance", "notes", "engine_loads", "copies"),
    )

    destination: Path
    source: Path | None
    format: str
    scheme: str  # the main scheme's name
    scheme_label: str  # every scheme's, as SchemeAssignment.label gives it
    # what the whole head is held to: its scheme's thresholds, the loosest of them for linears in several (each
    # linear is held to its own scheme's)
    thresholds: VerifyThresholds
    structure: list[Finding]  # problems
    layers: list[LayerParity] = field(default_factory=list)
    fidelity: HeadFidelity | None = None
    notes: list[Finding] = field(default_factory=list)  # findings, and the engines' notes
    engine_loads: list[LoadCheck] = field(default_factory=list)  # the engines' own loaders (--load-with)
    acceptance: PredictionRecord | None = None  # predicted from captured inputs with the target's choices
    hashes_read: bool = True  # the files were read again against the report's SHA-256s
    copies: CopyCheck | None = None  # the copied tensors against the source's (None: no source)
    module_schemes: dict[str, str] = field(default_factory=dict)  # module -> its own scheme's name, where it has one

    @classmethod
    def of(cls, destination: Path, source: Path | None, fmt: str, schemes: SchemeAssignment) -> VerifyReport:
        """An empty report on ``destination`` in ``schemes``, the head held to their :meth:`head_thresholds`."""
        own = {module: scheme.name for module, scheme in schemes.module_schemes.items()}
        held_to = schemes.head_thresholds()
        return cls(destination, source, fmt, schemes.main.name, schemes.label, held_to, [], module_schemes=own)

    @property
    def schemes_described(self) -> str:
        """``fp8-per-channel`` or ``fp8-per-channel, lm_head nvfp4`` (:meth:`SchemeAssignment.describe`)."""
        return ", ".join([self.scheme, *(f"{module} {name}" for module, name in sorted(self.module_schemes.items()))])

    @property
    def problems(self) -> list[Finding]:
        """The structure's problems, then each engine's load problems, each linear failing parity
        (``parity-failed``, about the module), the head failing fidelity (``fidelity-failed``) and the predicted
        acceptance wholly past its budget (``acceptance-failed``)."""
        found = list(self.structure)
        found += [p.prefixed(f"{check.engine} load: ") for check in self.engine_loads for p in check.problems]
        found += [
            Finding("parity-failed", layer.module, f"{layer.module}: {', '.join(layer.failed)}")
            for layer in self.layers
            if layer.failed
        ]
        if self.fidelity is not None and self.fidelity.failed:
            found.append(Finding("fidelity-failed", "", f"draft head: {', '.join(self.fidelity.failed)}"))
        if self.acceptance is not None and self.acceptance.failed:
            found.append(Finding("acceptance-failed", "", f"acceptance: {self.acceptance.verdict}"))
        return found

    @property
    def unsettled(self) -> list[Finding]:
        """What no check failed but did not settle either: the predicted acceptance's interval straddling its budget
        (``acceptance-inconclusive``, saying how many sequences more would settle it)."""
        if self.acceptance is None or not self.acceptance.inconclusive:
            return []
        return [Finding("acceptance-inconclusive", "", f"acceptance: {self.acceptance.verdict}")]

    @property
    def ok(self) -> bool:
        """No check that ran found a problem (see :attr:`verdict` for whether parity and fidelity ran, and whether
        the acceptance was settled)."""
        return not self.problems

    @property
    def numerical(self) -> bool:
        """Per-layer parity and draft-head fidelity ran (they need the source checkpoint)."""
        return self.source is not None and bool(self.layers)

    @property
    def passed(self) -> bool:
        return self.verdict == PASSED

    @property
    def verdict(self) -> Verdict:
        if not self.ok:
            return FAILED
        if not self.numerical:
            return NOT_VERIFIED
        return INCONCLUSIVE if self.unsettled else PASSED

    @property
    def checks(self) -> list[str]:
        ran = ["structure", "scales"] + (["hashes"] if self.hashes_read else [])
        ran += ["parity"] if self.layers else []
        ran += ["fidelity"] if self.fidelity is not None else []
        ran += ["acceptance"] if self.acceptance is not None else []
        ran += [f"{check.engine} load" for check in self.engine_loads]
        return ran

    @property
    def parity_rows(self) -> int:
        """The seeded activations each linear's parity ran on."""
        return PARITY_ROWS

    def summary(self) -> VerificationSummary:
        """What the conversion's report records of this verification."""
        return VerificationSummary(self.passed, self.verdict)


@dataclass(frozen=True)
class VerifyOutput(JsonRecord):
    """What ``verify --json`` prints: the report (its destination absolute), then the source DST's report records
    (absolute; None without), where verify looks when --source is not given."""

    json_inlined = ("report",)

    report: VerifyReport
    recorded_source: str | None


def _hashes_read(written: JsonObject) -> bool:
    """Whether a written report's checks read the files' hashes again (a report without checks: they did)."""
    return "checks" not in written.data or "hashes" in written.texts("checks")


def verify_checkpoint(
    dst: Path,
    head: HeadDescription,
    checkpoint: Checkpoint,
    *,
    source: Path | None,
    engines: list[str] | None,
    target: TargetModel,
    seed: int = 0,
    tokens: int = DEFAULT_TOKENS,
    every_engine: bool = False,
    inputs: Path | None = None,
    hashed_while_writing: bool = False,
    written: tuple[ConversionReport, Scheme] | None = None,
    prediction: PredictionSettings | None = None,
) -> VerifyReport:
    """``engines``: the engines that must load it (default: those its conversion targeted, or with
    ``every_engine``, or for a checkpoint another tool wrote, every engine that can). ``hashed_while_writing``:
    the report's SHA-256s were just taken from these files as they were written (``convert --verify``), so they
    are not read a second time. ``written``: the report and scheme of the conversion that has just written
    ``dst`` (``convert --verify``), used as they are instead of read back from its report. ``prediction``: how
    acceptance is predicted on ``inputs`` (the longest k tabulated, the device; default: its defaults)."""
    recorded = read_report(dst) if written is None else written[0]
    if engines is None and not every_engine:
        engines = recorded_engines(recorded)
    explanation = explain_checkpoint(checkpoint, head, engines, target)
    fmt = FORMATS[explanation.format]
    schemes, scheme_note = checkpoint_schemes(checkpoint, recorded, written, head)
    report = VerifyReport.of(dst, source, fmt.name, schemes)
    report.structure += explanation.all_problems
    if schemes.by_module:
        thresholds = (
            f"{schemes.describe()}: each quantized linear is held to its own scheme's thresholds, the whole head to "
            "the loosest of them (those shown)"
        )
        report.notes.append(Finding("per-module-thresholds", "", thresholds))
    report.notes += [
        problem for reading in explanation.engines for problem in ENGINES[reading.engine].draft_notes(head, target)
    ]
    if scheme_note:
        report.notes.append(scheme_note)
    quantized = explanation.quantized_members
    hashes: Future[list[Finding]] | None = None
    if hashed_while_writing:
        _note_hashed_while_writing(report)
    else:  # one core reads the files while the others check them
        hashes = in_background(_check_hashes, dst, recorded, name="verify-sha256")
    scale_problems = _check_scales(checkpoint, head, schemes, quantized)
    report.notes += _activation_notes(schemes)
    if source is None:
        report.notes += _NO_SOURCE_NOTES
    else:
        from eaglequant.prediction.predict import PredictionSettings, predict_written

        with Checkpoint.open(source) as src:
            converted_from = _converted_from(head, src, recorded)
            if converted_from is None:
                report.notes.append(_unpruned_source_note(src, recorded))
            else:
                with _opened(converted_from, src) as parent:
                    changes = () if recorded is None else recorded.config_changes
                    compared = compare_with_source(
                        checkpoint, parent, head, fmt, schemes, quantized, (seed, tokens, inputs), changes
                    )
                report.structure += compared.problems
                report.notes += compared.notes
                report.layers, report.fidelity, report.copies = compared.layers, compared.fidelity, compared.copies
                if converted_from != src.root:
                    report.notes.append(_unpruned_source_note(src, recorded, converted_from))
            budget, judged = _acceptance_budget(dst if written is None else None, src.root, report.thresholds)
            if judged is not None and inputs is not None:
                report.notes.append(judged)
            settings = _judged_at_served_k(prediction or PredictionSettings(), dst if written is None else None)
            predicted, why = predict_written(checkpoint, head, target, src, inputs, budget, settings)
            report.acceptance = None if predicted is None else predicted.record()
        if why:
            report.notes.append(why)
    report.structure += (hashes.result() if hashes is not None else []) + scale_problems
    return report


def _note_hashed_while_writing(report: VerifyReport) -> None:
    """``convert --verify``: the SHA-256s were taken as the files were written, so they are not read again."""
    report.hashes_read = False
    hashed = "SHA-256 of every file: taken as it was written (copied tensors from their source bytes), not read again"
    report.notes.append(Finding("hashed-while-writing", "", hashed))


_NO_SOURCE_NOTES = (
    Finding("no-source", "", "no source checkpoint (--source SRC): parity and fidelity were not checked"),
    Finding(
        "copies-not-compared",
        "",
        "no source checkpoint: the tensors the conversion copied (norms, embeddings, d2t, t2d, unquantized linears) "
        "and config.json were not compared with the source's",
    ),
)


def _activation_notes(schemes: SchemeAssignment) -> list[Finding]:
    """A note (``activations-not-simulated``, about the scheme) for each scheme whose activations parity does not
    simulate."""
    notes = []
    for scheme in schemes.schemes:
        activation = scheme.kinds.activation_kind
        if activation is not None and not activation.simulated:
            weight_only = (
                f"{scheme.label} activations are not simulated: parity runs the weight-only kernel "
                "(what Hopper-class GPUs run for this checkpoint)"
            )
            notes.append(Finding("activations-not-simulated", scheme.name, weight_only))
    return notes


def _vocabulary_rows(described: HeadDescription) -> int | None:
    lm_head = described.find_linear("lm_head")
    return None if lm_head is None else lm_head.out_features


def _converted_from(head: HeadDescription, src: Checkpoint, recorded: ConversionReport | None) -> Path | None:
    """The checkpoint parity and fidelity compare DST with: ``src`` when its draft vocabulary is DST's, else (``src``
    the unpruned head a pruned DST came from, as ``search`` records it) the head DST's report records it was
    converted from, when that is there and has DST's vocabulary; None when there is none (acceptance is still
    predicted against ``src``: the engine compares drafts in target token ids)."""
    from eaglequant.layouts.detect import describe_head

    ours, theirs = _vocabulary_rows(head), _vocabulary_rows(describe_head(src))
    if ours is None or theirs is None or ours == theirs:
        return src.root
    named = recorded_source(recorded)
    if named is None or not Path(named).is_dir():
        return None
    with Checkpoint.open(Path(named)) as parent:
        return parent.root if _vocabulary_rows(describe_head(parent)) == ours else None


@contextmanager
def _opened(path: Path, src: Checkpoint) -> Iterator[Checkpoint]:
    """``src`` when it is at ``path``, else ``path`` opened for the block."""
    if path == src.root:
        yield src
        return
    with Checkpoint.open(path) as parent:
        yield parent


def _unpruned_source_note(src: Checkpoint, recorded: ConversionReport | None, parent: Path | None = None) -> Finding:
    """``source-vocabulary-differs``: ``src`` has another vocabulary than DST's; what parity and fidelity ran
    against instead, or that they did not."""
    if parent is not None:
        text = (
            f"{src.root} has another draft vocabulary than DST's: parity and fidelity ran against the head DST was "
            f"converted from ({parent}); acceptance is predicted against {src.root}"
        )
    else:
        named = recorded_source(recorded)
        text = (
            f"{src.root} has another draft vocabulary than DST's and the head DST was converted from "
            f"({named or 'not recorded'}) is not there: parity and fidelity did not run; acceptance is predicted "
            f"against {src.root}"
        )
    return Finding("source-vocabulary-differs", str(src.root), text)


def _acceptance_budget(dst: Path | None, source: Path, thresholds: VerifyThresholds) -> tuple[float, Finding | None]:
    """The budget acceptance is judged by: the one ``search`` recorded in ``dst`` when ``source`` is the source it
    searched from (with a ``judged-as-searched`` note saying so), else the scheme's ``max_acceptance_drop``."""
    from eaglequant.record.search import same_place, searched_judge

    judge = None if dst is None else searched_judge(dst)
    if judge is None or not same_place(judge.source, source):
        return thresholds.max_acceptance_drop, None
    return judge.budget, Finding("judged-as-searched", judge.source, f"acceptance judged against {judge.text}")


def _judged_at_served_k(settings: PredictionSettings, dst: Path | None) -> PredictionSettings:
    """``settings`` judging at the k ``dst`` is served at: the one its search chose, else the default k."""
    from dataclasses import replace

    from eaglequant.record.search import read_search, served_draft_tokens

    return settings if dst is None else replace(settings, draft_tokens=served_draft_tokens(read_search(dst)))


def _check_hashes(dst: Path, recorded: ConversionReport | None) -> list[Finding]:
    return [] if recorded is None else changed_files(dst, recorded.files)


def _check_scales(
    checkpoint: Checkpoint, head: HeadDescription, schemes: SchemeAssignment, quantized: set[str]
) -> list[Finding]:
    """Scale tensors holding values no scale may hold (``invalid-scale``, about the tensor), and fused groups whose
    members do not share a global or input scale (``fused-scales-differ``, about the group)."""
    import torch

    problems = []
    canonical = {linear.checkpoint_module: linear.module for linear in head.linears}
    for module in sorted(quantized):
        scheme = schemes.of(canonical.get(module, module))
        e8m0 = scheme.kinds.weight_kind.scale_dtype == "e8m0"  # power-of-two scales stored as exponent bytes
        for name in sorted(n for n in checkpoint.tensors if n.startswith(module + ".") and "scale" in n):
            values = checkpoint.read(name)
            if e8m0 and values.dtype == torch.uint8:  # an exponent byte: 255 is NaN
                bad = int((values == 255).sum())
                what = "NaN (E8M0 255)"
            else:
                as_float = values.to(torch.float32)
                positive = name.rsplit(".", 1)[1] in _POSITIVE_SCALES or values.dim() == 1 or values.shape[-1] == 1
                invalid = ~torch.isfinite(as_float) | ((as_float <= 0) if positive else (as_float < 0))
                bad = int(invalid.sum())
                what = "not finite and positive" if positive else "not finite and non-negative"
            if bad:
                problems.append(Finding("invalid-scale", name, f"{name}: {bad} scale value(s) {what}"))
    for group in head.fused_groups:
        members = [head.linear(m).checkpoint_module for m in group.members]
        if not set(members) <= quantized:
            continue
        for param in _POSITIVE_SCALES:
            names = [f"{m}.{param}" for m in members if f"{m}.{param}" in checkpoint.tensors]
            shared = [checkpoint.read(n).to(torch.float32).reshape(-1) for n in names]
            if len(shared) > 1 and any(not torch.equal(shared[0], v) for v in shared[1:]):
                shown = ", ".join(f"{n}={float(v[0]):.6g}" for n, v in zip(names, shared, strict=True))
                text = f"{group.name}: fused members must share {param} but hold {shown}"
                problems.append(Finding("fused-scales-differ", group.name, text))
    return problems


def write_verify_report(report: VerifyReport, directory: Path | None = None) -> Path:
    """Store ``report`` in ``directory`` (default: the checkpoint it describes)."""
    path = (directory or report.destination) / VERIFY_NAME
    from eaglequant.common.atomic import write_json

    write_json(path, report.to_json())
    return path
