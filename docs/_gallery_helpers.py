"""Helpers of the Sphinx configuration, referred to by name from ``conf.py``.

sphinx-gallery accepts callables in its configuration as importable names, which keeps the
configuration picklable (Sphinx caches it between builds).
"""

from pathlib import Path

#: Where the examples' ``--out`` points during a documentation build: inside the build
#: folder, so the scripts leave no figure or table in ``examples/``.
EXAMPLE_OUTPUT = Path(__file__).resolve().parent / "_build" / "example-output"


def reset_argv(gallery_conf, script_vars):
    """Command-line arguments of every gallery example: ``--out`` into the build folder."""
    EXAMPLE_OUTPUT.mkdir(parents=True, exist_ok=True)
    return ["--out", str(EXAMPLE_OUTPUT)]
