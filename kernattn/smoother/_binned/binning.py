"""Linear binning of weighted rows onto a grid, and its exact coarsening."""

from typing import NamedTuple

import numpy as np

from kernattn._core.blocks import iter_query_blocks
from kernattn.smoother._binned.checks import check_points, check_targets, check_weights
from kernattn.smoother._binned.grid import Grid, corners, locate


def _accumulate(counts, X, values, grid, truncate=False):
    """Add the linear binning of one block of rows to ``counts`` (grid.size, m).

    One ``bincount`` per column over every corner and over the range of grid points the
    block reaches: its output is that long, so a call per corner would pass over it ``2^d``
    times as often."""
    index, fraction, inside = locate(X, grid)
    if not np.all(inside):
        if not truncate:
            raise ValueError("X has points outside the grid; make the grid from X")
        index, fraction, values = index[inside], fraction[inside], values[inside]
    bin_located(index, fraction, values, grid, counts)


def bin_located(index, fraction, values, grid, counts=None):
    """The linear binning of rows already located in ``grid`` (:func:`locate`'s ``index``
    and ``fraction``, of rows inside it) over the range of grid points (flat indices) they
    reach: its first point and the counts there (points, m); with ``counts`` (grid.size,
    m), added to them instead."""
    m = values.shape[1]
    flat, weight = zip(*corners(index, fraction, grid.shape), strict=True)
    flat, weight = np.concatenate(flat), np.concatenate(weight)
    if not len(flat):
        return 0, np.zeros((0, m))
    lo, hi = int(flat.min()), int(flat.max()) + 1
    flat -= lo
    shares = np.empty_like(weight)
    out = np.empty((hi - lo, m)) if counts is None else counts[lo:hi]
    for j in range(m):
        for k in range(2**grid.n_dims):
            part = slice(k * len(values), (k + 1) * len(values))
            np.multiply(weight[part], values[:, j], out=shares[part])
        sums = np.bincount(flat, weights=shares, minlength=hi - lo)
        if counts is None:
            out[:, j] = sums
        else:
            out[:, j] += sums
    return lo, out


def block_entries(X, grid, m):
    """Entries per array of a binning block. Rows in order along the first input (the
    estimators' canonical order) reach a band of the grid per block, so cache-sized blocks
    serve; other rows reach the whole grid from every block, whose ``bincount`` then costs
    the grid's size: blocks at least that large keep it below the rows' own cost."""
    if len(X) < 2 or np.all(X[1:, 0] >= X[:-1, 0]):
        return 2**20
    return max(2**20, grid.size * m)


def linear_binning(X, columns, grid, sample_weight=None, *, truncate=False):
    r"""Linear binning of weighted columns onto ``grid`` (KernSmooth's ``linbin``/
    ``linbin2D``): :math:`c_k = \sum_j s_j\, \omega_k(x_j)\, z_j`, where
    :math:`\omega_k(x)` is the hat function of grid point :math:`k` (the product of the
    axes' hats in 2-D), so every row's mass and mean position are kept.

    Parameters
    ----------
    X : array_like of shape (n, d)
        Inputs, inside the grid.
    columns : array_like of shape (n, m)
        What is binned (e.g. ``[1, y, y²]``).
    grid : Grid
    sample_weight : array_like of shape (n,), optional
        Multiplies every column.
    truncate : bool
        Leave out rows outside the grid (KernSmooth's ``truncate = TRUE``) instead of
        raising.

    Returns
    -------
    counts : ndarray of shape grid.shape + (m,)

    Examples
    --------
    >>> grid = Grid(np.array([0.0]), np.array([1.0]), (3,))
    >>> linear_binning([[0.25], [2.0]], np.ones((2, 1)), grid)[:, 0]
    array([0.75, 0.25, 1.  ])
    """
    X = check_points(X, grid.n_dims)
    columns = np.asarray(columns, dtype=float)
    columns = columns[:, None] if columns.ndim == 1 else columns
    if len(columns) != len(X):
        raise ValueError(f"columns must have {len(X)} rows; got {len(columns)}")
    s = check_weights(sample_weight, len(X))
    m = columns.shape[1]
    counts = np.zeros((grid.size, m))
    entries = block_entries(X, grid, m)
    for rows in iter_query_blocks(len(X), m * 2**grid.n_dims, n_arrays=2, cache=entries):
        values = columns[rows] if s is None else columns[rows] * s[rows, None]
        _accumulate(counts, X[rows], values, grid, truncate)
    return counts.reshape(grid.shape + (m,))


def coarsen(counts, grid, factor):
    """Linear binning onto the grid ``factor`` times coarser, from the counts of ``grid``.

    Exact: the coarse grid's hat functions are linear between the fine grid points, so
    re-binning the fine counts equals binning the rows onto the coarse grid directly.
    Needs ``(shape[a] − 1) % factor == 0`` on every axis (:func:`make_grid`'s ``levels``).

    Returns
    -------
    counts : ndarray
    grid : Grid
    """
    factor = int(factor)
    if factor == 1:
        return counts, grid
    if any((n - 1) % factor for n in grid.shape):
        raise ValueError(f"the grid's cells {grid.shape} are not divisible by {factor}")
    for a in range(grid.n_dims):
        moved = np.moveaxis(counts, a, 0)
        n = moved.shape[0]
        coarse = np.zeros(((n - 1) // factor + 1,) + moved.shape[1:])
        coarse += moved[::factor]
        # A fine point k cells past a coarse one sends 1 − k/f of its count there and k/f
        # to the next.
        for k in range(1, factor):
            between = moved[k:-1:factor]
            coarse[:-1] += (1.0 - k / factor) * between
            coarse[1:] += (k / factor) * between
        counts = np.moveaxis(coarse, 0, a)
    shape = tuple((n - 1) // factor + 1 for n in grid.shape)
    return counts, Grid(grid.origin, grid.spacing * factor, shape)


class Bins(NamedTuple):
    """Binned training data: ``counts[..., 0]`` the binned sample weights, ``counts[...,
    1:]`` the binned weighted targets minus ``center`` (their weighted mean: FFT rounding is
    then relative to the targets' spread, not their magnitude)."""

    grid: Grid
    counts: np.ndarray
    center: np.ndarray


def bin_targets(X, Y, grid, sample_weight=None, *, truncate=False):
    """:func:`linear_binning` of ``[1, Y − center]`` times the sample weights: the
    :class:`Bins` every sum below is computed from (``truncate``: see there)."""
    X = check_points(X, grid.n_dims)
    Y = check_targets(Y, len(X))
    s = check_weights(sample_weight, len(X))
    center = np.average(Y, axis=0, weights=s)
    t = Y.shape[1]
    counts = np.zeros((grid.size, 1 + t))
    entries = block_entries(X, grid, 1 + t)
    for rows in iter_query_blocks(len(X), (1 + t) * 2**grid.n_dims, n_arrays=2, cache=entries):
        values = np.empty((rows.stop - rows.start, 1 + t))
        values[:, 0] = 1.0 if s is None else s[rows]
        values[:, 1:] = (Y[rows] - center) * values[:, :1]
        _accumulate(counts, X[rows], values, grid, truncate)
    return Bins(grid, counts.reshape(grid.shape + (1 + t,)), center)
