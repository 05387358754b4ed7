"""The criteria's sums over the training rows (left-out and in-sample errors, the
trace of the smoother) and the criteria from them."""

import math
from typing import NamedTuple

import numpy as np
from scipy.spatial import cKDTree

from kernattn._core.blocks import map_query_blocks
from kernattn.smoother._binned.cells import cell_statistics
from kernattn.smoother._binned.checks import check_points, check_targets, check_weights
from kernattn.smoother._binned.exponents import basis_in_moments, moment_exponents
from kernattn.smoother._binned.grid import interpolate_columns, locate_cells, same_grid
from kernattn.smoother._binned.left_out import in_sample_fit, left_out_fit, own_moments


class NearestOther:
    """The target of each row's nearest other row (the tree is built on first use).

    The limit of the left-out estimate as the kernel sharpens: a row whose left-out sums
    fall below the resolution (no other row within the kernel's reach) is predicted by it.
    """

    def __init__(self, X, Y):
        self.X = X
        self.Y = Y
        self._tree = None

    def targets(self, rows):
        if self._tree is None:
            self._tree = cKDTree(self.X)
        _, nearest = self._tree.query(self.X[rows], k=2)
        other = np.where(nearest[:, 0] == rows, nearest[:, 1], nearest[:, 0])
        return self.Y[other]


class RowStatistics(NamedTuple):
    """What the criteria need, summed over the training rows (:func:`row_statistics`).

    ``loo_sse``: :math:`\\sum_i s_i \\|y_i - \\hat y_{-i}\\|^2`; ``rss``:
    :math:`\\sum_i s_i \\|y_i - \\hat y_i\\|^2`; ``trace``: :math:`\\mathrm{tr}\\,S`;
    ``total``: :math:`\\sum_i s_i`; ``n_unresolved``: rows predicted by their nearest
    other row (:class:`NearestOther`)."""

    loo_sse: float
    rss: float
    trace: float
    total: float
    n_unresolved: int


def _row_block(sums, X, Y, s, own_w, own_v):
    """Per-row sums (loo_sse, rss, trace, unresolved rows) over one block of rows."""
    d = sums.grid.n_dims
    moments = moment_exponents(sums.degree, d)
    basis_pos = basis_in_moments(sums.degree, d)
    ratio = sums.grid.spacing / sums.bandwidth
    center = sums.bins.center
    index, fraction, _ = locate_cells(X, sums.grid)
    S, T = sums.split(interpolate_columns(sums.table, sums.grid, index, fraction))
    own = own_moments(fraction, ratio, moments)
    own_basis = own[basis_pos]
    Yc = (Y - center).T  # (t, b)
    f, g = in_sample_fit(sums, S, T, own_basis)
    rss = float(np.sum(s * np.sum((Yc - f) ** 2, axis=0)))
    trace = float(np.sum(s * g))
    # The left-out fit: the row's (or its group's) weight and weighted target removed.
    # ŷ₋ᵢ = α − γ·(own targets)/(own weight), so pass the group's mean target.
    alpha, gamma, resolved = left_out_fit(sums, S - own_w * own, T, own_basis, own_w)
    with np.errstate(divide="ignore", invalid="ignore"):
        own_mean = np.where(own_w > 0, (own_v.T - own_w * center[:, None]) / own_w, 0.0)
    residual = (Yc - alpha + gamma * own_mean)[:, resolved]
    sse = float(np.sum(s[resolved] * np.sum(residual**2, axis=0)))
    return sse, rss, trace, np.flatnonzero(~resolved)


def row_statistics(
    sums,
    X,
    Y,
    sample_weight=None,
    *,
    own_weight=None,
    own_values=None,
    neighbours=None,
    cells=None,
    n_jobs=None,
):
    r"""Left-out and in-sample errors and the trace of the smoother at every training row.

    At row :math:`i` the moments are interpolated from the grid; the in-sample fit solves
    with them, the left-out fit with the row's own contribution removed
    (:func:`own_moments` times its weight, and times its target for the value moments);
    :math:`S_{ii} = s_i\, \text{first\_row} \cdot o_i`. Cost :math:`O(n)` per bandwidth,
    on threads; with ``cells`` (unweighted rows in 1-D) :math:`O(G)`.

    Parameters
    ----------
    sums : GridSums
        From the binned ``X, Y, sample_weight`` (the same rows).
    X, Y, sample_weight : array_like
    own_weight : ndarray of shape (n,), optional
        The weight to leave out for each row (default its own ``s_i``; the sum over its
        group of exact duplicates leaves the duplicates out too).
    own_values : ndarray of shape (n, t), optional
        :math:`\sum s_j y_j` over the same rows (default :math:`s_i y_i`).
    neighbours : NearestOther, optional
        Reused across bandwidths; made here when needed and not given.
    cells : CellMoments, optional
        Of these rows on the sums' data grid (:func:`cell_moments`); only without sample
        weights or own-weight overrides.
    n_jobs : int, optional
        Threads.

    Returns
    -------
    RowStatistics
    """
    grid = sums.grid
    d = grid.n_dims
    X = check_points(X, d)
    Y = check_targets(Y, len(X))
    s = check_weights(sample_weight, len(X))
    if cells is not None:
        if s is not None or own_weight is not None or own_values is not None:
            raise ValueError("cells hold unweighted rows; pass no weights with them")
        same_center = np.array_equal(cells.center, sums.bins.center)
        if not (same_grid(cells.grid, sums.bins.grid) and same_center):
            raise ValueError("cells were made on another grid than the sums")
    s = np.ones(len(X)) if s is None else s
    own_w = s if own_weight is None else np.asarray(own_weight, dtype=float)
    own_v = s[:, None] * Y if own_values is None else np.asarray(own_values, dtype=float)
    own_v = own_v.reshape(len(X), -1)

    def block(rows):
        sse, rss, trace, bad = _row_block(
            sums, X[rows], Y[rows], s[rows], own_w[rows], own_v[rows]
        )
        return sse, rss, trace, rows.start + bad

    if cells is not None:
        loo_sse, rss, trace, bad_cells = cell_statistics(sums, cells)
        unresolved = np.empty(0, dtype=np.intp)
        if len(bad_cells):
            index, _, _ = locate_cells(X, cells.grid)
            rows = np.flatnonzero(np.isin(index[:, 0], bad_cells))
            sse, _, _, bad = _row_block(sums, X[rows], Y[rows], s[rows], own_w[rows], own_v[rows])
            loo_sse += sse
            unresolved = rows[bad]
    else:
        parts = map_query_blocks(
            block, len(X), 4 * sums.table.shape[1], n_jobs=n_jobs, cache=2**20
        )
        loo_sse = sum(p[0] for p in parts)
        rss = sum(p[1] for p in parts)
        trace = sum(p[2] for p in parts)
        unresolved = np.concatenate([p[3] for p in parts])
    if len(unresolved):
        neighbours = NearestOther(X, Y) if neighbours is None else neighbours
        residual = Y[unresolved] - neighbours.targets(unresolved)
        loo_sse += float(np.sum(s[unresolved] * np.sum(residual**2, axis=1)))
    return RowStatistics(loo_sse, rss, trace, float(s.sum()), len(unresolved))


#: The criteria :func:`criterion_value` evaluates.
CRITERIA = ("loo", "gcv", "aic")


def criterion_value(criterion, stats, n_observations=None):
    r"""A bandwidth-selection criterion from :class:`RowStatistics`, in the targets' units.

    ``"loo"``: :math:`\sum_i s_i\|y_i - \hat y_{-i}\|^2 / W`; ``"gcv"``:
    :math:`\hat\sigma^2/(1 - \mathrm{tr}\,S/n)^2`; ``"aic"`` (AICc of Hurvich, Simonoff
    and Tsai, 1998): :math:`\log\hat\sigma^2 + (1 + \mathrm{tr}\,S/n)/(1 - (\mathrm{tr}\,S
    + 2)/n)`; with :math:`\hat\sigma^2 = \mathrm{RSS}/W`, :math:`W = \sum_i s_i` the
    weights the statistics were taken with and :math:`n` the observations
    (``n_observations``, the sum of the sample weights: an integer weight counts as that
    many rows; :math:`W` when not given). A trace that leaves no degrees of freedom gives
    ``inf``.

    Examples
    --------
    >>> stats = RowStatistics(loo_sse=12.0, rss=8.0, trace=2.0, total=10.0, n_unresolved=0)
    >>> [round(criterion_value(c, stats), 4) for c in CRITERIA]
    [1.2, 1.25, 1.7769]
    """
    total = stats.total
    if criterion == "loo":
        return stats.loo_sse / total
    n = total if n_observations is None else n_observations
    sigma2 = stats.rss / total
    tau = stats.trace / n
    if criterion == "gcv":
        return sigma2 / (1.0 - tau) ** 2 if tau < 1.0 else np.inf
    if criterion == "aic":
        room = 1.0 - tau - 2.0 / n
        return math.log(max(sigma2, 1e-300)) + (1.0 + tau) / room if room > 0 else np.inf
    raise ValueError(
        f"criterion must be one of {', '.join(map(repr, CRITERIA))}; got {criterion!r}"
    )
