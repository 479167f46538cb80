"""Executing a :class:`ConversionPlan`: stream every output tensor into shards inside a temporary
directory, write config and side files, check the result, then move it into place atomically."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglequant import __version__
from eaglequant.card import CARD_NAME, render_card
from eaglequant.checkpoint.reader import Checkpoint, resolve_inside, tensor_bytes
from eaglequant.checkpoint.writer import (
    SafetensorsStreamWriter,
    atomic_directory,
    shard_names,
    split_into_shards,
)
from eaglequant.errors import CheckpointError, InputError
from eaglequant.formats import GroupScales, QuantizedLinear
from eaglequant.manifest import REPORT_NAME, file_sha256, source_files
from eaglequant.plan import ConversionPlan
from eaglequant.progress import NoProgress, Progress

if TYPE_CHECKING:
    import torch

# Checks run on the finished output (in its temporary directory) before it is moved into place; returns
# their report (a VerifyReport), which the model card shows.
Finisher = Callable[[Path], Any]


@dataclass
class LinearResult:
    module: str
    weight: str
    shape: tuple[int, int]
    relative_error: float
    sqnr_db: float


@dataclass
class ConversionResult:
    destination: Path
    plan: ConversionPlan
    files: dict[str, str]  # output file -> sha256
    linears: list[LinearResult]
    seconds: float
    source_bytes: int
    output_bytes: int
    copied_files: list[str] = field(default_factory=list)
    source: Path | None = None
    verification: Any = None  # a VerifyReport when convert ran verify
    manifest: dict[str, Any] = field(default_factory=dict)  # see eaglequant.manifest
    card: dict[str, Any] = field(default_factory=dict)  # see eaglequant.card.card_context

    def to_json(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "destination": str(self.destination),
            "source": None if self.source is None else str(self.source),
            "layout": plan.head.layout,
            "scheme": plan.scheme.name,
            "scheme_label": plan.scheme.label,
            "scheme_kinds": list(plan.scheme.kinds),
            "attention": plan.head.attention,
            "format": plan.format.name,
            "algorithm": plan.format.algorithm(plan.scheme),
            "notes": plan.notes,
            "calibrated_input_amax": plan.input_amax,
            "engines": [e.name for e in plan.engines],
            "target_layers": plan.target.to_json(),
            "quantized": [
                {
                    "module": r.weight.removesuffix(".weight"),
                    "shape": list(r.shape),
                    "relative_error": r.relative_error,
                    "sqnr_db": r.sqnr_db,
                }
                for r in self.linears
            ],
            "kept": plan.kept,
            "excluded_linears": plan.excluded_linears,
            "exclude": plan.exclude_patterns,
            "tensor_dtypes": self.tensor_dtypes(),
            "source_bytes": self.source_bytes,
            "output_bytes": self.output_bytes,
            "seconds": round(self.seconds, 3),
            "files": self.files,
            "copied_files": self.copied_files,
            "manifest": self.manifest,
            "card": self.card,
        }

    def tensor_dtypes(self) -> dict[str, dict[str, int]]:
        """Output dtype -> tensor count and bytes."""
        overview: dict[str, dict[str, int]] = {}
        for output in self.plan.outputs:
            row = overview.setdefault(output.spec.dtype, {"count": 0, "bytes": 0})
            row["count"] += 1
            row["bytes"] += output.spec.nbytes
        return dict(sorted(overview.items()))


def parse_size(text: str | int) -> int:
    """``5GB``, ``500MB``, ``2GiB``, ``1048576`` -> bytes."""
    if isinstance(text, int):
        return text
    units = {
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
    cleaned = text.strip().upper().replace(" ", "")
    number = cleaned.rstrip("KMGTIB")
    unit = cleaned[len(number) :]
    try:
        value = float(number)
    except ValueError:
        value = -1
    if unit not in units or value <= 0:
        raise InputError(f"--max-shard-size {text!r} is not a size", hint="write e.g. 5GB, 500MB or 2GiB")
    return int(value * units[unit])


def run_conversion(
    checkpoint: Checkpoint,
    plan: ConversionPlan,
    dst: Path,
    *,
    overwrite: bool = False,
    max_shard_bytes: int = 5 * 10**9,
    progress: Progress | None = None,
    manifest: dict[str, Any] | None = None,
    card: dict[str, Any] | None = None,
    finish: Finisher | None = None,
) -> ConversionResult:
    """Write ``plan``'s output into ``dst``: shards, config, side files, report and model card; with
    ``finish`` (verification), its JSON too, all before ``dst`` appears."""
    progress = progress or NoProgress()
    started = time.perf_counter()
    linears: list[LinearResult] = []
    files: dict[str, str] = {}
    with atomic_directory(dst, overwrite) as tmp:
        shards = split_into_shards([o.spec for o in plan.outputs], max_shard_bytes)
        names = shard_names(len(shards))
        progress.start(plan.output_bytes, len(plan.outputs))
        try:
            _write_shards(checkpoint, plan, tmp, shards, names, files, linears, progress)
        finally:
            progress.stop()
        if len(names) > 1:
            _write_index(tmp, plan, shards, names)
        _write_json(tmp / "config.json", {**checkpoint.config, "quantization_config": plan.quantization_config()})
        for file_name, content in plan.format.extra_files(plan.scheme, plan.exclude_patterns).items():
            _write_json(tmp / file_name, content)
        copied = _copy_side_files(checkpoint, tmp)
        _check_written(tmp, plan)
        result = ConversionResult(
            dst,
            plan,
            files,
            linears,
            time.perf_counter() - started,
            checkpoint.total_bytes,
            plan.output_bytes,
            copied,
            checkpoint.root.resolve(),
            manifest=manifest or {},
            card=card or {},
        )
        _finish(tmp, result, finish)
    return result


def _finish(tmp: Path, result: ConversionResult, finish: Finisher | None) -> None:
    """Report, checks, card, then the report again with the SHA-256 of every file it sits beside."""
    _write_json(tmp / REPORT_NAME, _report(result))  # what ``finish`` checks the files against
    if finish is not None:
        result.verification = finish(tmp)
    if result.card:
        verification = None if result.verification is None else result.verification.to_json()
        (tmp / CARD_NAME).write_text(render_card(_report(result), verification), encoding="utf-8")
    for path in source_files(tmp):
        name = path.relative_to(tmp).as_posix()
        if name != REPORT_NAME and name not in result.files:
            result.files[name] = file_sha256(path)
    result.files = dict(sorted(result.files.items()))
    _write_json(tmp / REPORT_NAME, _report(result))


def _report(result: ConversionResult) -> dict[str, Any]:
    return {"eaglequant_version": __version__, **result.to_json()}


def _write_shards(
    checkpoint: Checkpoint,
    plan: ConversionPlan,
    tmp: Path,
    shards: list[list[Any]],
    names: list[str],
    files: dict[str, str],
    linears: list[LinearResult],
    progress: Progress,
) -> None:
    by_name = {o.spec.name: o for o in plan.outputs}
    quantizer = _Quantizer(checkpoint, plan)
    pending: dict[str, Any] = {}  # outputs of the linear quantized last, until written
    for name, specs in zip(names, shards, strict=True):
        writer = SafetensorsStreamWriter(tmp / name, specs, metadata={"format": "pt"})
        for spec in specs:
            output = by_name[spec.name]
            if output.quantized_from is None:
                writer.mark_copied(spec.name, checkpoint.copy_to(output.source, writer.handle))
            else:
                if spec.name not in pending:
                    quantized = quantizer.quantize(output.quantized_from)
                    pending.update(quantized.tensors)
                    linear = plan.head.linear(output.quantized_from)
                    linears.append(
                        LinearResult(
                            linear.module,
                            linear.weight,
                            (linear.out_features, linear.in_features),
                            quantized.relative_error,
                            quantized.sqnr_db,
                        )
                    )
                writer.write(spec.name, tensor_bytes(pending.pop(spec.name)))
            progress.advance(spec.nbytes, spec.name)
        writer.close()
        files[name] = writer.sha256


class _Quantizer:
    """Quantizes one linear at a time; values shared by a fused group are computed once, on first use,
    reading the members one after another (never more than one weight in memory)."""

    def __init__(self, checkpoint: Checkpoint, plan: ConversionPlan) -> None:
        self.checkpoint = checkpoint
        self.plan = plan
        self._shared: dict[tuple[str, ...], GroupScales] = {}

    def quantize(self, module: str) -> QuantizedLinear:
        linear = self.plan.head.linear(module)
        weight = self._read(linear.weight)
        return self.plan.format.quantize(linear, weight, self.plan.scheme, self.shared_scales(module, weight))

    def shared_scales(self, module: str, weight: torch.Tensor) -> GroupScales:
        """``weight`` is ``module``'s, already read: only the other members of its group are read again."""
        members = self.plan.scale_group(module)
        if members not in self._shared:
            self._shared[members] = self._compute_shared(members, module, weight)
        return self._shared[members]

    def _compute_shared(self, members: tuple[str, ...], module: str, weight: torch.Tensor) -> GroupScales:
        import torch

        weight_amax = input_amax = None
        if self.plan.scheme.weight.global_scale:
            amaxes = [
                (weight if m == module else self._read(self.plan.head.linear(m).weight)).abs().max().to(torch.float32)
                for m in members
            ]
            weight_amax = torch.stack(amaxes).max()
        if self.plan.input_amax:
            input_amax = torch.tensor(max(self.plan.input_amax[m] for m in members), dtype=torch.float32)
        return GroupScales(weight_amax, input_amax)

    def _read(self, name: str) -> torch.Tensor:
        import torch

        weight = self.checkpoint.read(name)
        if not bool(torch.isfinite(weight).all()):
            bad = int((~torch.isfinite(weight)).sum())
            info = self.checkpoint.tensors[name]
            raise CheckpointError(
                f"{info.file}: tensor {name!r} holds {bad} NaN/Inf values",
                hint="the weights are corrupt; re-export them from the trainer",
            )
        return weight


def _write_index(tmp: Path, plan: ConversionPlan, shards: list[list[Any]], names: list[str]) -> None:
    weight_map = {spec.name: name for name, specs in zip(names, shards, strict=True) for spec in specs}
    _write_json(
        tmp / "model.safetensors.index.json",
        {"metadata": {"total_size": plan.output_bytes}, "weight_map": dict(sorted(weight_map.items()))},
    )


def _write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _copy_side_files(checkpoint: Checkpoint, tmp: Path) -> list[str]:
    """Copy every non-weight file (tokenizer, generation config, custom code, licence) unchanged; the
    source's model card is replaced by the one written for the quantized head."""
    skip = checkpoint.weight_file_names() | {"config.json", REPORT_NAME, CARD_NAME}
    copied = []
    for path in source_files(checkpoint.root):
        relative = path.relative_to(checkpoint.root)
        if str(relative) in skip:
            continue
        if path.suffix in (".safetensors", ".bin") and path.parent == checkpoint.root:
            continue  # stray weight files that the index does not list are not carried over
        source = resolve_inside(checkpoint.root, str(relative), "SRC")
        target = tmp / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        copied.append(str(relative))
    return copied


def _check_written(tmp: Path, plan: ConversionPlan) -> None:
    """Re-open the output with the strict reader and compare it with the plan."""
    written = Checkpoint.open(tmp)
    try:
        expected = {o.spec.name: (o.spec.dtype, o.spec.shape) for o in plan.outputs}
        actual = {n: (i.dtype, i.shape) for n, i in written.tensors.items()}
        if expected != actual:
            diff = sorted(set(expected.items()) ^ set(actual.items()))
            raise RuntimeError(f"written checkpoint differs from the plan: {diff[:3]}")
    finally:
        written.close()
