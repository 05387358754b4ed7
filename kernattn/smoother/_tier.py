"""The tier that evaluates the smoother's sums: every kernel value (``"exact"``) or the
binned grid (``"binned"``), and the binning tolerance of a binned fit.

Plain settings in, a choice out: the estimator passes its ``algorithm``, ``bandwidth`` and
``kernel`` and the training arrays.
"""

import numpy as np

from kernattn._core.numerics import power_of_two_scale
from kernattn.bandwidth import CRITERIA, resolve_bandwidth
from kernattn.smoother._binned.checks import MAX_DIMS
from kernattn.smoother._binned.cost import binned_cost, choose_algorithm, exact_cost
from kernattn.smoother._binned.error import TOLERANCE
from kernattn.smoother._binned.grid import make_grid
from kernattn.smoother._binned.kernel import BinnedKernel

__all__ = [
    "AUTO_MIN_ROWS",
    "EXACT_SEARCH_ROWS",
    "MAX_TOLERANCE",
    "binned_reason",
    "binned_tolerance",
    "check_binned_possible",
    "final_tier",
    "search_on_bins",
    "search_tier",
]

#: ``algorithm="auto"`` keeps the exact sums below this many training rows: they take well
#: under a second there, and small fits stay exact to rounding.
AUTO_MIN_ROWS = 10_000
#: The binned tier's grid meets ``TOLERANCE`` (1e-3), or where that grid would exceed
#: ``working_memory`` the smallest power-of-two multiple up to this that fits.
MAX_TOLERANCE = 8e-3
#: Beyond this many rows (one or two continuous features, Gaussian kernel) a criterion is
#: searched on binned sums over every row even with ``algorithm="exact"``: the exact
#: search on 2 400 sampled queries then picks bandwidths several times too small (at 10⁶
#: rows of sin 2πx plus noise, 0.0014 and 0.00036 by seed against a best of 0.0035).
EXACT_SEARCH_ROWS = 100_000


def binned_reason(X, kernel, discrete):
    """Why the binned tier cannot fit ``X`` (``""``: it can); ``discrete``: whether
    categorical or ordinal features were given."""
    if discrete:
        return (
            "the binned sums are for continuous features only (categorical_features "
            "or ordinal_features were given)"
        )
    if kernel != "gaussian":
        return (
            f"the binned sums are for the Gaussian kernel (the sums of a local "
            f"polynomial as convolutions of its moments); got kernel={kernel!r}"
        )
    if not 1 <= X.shape[1] <= MAX_DIMS:
        return (
            f"the binned sums support 1 or {MAX_DIMS} features (a grid has G^d "
            f"points); X has {X.shape[1]}"
        )
    if not np.all(np.ptp(X, axis=0) > 0):
        return "every feature must vary in the training set to put a grid on it"
    return ""


def check_binned_possible(algorithm, reason):
    """A ``ValueError`` for ``algorithm="binned"`` where the tier cannot fit (``reason``
    from :func:`binned_reason`)."""
    if algorithm == "binned" and reason:
        raise ValueError(
            f"algorithm='binned' is not possible here: {reason}. Use "
            "algorithm='exact' (or 'auto', which chooses it)."
        )


def search_on_bins(bandwidth, n_rows, reason):
    """Whether an exact-tier criterion is searched on binned sums over every row: for
    more than ``EXACT_SEARCH_ROWS`` rows, where the exact search would evaluate it on
    2 400 sampled queries only (too noisy there to find the minimum)."""
    return (
        isinstance(bandwidth, str)
        and bandwidth in CRITERIA
        and n_rows > EXACT_SEARCH_ROWS
        and not reason
    )


def search_tier(algorithm, bandwidth, kernel, X, Y, degree, reason):
    r"""The tier the bandwidth is selected on: ``"binned"`` for ``algorithm="binned"``,
    for ``"auto"`` where the cost model prefers the binned sums at the normal-reference
    bandwidth :math:`\sigma_j n^{-1/(d+4)}` (or at the given bandwidth) for predicting
    the training rows (``degree`` the highest the fit may take)."""
    check_binned_possible(algorithm, reason)
    if algorithm == "exact" or reason:
        return "exact"
    if algorithm == "binned":
        return "binned"
    if len(X) < AUTO_MIN_ROWS:
        return "exact"
    if isinstance(bandwidth, str):
        unit = power_of_two_scale(X, axis=0)
        h = np.std(X / unit, axis=0) * len(X) ** (-1.0 / (X.shape[1] + 4)) * unit
    else:
        h = _given_bandwidth(bandwidth, kernel, X, Y)
        if h is None:
            return "exact"
    return _cheaper(X, h, degree, Y.shape[1])


def _cheaper(X, h, degree, n_outputs):
    """:func:`~kernattn.smoother._binned.cost.choose_algorithm` for predicting the
    training rows, at the tolerance or, where that grid does not fit in memory, at
    ``MAX_TOLERANCE`` (in units of a power of two per input, where no square or sum
    overflows)."""
    unit = power_of_two_scale(X, axis=0)
    for tol in (TOLERANCE, MAX_TOLERANCE):
        choice = choose_algorithm(
            X / unit, h / unit, len(X), degree=degree, n_outputs=2 * n_outputs, tol=tol
        )
        if choice == "binned":
            return choice
    return "exact"


def _cheaper_at(X, h, degree, n_outputs, tol):
    """Whether the fit's own grid at ``tol`` (one that fits, :func:`binned_tolerance`)
    costs less than the exact sums for predicting the training rows. The cost model's
    memory check (:func:`_cheaper`, on the FFT's padded grid) is stricter than the fit's:
    a grid that fits only at the coarser tolerances would otherwise leave a fit of
    millions of rows to sums over every pair of rows."""
    unit = power_of_two_scale(X, axis=0)
    grid = make_grid(X / unit, h / unit, degree=degree, tol=tol, levels=1)
    binned = binned_cost(len(X), len(X), grid.shape, degree=degree, n_outputs=2 * n_outputs)
    return binned < exact_cost(len(X), len(X), degree=degree)


def _given_bandwidth(bandwidth, kernel, X, Y):
    """A numeric ``bandwidth`` as one per feature, or ``None`` if it is not valid (the
    exact path then says why)."""
    try:
        return resolve_bandwidth(bandwidth, X, Y, None, kernel)[0]
    except (ValueError, TypeError):
        return None


def final_tier(algorithm, X, h, degree, n_outputs, reason):
    """The tier of the fitted smoother at its bandwidth ``h`` and its binning tolerance
    (``None`` on the exact tier): binned where the search tier was (or
    ``algorithm="auto"`` prefers it now) and its grid fits in ``working_memory``."""
    if algorithm == "exact" or reason:
        return "exact", None
    if algorithm == "auto":
        if len(X) < AUTO_MIN_ROWS:
            return "exact", None
        tol = binned_tolerance(X, h, degree, n_outputs)
        if tol is None:
            return "exact", None
        if _cheaper(X, h, degree, n_outputs) == "binned" or _cheaper_at(
            X, h, degree, n_outputs, tol
        ):
            return "binned", tol
        return "exact", None
    tol = binned_tolerance(X, h, degree, n_outputs)
    if tol is None:
        raise ValueError(
            f"algorithm='binned' is not possible here: the grid for the bandwidth "
            f"{np.array2string(np.asarray(h), precision=4)} at the binning tolerance "
            f"{MAX_TOLERANCE:g} needs more memory than working_memory allows (a bandwidth "
            "far below the data's range). Use algorithm='exact' or 'auto', or raise "
            "sklearn's working_memory."
        )
    return "binned", tol


def binned_tolerance(X, h, degree, n_outputs):
    """The smallest tolerance (``TOLERANCE`` times a power of two, at most
    ``MAX_TOLERANCE``) whose grid fits in ``working_memory``; ``None`` if none does."""
    tol = TOLERANCE
    while tol <= MAX_TOLERANCE * (1 + 1e-9):
        if BinnedKernel.fits(X, h, degree, n_outputs, tol=tol):
            return tol
        tol *= 2.0
    return None
