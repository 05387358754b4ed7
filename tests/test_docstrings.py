"""Shared docstring sections (kernattn._core.docstrings)."""

import pytest

from kernattn._core.docstrings import fill_doc
from kernattn._engine.regressor import FIT_RETURNS_AND_NOTES, NadarayaWatsonRegressor
from kernattn.smoother import KernelSmoother

SECTION = """
Returns
-------
self : object
    The fitted estimator.
"""


def test_section_takes_the_placeholder_indentation():
    class Model:
        @fill_doc(returns=SECTION)
        def fit(self):
            """Fit.

            %(returns)s
            """

    lines = Model.fit.__doc__.splitlines()
    assert lines[2:6] == [
        "            Returns",
        "            -------",
        "            self : object",
        "                The fitted estimator.",
    ]


def test_other_percent_signs_and_braces_stay_as_written():
    @fill_doc(returns=SECTION)
    def f():
        r"""A 90 % interval, :math:`\{x\}`, ``%(name)s`` inline and {braces}.

        %(returns)s
        """

    first = r"A 90 % interval, :math:`\{x\}`, ``%(name)s`` inline and {braces}."
    assert f.__doc__.startswith(first)
    assert "%(returns)s" not in f.__doc__


def test_unknown_placeholder_fails_at_decoration():
    with pytest.raises(KeyError, match="misspelt"):

        @fill_doc(returns=SECTION)
        def f():
            """Fit.

            %(misspelt)s
            """


def test_estimators_fit_docstrings_hold_the_shared_section():
    for fit in (NadarayaWatsonRegressor.fit, KernelSmoother.fit):
        assert "%(" not in fit.__doc__
        assert "any permutation of them gives the same fit" in fit.__doc__
    assert "to the last bit." in FIT_RETURNS_AND_NOTES
