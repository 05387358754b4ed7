"""Per-cell power sums of the rows of a 1-D grid: the criterion summed over the rows in
O(G) per bandwidth."""

import math
from typing import NamedTuple

import numpy as np

from kernattn._core.blocks import iter_query_blocks
from kernattn.smoother._binned.checks import check_points, check_targets
from kernattn.smoother._binned.exponents import basis_in_moments, moment_exponents
from kernattn.smoother._binned.grid import Grid, interpolate_columns, locate_cells
from kernattn.smoother._binned.left_out import in_sample_fit, left_out_fit, own_moments

#: Chebyshev points of the per-cell polynomials of the criterion (degree 6 in the
#: fractional position t: the fits vary on the scale of h, about 20 cells).
_CELL_NODES = 0.5 * (1.0 - np.cos(np.pi * (2 * np.arange(7) + 1) / 14))


_CELL_FIT = np.linalg.inv(np.vander(_CELL_NODES, 7, increasing=True))


class CellMoments(NamedTuple):
    r"""Per cell of a 1-D grid, the power sums of the rows' fractional positions:
    ``power[m, k]`` :math:`= \sum s\,t^m`, ``value[m, o, k]`` :math:`= \sum s\,y_o t^m`,
    ``square[m, o, k]`` :math:`= \sum s\,y_o^2 t^m` (targets minus ``center``, :math:`m
    \le 6`), and the common sample weight ``weight``: what :func:`row_statistics` needs to
    sum the criterion over the rows in :math:`O(G)` per bandwidth (:func:`cell_moments`).
    """

    grid: Grid
    center: np.ndarray
    weight: float
    power: np.ndarray
    value: np.ndarray
    square: np.ndarray


def cell_moments(X, Y, bins):
    """:class:`CellMoments` of unweighted rows on ``bins.grid`` (1-D): :math:`O(n)` once
    per grid, after which every bandwidth's criterion costs :math:`O(G)`.

    The in-sample fit, the trace term and the left-out fit at a row depend on the row only
    through its fractional position in its cell (and its target, linearly); each is a
    smooth function of the position, replaced by its degree-6 interpolant at Chebyshev
    points of the cell, whose products with the power sums give the sums over the rows.
    """
    grid = bins.grid
    if grid.n_dims != 1:
        raise ValueError("cell moments are for one input; use the per-row statistics")
    X = check_points(X, 1)
    Y = check_targets(Y, len(X))
    n_cells = grid.shape[0] - 1
    t = Y.shape[1]
    power = np.zeros((7, n_cells))
    value = np.zeros((7, t, n_cells))
    square = np.zeros((7, t, n_cells))
    for rows in iter_query_blocks(len(X), 8 * (1 + 2 * t), n_arrays=2, cache=2**20):
        index, fraction, _ = locate_cells(X[rows], grid)
        cell, frac = index[:, 0], fraction[0]
        Yc = Y[rows] - bins.center
        tm = np.ones_like(frac)
        for m in range(7):
            power[m] += np.bincount(cell, weights=tm, minlength=n_cells)
            for o in range(t):
                value[m, o] += np.bincount(cell, weights=tm * Yc[:, o], minlength=n_cells)
                square[m, o] += np.bincount(cell, weights=tm * Yc[:, o] ** 2, minlength=n_cells)
            tm = tm * frac
    return CellMoments(grid, bins.center, 1.0, power, value, square)


def coarsen_cells(cells, factor):
    r""":class:`CellMoments` on the grid ``factor`` times coarser (:func:`coarsen`'s),
    exactly: a row at fraction :math:`t` of fine cell :math:`fJ + r` is at
    :math:`(r + t)/f` of coarse cell :math:`J`, and
    :math:`\sum ((r + t)/f)^m = f^{-m}\sum_j \binom{m}{j} r^{m-j} \sum t^j`."""
    factor = int(factor)
    if factor == 1:
        return cells
    n_fine = cells.power.shape[-1]
    if n_fine % factor:
        raise ValueError(f"the grid's {n_fine} cells are not divisible by {factor}")
    r = np.arange(n_fine) % factor

    def convert(sums):  # (7, ..., n_fine) -> (7, ..., n_coarse)
        out = np.zeros_like(sums)
        for m in range(sums.shape[0]):
            for j in range(m + 1):
                out[m] += math.comb(m, j) * r ** (m - j) * sums[j]
            out[m] /= factor**m
        return out.reshape(out.shape[:-1] + (n_fine // factor, factor)).sum(axis=-1)

    grid = cells.grid
    coarse = Grid(grid.origin, grid.spacing * factor, ((grid.shape[0] - 1) // factor + 1,))
    return CellMoments(
        coarse,
        cells.center,
        cells.weight,
        convert(cells.power),
        convert(cells.value),
        convert(cells.square),
    )


def cell_statistics(sums, cells):
    """:class:`RowStatistics` from :class:`CellMoments`; also the cells whose left-out
    sums fall below the resolution somewhere (their rows need the per-row path)."""
    grid = sums.grid
    n_cells = cells.power.shape[1]
    offset = sums.offset()[0]
    ratio = grid.spacing / sums.bandwidth
    moments = moment_exponents(sums.degree, 1)
    nodes = len(_CELL_NODES)
    index = np.repeat(np.arange(n_cells) + offset, nodes)[:, None]
    fraction = np.tile(_CELL_NODES, n_cells)[None]
    S, T = sums.split(interpolate_columns(sums.table, grid, index, fraction))
    own = own_moments(fraction, ratio, moments)
    own_basis = own[basis_in_moments(sums.degree, 1)]
    weight = np.full(S.shape[1], cells.weight)
    f, g = in_sample_fit(sums, S, T, own_basis)
    alpha, gamma, resolved = left_out_fit(sums, S - weight * own, T, own_basis, weight)

    def poly(values):  # values (..., n_cells * nodes) -> coefficients (7, ..., n_cells)
        values = values.reshape(values.shape[:-1] + (n_cells, nodes))
        return np.moveaxis(np.einsum("mj,...kj->...mk", _CELL_FIT, values), -2, 0)

    def total(coef, sums_m):  # Σ_m coef_m · sums_m, summed over cells (and outputs)
        return float(np.sum(coef * sums_m))

    rss = (
        float(np.sum(cells.square[0]))
        - 2.0 * total(poly(f), cells.value)
        + total(poly(f * f), cells.power[:, None, :])
    )
    trace = total(poly(g), cells.power)
    one_plus = 1.0 + gamma
    loo = (
        total(poly(np.broadcast_to(one_plus**2, alpha.shape)), cells.square)
        - 2.0 * total(poly(alpha * one_plus), cells.value)
        + total(poly(alpha * alpha), cells.power[:, None, :])
    )
    bad = ~np.all(resolved.reshape(n_cells, nodes), axis=1) & (cells.power[0] > 0)
    if np.any(bad):
        # Drop those cells' share; the caller adds their rows one by one.
        fix = _cell_share(poly, f, g, alpha, one_plus, cells, bad)
        loo -= fix
    return loo, rss, trace, np.flatnonzero(bad)


def _cell_share(poly, f, g, alpha, one_plus, cells, bad):
    """The left-out error the cells ``bad`` contributed to the cell sums."""
    a2 = poly(np.broadcast_to(one_plus**2, alpha.shape))
    a1 = poly(alpha * one_plus)
    a0 = poly(alpha * alpha)
    return float(
        np.sum((a2 * cells.square)[..., bad])
        - 2.0 * np.sum((a1 * cells.value)[..., bad])
        + np.sum((a0 * cells.power[:, None, :])[..., bad])
    )
