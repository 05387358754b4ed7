"""The README's Python examples run as pasted.

Every ```python block of README.md is executed, in order, in one namespace — as a reader
would paste them one after the other into a fresh interpreter. A failure names the block.
A block that imports torch is skipped where torch (an optional extra) is not installed.
The examples are kept small so that this takes a few seconds.
"""

import importlib.util
import re
import traceback
import warnings
from pathlib import Path

import matplotlib
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(text):
    """The contents of the ```python fenced blocks of ``text``, in order."""
    return [match.group(1) for match in _BLOCK.finditer(text)]


def test_readme_has_python_blocks():
    assert len(python_blocks(README.read_text(encoding="utf-8"))) >= 3


def test_readme_python_blocks_run_in_order(tmp_path, monkeypatch):
    # Files the examples write (results.csv, results.json) go to a scratch folder, and
    # figures are drawn without a display.
    monkeypatch.chdir(tmp_path)
    matplotlib.use("Agg")
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    namespace = {"__name__": "__readme__"}
    try:
        # The examples are meant to run without warnings (a ConvergenceWarning, say): a
        # warning of the kinds kernattn and scikit-learn emit fails the block.
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            warnings.simplefilter("error", RuntimeWarning)
            for number, source in enumerate(blocks, start=1):
                if "import torch" in source and importlib.util.find_spec("torch") is None:
                    continue
                code = compile(source, f"README.md python block {number}", "exec")
                try:
                    exec(code, namespace)
                except Exception:
                    pytest.fail(
                        f"README.md python block {number} of {len(blocks)} failed:\n"
                        f"{source}\n{traceback.format_exc()}",
                        pytrace=False,
                    )
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")
