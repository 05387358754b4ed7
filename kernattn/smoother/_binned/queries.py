r"""The binned estimate at queries: the moments interpolated from the grid, or taken
directly from the bins where the grid holds no data near.

**No data near.** Where the interpolated :math:`S_0` is below
:data:`~kernattn.smoother._binned.moments.RESOLUTION` times the total weight (beyond the
extended grid, or where FFT rounding could dominate), the moments are recomputed directly
from the non-empty bins with the largest logit subtracted (the log-sum-exp shift of the
exact estimator), so a far query gets the limit of the estimator: its nearest bins dominate
and the ridge of the solve makes the fit their local constant.
"""

import numpy as np

from kernattn._core.blocks import iter_query_blocks, map_query_blocks
from kernattn._core.sums import shifted_exp
from kernattn.smoother._binned.checks import check_points
from kernattn.smoother._binned.exponents import basis_exponents, basis_in_moments, moment_exponents
from kernattn.smoother._binned.grid import interpolate_columns, locate_cells
from kernattn.smoother._binned.solve import solve_columns


def _direct_moments(bins, bandwidth, degree, queries):
    """The moments (S (Q, m), T (P, t, m)) at ``queries`` straight from the non-empty
    bins, with each query's largest logit subtracted (a per-query factor that cancels in
    the solve)."""
    grid = bins.grid
    d = grid.n_dims
    flat = bins.counts.reshape(grid.size, -1)
    keep = flat[:, 0] > 0
    points = grid.points()[keep] / bandwidth
    log_w = np.log(flat[keep, 0])
    means = flat[keep, 1:] / flat[keep, :1]
    moments = moment_exponents(degree, d)
    basis_pos = basis_in_moments(degree, d)
    S = np.empty((len(moments), len(queries)))
    T = np.empty((len(basis_pos), means.shape[1], len(queries)))
    for rows in iter_query_blocks(len(queries), len(points), n_arrays=d + 3):
        q = queries[rows] / bandwidth
        u = [points[None, :, a] - q[:, a, None] for a in range(d)]
        E = shifted_exp(log_w - 0.5 * sum(v * v for v in u), axis=1)
        for k, e in enumerate(moments):
            term = E
            for a in range(d):
                if e[a]:
                    term = term * u[a] ** e[a]
            S[k, rows] = term.sum(axis=1)
            pos = np.flatnonzero(basis_pos == k)
            if len(pos):
                T[pos[0], :, rows] = (term @ means).T
    return S, T


def _query_columns(sums, queries):
    """Moments S (Q, m), T (P, t, m) at checked ``queries`` (see :func:`query_moments`)."""
    index, fraction, inside = locate_cells(queries, sums.grid)
    S, T = sums.split(interpolate_columns(sums.table, sums.grid, index, fraction))
    unserved = ~inside | (S[0] <= sums.resolution)
    if np.any(unserved):
        S[:, unserved], T[..., unserved] = _direct_moments(
            sums.bins, sums.bandwidth, sums.degree, queries[unserved]
        )
    return S, T


def query_moments(sums, queries):
    """The moments at ``queries``: interpolated from the grid, or, where the interpolated
    :math:`S_0` is below the sums' resolution (no data within reach, or beyond the
    extended grid), recomputed directly from the bins (module docstring).

    Returns
    -------
    S : ndarray of shape (m, Q)
    T : ndarray of shape (m, P, t)
    """
    queries = check_points(queries, sums.grid.n_dims, name="queries")
    S, T = _query_columns(sums, queries)
    return S.T, np.moveaxis(T, -1, 0)


def predict(sums, queries, *, return_coefficients=False, n_jobs=None):
    r"""The binned local-polynomial estimate at ``queries``.

    Within the data's range the error against the exact estimate is below
    :func:`~kernattn.smoother._binned.error.binning_error` of the grid, relative to the
    local spread of the targets.
    Beyond it the local polynomial extrapolates, and its error (binned or not) grows
    like the distance in bandwidths to the power of the degree.

    Parameters
    ----------
    sums : GridSums
    queries : array_like of shape (m, d)
    return_coefficients : bool
        Also return the local polynomial's coefficients
        (:func:`~kernattn.smoother._binned.solve.solve_local_polynomial`; the intercept
        there excludes the targets' center).
    n_jobs : int, optional
        Threads over blocks of queries.

    Returns
    -------
    estimate : ndarray of shape (m, t)
    coefficients : ndarray of shape (m, P, t), if asked

    Examples
    --------
    >>> from kernattn.smoother._binned.binning import bin_targets
    >>> from kernattn.smoother._binned.grid import make_grid
    >>> from kernattn.smoother._binned.moments import grid_sums
    >>> x = np.linspace(0, 1, 201)[:, None]
    >>> grid = make_grid(x, 0.1, degree=1)
    >>> sums = grid_sums(bin_targets(x, 2 * x[:, 0] + 1, grid), 0.1, degree=1)
    >>> predict(sums, [[0.25], [0.5], [0.75]])[:, 0]
    array([1.5, 2. , 2.5])
    """
    queries = check_points(queries, sums.grid.n_dims, name="queries")
    d, t = sums.grid.n_dims, sums.n_outputs
    P = len(basis_exponents(sums.degree, d))
    estimate = np.empty((len(queries), t))
    coefficients = np.empty((len(queries), P, t)) if return_coefficients else None

    def block(rows):
        S, T = _query_columns(sums, queries[rows])
        coef, _ = solve_columns(S, T, sums.degree, d)
        estimate[rows] = coef[0].T + sums.bins.center
        if coefficients is not None:
            coefficients[rows] = np.moveaxis(coef, -1, 0)

    map_query_blocks(block, len(queries), 4 * sums.table.shape[1], n_jobs=n_jobs, cache=2**20)
    return (estimate, coefficients) if return_coefficients else estimate
