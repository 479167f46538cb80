"""SGLang set up for a CPU-only machine: stub modules for packages its import chain names but the draft never
runs, and the GPU capability its quantization configs check, reported as the job's."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

import torch

DEFAULT_CAPABILITY = (10, 0)


class _Anything:
    """Stands in for any attribute of a stubbed module (used only at import time by code off the draft path)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
        return _Anything()

    def __getattr__(self, name: str) -> _Anything:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves stub modules for packages absent from the engine venv; records who imported them."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names  # module name -> why it may be stubbed
        self.importers: dict[str, set[str]] = {}

    def _stubbed(self, fullname: str) -> str | None:
        for name in self.names:
            if fullname == name or fullname.startswith(name + ".") or name.startswith(fullname + "."):
                return name
        return None

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        name = self._stubbed(fullname)
        if name is None:
            return None
        try:  # a real install wins
            if importlib.machinery.PathFinder.find_spec(fullname, path) is not None:
                return None
        except (ImportError, ValueError):
            pass
        frame: Any = sys._getframe(1)
        while frame is not None and not frame.f_globals.get("__name__", "").startswith("sglang"):
            frame = frame.f_back
        importer = frame.f_globals["__name__"] if frame is not None else "?"
        self.importers.setdefault(name, set()).add(importer)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []
        # transformers parses the version of any torchvision it finds
        module.__version__ = "0.0"  # type: ignore[attr-defined]


STUBS = _StubFinder(
    {
        "torchvision": "imported at module level by SGLang's multimodal utils and configs; unused by the draft",
        # vllm itself is only a parent package for _custom_ops; anything else importing it is reported too
        "vllm._custom_ops": "imported by the rotary-embedding fallback when not on CUDA/HIP/CPU-engine; not run",
    }
)
_CAPABILITY = list(DEFAULT_CAPABILITY)


def _capability(device: Any = None) -> tuple[int, int]:
    return _CAPABILITY[0], _CAPABILITY[1]


def patch_capability() -> str:
    """Report a CUDA device capability: SGLang reads it through sglang.srt.utils (bound by name in many modules),
    torch.cuda directly, and its platform facts; on CPU all answer None."""
    from sglang.srt.utils import common

    original = common.get_device_capability
    torch.cuda.get_device_capability = _capability
    rebound = 0
    for module in list(sys.modules.values()):
        if (
            module is not None
            and module.__name__.startswith("sglang")
            and getattr(module, "get_device_capability", None) is original
        ):
            module.get_device_capability = _capability  # type: ignore[attr-defined]
            rebound += 1
    default = f"{DEFAULT_CAPABILITY[0]}.{DEFAULT_CAPABILITY[1]}"
    return (
        f"GPU capability reported as the job's (default {default}): sglang.srt.utils.get_device_capability "
        f"(rebound in {rebound} modules), torch.cuda.get_device_capability and the platform facts "
        "is_sm90/is_sm100/is_blackwell/device_capability; no GPU here"
    )


def platform_overrides(cap: tuple[int, int]) -> dict[str, Any]:
    major = cap[0]
    return {
        "device_capability": tuple(cap),
        "device_sm": major * 10 + cap[1],
        "is_sm90": major == 9,
        "is_sm100": major == 10,
        "is_sm100_or_sm110": major in (10, 11),
        "is_sm110": major == 11,
        "is_sm120": major == 12,
        "is_blackwell": major in (10, 11, 12),
    }
