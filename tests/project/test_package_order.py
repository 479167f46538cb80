"""The package's layers, lowest first: a package may import its own modules and the packages below it, never one
above. A reader can then read the folders bottom-up, each one resting on what came before.

Every ``import`` counts (module level, inside functions, under ``TYPE_CHECKING``), as in ``test_import_cycles``;
the implicit import of a parent package's ``__init__`` does not. There is no exceptions list.
"""

from __future__ import annotations

from test_import_cycles import import_graph

# Lowest first. docs/design.md lists each layer in one line, in this order (test_docs_paths holds it to it).
LAYERS = (
    "common",  # errors, environment switches, memory, progress, JSON fields, the version
    "checkpoint",  # safetensors files: read, write, hash
    "hub",  # the Hub client
    "layouts",  # a source head: tensor names, trainer families, dims, fused groups
    "numerics",  # the quantization math
    "kinds",  # quantization kinds: what a format stores and an engine runs
    "kernels",  # the fused dequant-GEMM (Triton) and its torch reference
    "schemes",  # declarative scheme files, matched to kinds
    "formats",  # output formats: recipes, configs, exclusion lists
    "engines",  # engine releases: runtime modules, rules, the support matrix
    "readback",  # a written checkpoint as each engine reads it, and what a round of it costs
    "draft",  # the head's float32 forward, weights read in row blocks, calibration
    "record",  # the report and the manifest a conversion writes
    "conversion",  # options, plan, pipeline, finisher, result
    "engine_load",  # the engines' own loaders in the loop
    "measurement",  # acceptance length measured with the engine's own speculative decoding, wherever it runs
    "capturing",  # captured draft inputs: through the engine, through transformers, from other pipelines' files
    "prediction",  # acceptance predicted from captured inputs: the draft chained as the engine chains it
    "speedup",  # the decode speed-up: the target's bytes a forward, the cost model, calibrated on a measurement
    "vocabulary",  # a pruned draft vocabulary: token counts, the tokens kept, the pruned head written
    "verification",  # structure, copies, parity, fidelity, the verdict
    "publish",  # the model card and the upload
    "jobs",  # a request end to end: the conversion (plan, write, verify, card, commit), the upload, the acceptance run
    "search",  # the cheapest draft within an acceptance budget, over the conversion job and prune
    "batch",  # job files over the jobs
    "bench",  # benchmarks
    "api",  # the library's entry points, each delegating to one function below
    "cli",  # the command line
    "__main__",  # python -m eaglequant
    "eaglequant",  # the package's lazy facade over the api
)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """Each import of a module in a higher layer, or of a module in no layer, as 'importer -> imported'."""
    rank = {layer: index for index, layer in enumerate(layers)}
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            here, there = rank.get(layer_of(module)), rank.get(layer_of(target))
            if here is None or there is None or there > here:
                found.append(f"{module} -> {target}")
    return found


def test_every_import_points_down_the_layers() -> None:
    assert upward_imports(import_graph()) == []


def test_every_module_belongs_to_a_layer() -> None:
    unplaced = sorted({layer_of(m) for m in import_graph()} - set(LAYERS))
    assert unplaced == [], f"add {unplaced} to LAYERS (and docs/design.md) at their level"


def test_the_rule_sees_an_upward_import_and_a_module_in_no_layer() -> None:
    graph = {
        "eaglequant.kinds.fp8": {"eaglequant.numerics.fp8"},
        "eaglequant.numerics.fp8": {"eaglequant.kinds.base"},
        "eaglequant.stray": {"eaglequant.common.errors"},
    }
    assert upward_imports(graph) == [
        "eaglequant.numerics.fp8 -> eaglequant.kinds.base",
        "eaglequant.stray -> eaglequant.common.errors",
    ]


def test_no_layer_shadows_a_public_name() -> None:
    """``eaglequant.convert(...)`` is the API; a sub-package named ``convert`` would replace it with a module as
    soon as anything imported it."""
    import importlib

    import eaglequant

    for layer in LAYERS[:-2]:
        importlib.import_module(f"eaglequant.{layer}")
    shadowed = [
        name for name in eaglequant.__all__ if name != "__version__" and not callable(getattr(eaglequant, name))
    ]
    assert shadowed == []
    assert not set(eaglequant.__all__) & set(LAYERS)
