"""Sphinx configuration of the kernattn documentation.

Build (offline) from the repository root::

    python -m sphinx -W -b html docs docs/_build/html

``KERNATTN_DOCS_FAST=1`` runs the gallery examples at their small smoke-test sizes
(``KERNATTN_SMOKE=1``), as CI does; without it they run at full size.
"""

import importlib.util
import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# kernattn itself (when it is not installed) and the helpers next to this file.
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS))

if os.environ.get("KERNATTN_DOCS_FAST") == "1":
    os.environ.setdefault("KERNATTN_SMOKE", "1")
# Figures are drawn off screen.
os.environ.setdefault("MPLBACKEND", "agg")

import kernattn  # noqa: E402

project = "kernattn"
author = "the kernattn developers"
copyright = "the kernattn developers"
release = kernattn.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    # MathJax shipped with the package and copied into the build: the math renders offline.
    "sphinx-mathjax-offline",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "sg_execution_times.rst"]
root_doc = "index"
language = "en"

# -- API reference -------------------------------------------------------------------------
autosummary_generate = True
autodoc_default_options = {"member-order": "groupwise"}
autodoc_typehints = "none"
# The classes' pages list their members through autodoc (see the class template); numpydoc's
# own member tables would describe every method twice.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# numpydoc_validation_checks is left unset on purpose: the docstrings are checked by their
# doctests, not by numpydoc's style validation.

# -- Gallery -------------------------------------------------------------------------------
# An example whose optional dependency is missing (torch for the token models: the docs extra
# does not bring it) is shown without being run: its code, a note in place of its output
# (see _note_not_run), and the API page documents kernattn.torch from a mocked torch.
_RUNNER = importlib.util.spec_from_file_location(
    "_run_examples", ROOT / "examples" / "run_examples.py"
)
run_examples = importlib.util.module_from_spec(_RUNNER)
_RUNNER.loader.exec_module(run_examples)
NOT_RUN = {
    script: module
    for script in run_examples.example_scripts()
    if (module := run_examples.missing_dependency(script)) is not None
}
_RUN_PATTERN = r"[\\/]\d\d_[^\\/]*\.py$"
if NOT_RUN:
    _skipped = "|".join(re.escape(script) for script in NOT_RUN)
    _RUN_PATTERN = rf"[\\/](?!(?:{_skipped})$)\d\d_[^\\/]*\.py$"
autodoc_mock_imports = sorted(set(NOT_RUN.values()))
# The runner of the examples (examples/run_examples.py) is a tool, not a lesson. (The
# pattern is matched against file names without their folder.)
_IGNORED = r"__init__\.py|^run_examples\.py$"

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    # The lessons are 01_*.py, 02_*.py, ... (two digits: 10_*.py too); examples/benchmarks/
    # has no GALLERY_HEADER file, so it is not part of the gallery (its scripts are long
    # timings, quoted in comparison.rst).
    "filename_pattern": _RUN_PATTERN,
    "ignore_pattern": _IGNORED,
    "within_subsection_order": "FileNameSortKey",
    # The examples save their figures to --out (default: their own folder). Send them to the
    # build folder, so that a build leaves nothing in examples/; the gallery shows the
    # figures that are still open at the end of each cell (matplotlib scraper).
    "reset_argv": "_gallery_helpers.reset_argv",
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "download_all_examples": False,
    "remove_config_comments": True,
    "show_memory": False,
    "capture_repr": ("__repr__",),
    "min_reported_time": 1,
    "write_computation_times": False,
    "plot_gallery": "True",
    "abort_on_example_error": True,
    "doc_module": ("kernattn",),
    "backreferences_dir": None,
}

# -- HTML ----------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"kernattn {release}"
html_static_path = []
html_theme_options = {
    "description": "Attention is a kernel smoother",
    "fixed_sidebar": True,
    "page_width": "1100px",
    "sidebar_width": "230px",
}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}

# -- Doctest (``python -m sphinx -b doctest docs docs/_build/doctest``) ---------------------
# The API pages' examples come from docstrings, which run in their module's namespace
# (as ``pytest --doctest-modules`` runs them): the public names of those modules.
doctest_global_setup = """
import numpy as np
from kernattn import *
from kernattn.attention import *
from kernattn.bandwidth import *
from kernattn.compare import *
from kernattn.datasets import *
from kernattn.feature_maps import *
from kernattn.kernels import *
from kernattn.metrics import *
"""


# -- Examples not run ------------------------------------------------------------------------


def _note_not_run(app, docname, source):
    """Under the title of an example that was not run, a note that says why."""
    script = docname.rpartition("/")[2] + ".py"
    if not docname.startswith("auto_examples/") or script not in NOT_RUN:
        return
    module = NOT_RUN[script]
    note = (
        "\n.. note::\n\n"
        f"   This example was not run in this build of the documentation: it needs "
        f"``{module}``, which is not installed, so its code is shown without its output and "
        f"figures. Install ``{module}`` (for torch, the CPU build is enough: see the README) "
        "and build again to run it.\n"
    )
    lines = source[0].split("\n")
    label = f".. _sphx_glr_auto_examples_{script}:"
    start = lines.index(label) if label in lines else 0
    for i in range(start + 2, len(lines)):
        if lines[i] and set(lines[i]) == {"="} and lines[i - 1].strip():
            lines.insert(i + 1, note)
            break
    source[0] = "\n".join(lines)


def setup(app):
    app.connect("source-read", _note_not_run)
