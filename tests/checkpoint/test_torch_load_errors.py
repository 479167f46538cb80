"""A file torch.load cannot read is refused in one line naming why, by the exceptions torch raises for that."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize("content", [b"", b"not a pickle at all", b"PK\x03\x04 truncated zip"])
def test_a_file_torch_cannot_load_is_one_line_naming_why(content: bytes, tmp_path: Path) -> None:
    """The checkpoint reader and the SpecForge reader refuse a file torch.load cannot read by the exceptions it
    raises for that (TORCH_LOAD_ERRORS), with its own words: no blanket catch."""
    from eaglequant.capturing.trainer_files import _load
    from eaglequant.checkpoint.reader import _torch_load as load_torch_file
    from eaglequant.common.errors import CheckpointError, InputError

    path = tmp_path / "data_0.ckpt"
    path.write_bytes(content)
    with pytest.raises(InputError, match="not a SpecForge hidden-state file"):
        _load(path)
    with pytest.raises(CheckpointError, match=r"cannot be read as a PyTorch checkpoint|refused to unpickle"):
        load_torch_file(path)
