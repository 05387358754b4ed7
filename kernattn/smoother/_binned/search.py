r"""Bandwidth selection on binned sums: a criterion curve on a log grid, then refinement.

A criterion of the smoother (leave-one-out, GCV or AICc;
:func:`kernattn.smoother._binned.statistics.criterion_value`) costs :math:`O(G \log G + n)`
per bandwidth on the bins (:math:`O(G)` for unweighted rows in one dimension), so the whole
curve can be searched at millions of rows, on every row rather than on a subset of queries:

1. **Curve.** The criterion at common factors :math:`c` of a reference bandwidth
   :math:`h_{\text{ref}} = \hat\sigma_a\, n^{-1/(d+4)}` (the normal-reference rate), on a
   log grid from 1/16 to 4 (steps of √2), on grids meeting a coarse tolerance
   (:data:`COARSE_TOLERANCE`): from :math:`c = 1` downhill until the criterion rises on
   both sides of the best factor (or the grid ends). The curve only has to show the basin.
2. **Refinement.** Brent's bounded search of :math:`\log c` between the neighbours of the
   best grid factor, on grids meeting ``tol``; in two dimensions then one pass of the same
   search along each input's own log-bandwidth (within a factor 2).

The criterion needs less accuracy than the estimate: its binning error is nearly the same
relative error at every bandwidth (the grids keep :math:`h/\delta` fixed), so it does not
move the minimum. Measured on :math:`\sin 2\pi x` plus noise (1-D and 2-D, 10⁵ rows), the
leave-one-out curves on grids for tolerances 0.1, 0.01 and 0.003 agree to 5e-6 relative
around the minimum and have the same minimiser; the search therefore uses
:data:`SEARCH_TOLERANCE` (the fit at the chosen bandwidth uses the estimate's tolerance).

The rows are binned once, on the grid that the smallest bandwidth of the search needs,
with at most :data:`CELLS_PER_ROW` cells per row (finer grids cost more than the per-row
work they would save; bandwidths smaller than the grid can serve at ``tol`` are evaluated
on it anyway, a little less accurately) and within ``working_memory``; every larger
bandwidth uses that grid coarsened by a power of two
(:func:`kernattn.smoother._binned.binning.coarsen`,
exact), so the search costs one pass over the rows for the binning and, per bandwidth,
one for the criterion (none for unweighted rows in one dimension).

This is a fitting helper (plain settings in, values out), meant for the bandwidth
package's search when the estimator's binned tier calls it.
"""

import math
from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize_scalar

from kernattn._core.numerics import power_of_two_scale
from kernattn.smoother._binned.binning import bin_targets, coarsen
from kernattn.smoother._binned.cells import cell_moments, coarsen_cells
from kernattn.smoother._binned.error import binning_error, points_per_bandwidth
from kernattn.smoother._binned.exponents import basis_exponents, moment_exponents
from kernattn.smoother._binned.grid import grid_fits, locate, make_grid
from kernattn.smoother._binned.moments import CUTOFF, grid_sums, sums_fit
from kernattn.smoother._binned.statistics import (
    CRITERIA,
    NearestOther,
    criterion_value,
    row_statistics,
)

__all__ = [
    "CELLS_PER_ROW",
    "COARSE_TOLERANCE",
    "FACTORS",
    "SEARCH_TOLERANCE",
    "BinnedCriterion",
    "BinnedSearch",
    "search_bandwidth",
]

#: Tolerance of the grids of the refinement (module docstring).
SEARCH_TOLERANCE = 1e-2
#: Tolerance of the grids of the first stage (the curve only has to show the basin).
COARSE_TOLERANCE = 3e-2
#: The finest grid of a search has at most this many cells per row (and 2¹⁶ anyway).
CELLS_PER_ROW = 2
#: Common factors of the reference bandwidth on the curve: 1/16 to 4, steps of √2.
FACTORS = 2.0 ** np.arange(-4.0, 2.01, 0.5)
# Brent's search stops when the log-bandwidth is known to within this (2 %; the test
# error of a local line rises by about 2ε² at a relative bandwidth error ε).
_XATOL = 0.02
# The per-input pass moves each log-bandwidth by at most log 2.
_AXIS_RANGE = math.log(2.0)


class BinnedSearch(NamedTuple):
    """The result of :func:`search_bandwidth`.

    Attributes
    ----------
    bandwidth : ndarray of shape (d,)
    value : float
        The criterion there (targets' units).
    reference : ndarray of shape (d,)
        :math:`h_{\\text{ref}}`.
    factors, curve : ndarray
        The first stage's common factors and criterion values (``nan`` where the walk
        did not go, ``inf`` where the grid could not be afforded).
    n_evaluations : int
    binning_error : float
        The error bound of the grid the final value was computed on.
    at_edge : bool
        The curve's minimum is at its smallest or largest factor: widen ``factors``.
    """

    bandwidth: np.ndarray
    value: float
    reference: np.ndarray
    factors: np.ndarray
    curve: np.ndarray
    n_evaluations: int
    binning_error: float
    at_edge: bool


class BinnedCriterion:
    """A criterion as a function of the bandwidth, on rows binned once.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    Y : ndarray of shape (n, t)
    sample_weight : ndarray of shape (n,) or None
    degree : int
    criterion : {"loo", "gcv", "aic"}
    min_bandwidth : ndarray of shape (d,)
        The smallest bandwidth the grid must serve at ``tol``.
    levels : int
        Times the grid may be halved (for the larger bandwidths).
    tol : float
    n_jobs : int, optional
    n_observations : float, optional
        What ``"gcv"`` and ``"aic"`` count as observations: the sum of the sample weights
        (given where ``sample_weight`` is ``None`` for weights that are all equal);
        ``sample_weight``'s sum, or the rows, when not given.
    """

    def __init__(
        self,
        X,
        Y,
        sample_weight,
        *,
        degree,
        criterion,
        min_bandwidth,
        levels,
        tol,
        n_jobs=None,
        n_observations=None,
    ):
        if criterion not in CRITERIA:
            raise ValueError(
                f"criterion must be one of {', '.join(map(repr, CRITERIA))}; got {criterion!r}"
            )
        self.degree, self.criterion, self.n_jobs = degree, criterion, n_jobs
        self.n_observations = n_observations
        d = X.shape[1]
        n_cols = len(moment_exponents(degree, d)) + len(basis_exponents(degree, d)) * Y.shape[1]
        span = np.ptp(X, axis=0)
        # The finest grid: tol at min_bandwidth, or as fine as the cell budget and
        # working_memory allow.
        spacing = np.asarray(min_bandwidth) / points_per_bandwidth(degree, d, tol)
        budget = max(CELLS_PER_ROW * len(X), 2**16)
        while True:
            cells = np.ceil(span / spacing) + 1
            reach = np.ceil(CUTOFF * np.asarray(min_bandwidth) / spacing)
            fits = np.prod(cells) <= budget and grid_fits(int(np.prod(cells + 2 * reach)), n_cols)
            if fits or np.all(cells < 64):
                break
            spacing = spacing * 1.25
        self.levels = levels
        grid = make_grid(
            X,
            spacing * points_per_bandwidth(degree, d, tol),
            degree=degree,
            tol=tol,
            levels=levels,
        )
        self.bins = {0: bin_targets(X, Y, grid, sample_weight)}
        self.cells = {}
        # A row is left out with its exact duplicates, as on the exact tier: rows repeated
        # and integer weights then give the same criterion.
        own_weight, own_values = _duplicate_groups(X, Y, sample_weight)
        if d == 1 and sample_weight is None and own_weight is None:
            self.cells[0] = cell_moments(X, Y, self.bins[0])
        else:
            # The per-row statistics gather the sums of each row's cell: rows in cell order
            # read the table in order (several times faster than in random order).
            index, _, _ = locate(X, grid)
            cell = index[:, 0] * grid.shape[1] + index[:, 1] if d == 2 else index[:, 0]
            order = np.argsort(cell, kind="stable")
            X, Y = X[order], Y[order]
            sample_weight = None if sample_weight is None else sample_weight[order]
            if own_weight is not None:
                own_weight, own_values = own_weight[order], own_values[order]
        self.X, self.Y, self.sample_weight = X, Y, sample_weight
        self.own_weight, self.own_values = own_weight, own_values
        self.neighbours = NearestOther(X, Y)
        self.n_evaluations = 0
        self.last_error = np.nan

    def level(self, bandwidth, tol):
        """The coarsest level whose spacing still meets ``tol`` at ``bandwidth``."""
        spacing = self.bins[0].grid.spacing
        d = len(spacing)
        room = np.min(np.asarray(bandwidth) / points_per_bandwidth(self.degree, d, tol) / spacing)
        return int(np.clip(math.floor(math.log2(room)) if room > 0 else 0, 0, self.levels))

    def _bins(self, level):
        if level not in self.bins:
            fine = self.bins[0]
            counts, grid = coarsen(fine.counts, fine.grid, 2**level)
            self.bins[level] = type(fine)(grid, counts, fine.center)
            if 0 in self.cells:
                self.cells[level] = coarsen_cells(self.cells[0], 2**level)
        return self.bins[level], self.cells.get(level)

    def __call__(self, bandwidth, tol):
        """The criterion at ``bandwidth`` (array of d), on a grid meeting ``tol`` (or the
        finest); ``inf`` where even that grid's sums do not fit in memory."""
        bins, cells = self._bins(self.level(bandwidth, tol))
        if not sums_fit(bins, bandwidth, self.degree):
            return np.inf
        sums = grid_sums(bins, bandwidth, self.degree)
        stats = row_statistics(
            sums,
            self.X,
            self.Y,
            self.sample_weight,
            own_weight=self.own_weight,
            own_values=self.own_values,
            neighbours=self.neighbours,
            cells=cells,
            n_jobs=self.n_jobs,
        )
        self.n_evaluations += 1
        self.last_error = binning_error(bins.grid.spacing, bandwidth, self.degree)
        return criterion_value(self.criterion, stats, self.n_observations)


def _duplicate_groups(X, Y, sample_weight):
    """Per row, the summed weight and weighted targets of its group of exact duplicates
    of the inputs (``None, None`` where every input is distinct)."""
    # The estimator passes its rows sorted by inputs (duplicates adjacent): checked in
    # O(n), the sort only otherwise.
    ordered = True
    tied = np.ones(max(len(X) - 1, 0), dtype=bool)
    for a in range(X.shape[1]):
        step = X[1:, a] - X[:-1, a]
        ordered = ordered and not np.any(tied & (step < 0))
        tied &= step == 0
    if ordered:
        first = np.ones(len(X), dtype=bool)
        first[1:] = np.any(X[1:] != X[:-1], axis=1)
        group = np.cumsum(first) - 1
    else:
        _, group = np.unique(X, axis=0, return_inverse=True)
        group = group.ravel()
    n_groups = int(group.max()) + 1 if len(X) else 0
    if n_groups == len(X):
        return None, None
    s = np.ones(len(X)) if sample_weight is None else sample_weight
    weight = np.bincount(group, s, minlength=n_groups)[group]
    values = np.column_stack(
        [np.bincount(group, s * Y[:, o], minlength=n_groups)[group] for o in range(Y.shape[1])]
    )
    return weight, values


def _check(X, Y, sample_weight):
    X = np.asarray(X, dtype=float)
    X = X[:, None] if X.ndim == 1 else X
    Y = np.asarray(Y, dtype=float)
    Y = Y[:, None] if Y.ndim == 1 else Y
    if X.ndim != 2 or not 1 <= X.shape[1] <= 2:
        raise ValueError(f"the binned search supports 1 or 2 inputs; got X of shape {X.shape}")
    if Y.shape[0] != X.shape[0] or Y.ndim != 2:
        raise ValueError(f"Y must have {X.shape[0]} rows; got shape {Y.shape}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(Y))):
        raise ValueError("X and Y must be finite (no NaN or infinity)")
    s = None if sample_weight is None else np.asarray(sample_weight, dtype=float)
    return X, Y, s


def _reference_bandwidth(X, s):
    r"""The normal-reference bandwidths :math:`\sigma_j n_{\text{eff}}^{-1/(d+4)}` (the
    weighted standard deviations, Kish's effective number of rows)."""
    n, d = X.shape
    # Divided by a power of two near the largest (exact): weights near 1e300 overflow n_eff.
    weights = np.ones(n) if s is None else s / power_of_two_scale(s)
    mean = np.average(X, axis=0, weights=weights)
    sigma = np.sqrt(np.average((X - mean) ** 2, axis=0, weights=weights))
    if not np.all(sigma > 0):
        raise ValueError("every input must vary: a constant input has no bandwidth")
    n_eff = weights.sum() ** 2 / np.sum(weights**2)
    return sigma * n_eff ** (-1.0 / (d + 4))


def _descend(evaluate, factors, reference, tol):
    """The first stage: from the factor nearest 1, down the curve of the criterion over
    ``factors`` times ``reference`` (at the binning tolerance ``tol``) to a local minimum;
    its index and the curve (NaN where not evaluated)."""
    curve = np.full(len(factors), np.nan)

    def at(i):
        if np.isnan(curve[i]):
            curve[i] = evaluate(factors[i] * reference, tol)
        return curve[i]

    best = int(np.argmin(np.abs(np.log(factors))))  # the factor nearest 1
    while True:
        neighbours = [i for i in (best - 1, best + 1) if 0 <= i < len(factors)]
        values = [at(i) for i in neighbours]
        if min(values) >= at(best):
            break
        best = neighbours[int(np.argmin(values))]
    return best, curve


def search_bandwidth(
    X,
    Y,
    sample_weight=None,
    *,
    degree=1,
    criterion="loo",
    tol=SEARCH_TOLERANCE,
    factors=FACTORS,
    per_axis=True,
    n_jobs=None,
    n_observations=None,
):
    """The bandwidth minimising a criterion on the binned sums (module docstring).

    Parameters
    ----------
    X : array_like of shape (n, d), d ≤ 2
    Y : array_like of shape (n,) or (n, t)
    sample_weight : array_like of shape (n,), optional
    degree : int
        Of the local polynomial.
    criterion : {"loo", "gcv", "aic"}
    tol : float
        Binning tolerance of the refinement's grids (relative to the spread of the
        targets; the first stage's is the larger of this and ``COARSE_TOLERANCE``).
    factors : array_like
        Common factors of the reference bandwidth on the first stage's curve.
    per_axis : bool
        In two dimensions, refine each input's bandwidth on its own after the common
        factor.
    n_jobs : int, optional
        Threads of the per-row statistics.
    n_observations : float, optional
        What ``"gcv"`` and ``"aic"`` count as observations (:class:`BinnedCriterion`).

    Returns
    -------
    BinnedSearch

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(size=20000)
    >>> y = np.sin(2 * np.pi * x) + rng.normal(scale=0.3, size=20000)
    >>> result = search_bandwidth(x, y)
    >>> round(float(result.bandwidth[0]), 3), result.at_edge
    (0.018, False)
    """
    X, Y, s = _check(X, Y, sample_weight)
    n, d = X.shape
    factors = np.sort(np.asarray(factors, dtype=float))
    reference = _reference_bandwidth(X, s)
    coarse_tol = max(COARSE_TOLERANCE, tol)
    levels = max(int(math.floor(math.log2(factors[-1] / factors[0]))), 0)
    evaluate = BinnedCriterion(
        X,
        Y,
        s,
        degree=degree,
        criterion=criterion,
        min_bandwidth=factors[0] * reference,
        levels=levels,
        tol=tol,
        n_jobs=n_jobs,
        n_observations=n_observations,
    )
    best, curve = _descend(evaluate, factors, reference, coarse_tol)
    at_edge = best in (0, len(factors) - 1)
    lo = math.log(factors[max(best - 1, 0)])
    hi = math.log(factors[min(best + 1, len(factors) - 1)])
    cache = {}

    def along(log_h, direction, base):
        key = (round(float(log_h), 12), direction)
        if key not in cache:
            if direction is None:
                log_bandwidth = np.log(reference) + log_h
            else:
                log_bandwidth = base.copy()
                log_bandwidth[direction] = log_h
            cache[key] = evaluate(np.exp(log_bandwidth), tol)
        return cache[key]

    found = minimize_scalar(
        lambda c: along(c, None, None),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": _XATOL},
    )
    log_bandwidth = np.log(reference) + found.x
    value = found.fun
    if d > 1 and per_axis:
        for a in range(d):
            start = log_bandwidth.copy()
            found = minimize_scalar(
                lambda c, a=a, start=start: along(c, a, start),
                bounds=(start[a] - _AXIS_RANGE, start[a] + _AXIS_RANGE),
                method="bounded",
                options={"xatol": _XATOL},
            )
            if found.fun < value:
                log_bandwidth[a] = found.x
                value = found.fun
    bandwidth = np.exp(log_bandwidth)
    error = binning_error(
        evaluate._bins(evaluate.level(bandwidth, tol))[0].grid.spacing, bandwidth, degree
    )
    return BinnedSearch(
        bandwidth, float(value), reference, factors, curve, evaluate.n_evaluations, error, at_edge
    )
