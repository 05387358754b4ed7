"""A regular grid over the data's range: its construction, where points fall in it, and
(bi)linear interpolation of values kept on it."""

from dataclasses import dataclass
from itertools import product

import numpy as np

from kernattn._core.blocks import query_block_size
from kernattn.smoother._binned.checks import check_bandwidth, check_degree, check_points
from kernattn.smoother._binned.error import TOLERANCE, points_per_bandwidth


@dataclass(frozen=True)
class Grid:
    """A regular grid: ``shape[a]`` points per axis, ``origin[a] + spacing[a] * k``."""

    origin: np.ndarray
    spacing: np.ndarray
    shape: tuple

    @property
    def n_dims(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape))

    def axis(self, a):
        """The coordinates of the grid points along axis ``a``."""
        return self.origin[a] + self.spacing[a] * np.arange(self.shape[a])

    def points(self):
        """All grid points, (size, d), in row-major order of the grid."""
        mesh = np.meshgrid(*(self.axis(a) for a in range(self.n_dims)), indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)


def make_grid(X, bandwidth, *, degree=0, tol=TOLERANCE, levels=0):
    """The grid over the range of ``X`` whose spacing meets ``tol`` at ``bandwidth``.

    The spacing is at most ``bandwidth / points_per_bandwidth(degree, d, tol)`` per axis,
    and divides the data's range evenly. With ``levels``, the number of cells per axis is
    a multiple of ``2**levels``, so that :func:`coarsen` can halve the grid that often.

    Examples
    --------
    >>> grid = make_grid(np.array([[0.0], [1.0]]), 0.1, degree=1)
    >>> grid.shape, float(grid.spacing[0])
    ((313,), 0.00321)
    """
    X = check_points(X)
    d = X.shape[1]
    h = check_bandwidth(bandwidth, d)
    step = h / points_per_bandwidth(check_degree(degree), d, tol)
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = hi - lo
    unit = 2**levels
    cells = np.maximum(np.ceil(span / step), 1).astype(int)
    cells = -(-cells // unit) * unit
    spacing = np.where(span > 0, span / cells, step)
    origin = np.where(span > 0, lo, lo - spacing * cells / 2)
    return Grid(origin=origin, spacing=spacing, shape=tuple(int(c) + 1 for c in cells))


def grid_fits(n_cells, n_columns):
    """Whether sums of ``n_columns`` columns over ``n_cells`` (extended) grid cells fit in
    the ``working_memory`` budget (a few arrays of that size live at once)."""
    return query_block_size(n_cells, max(n_columns, 1), n_arrays=4, cache=False) >= n_cells


def locate(points, grid):
    """The cell of each point and its fractional position in it.

    Returns
    -------
    index : ndarray of int, shape (n, d)
        Lower corner of the cell (clipped to the grid's cells).
    fraction : ndarray of shape (n, d)
        ``(x − g_index)/δ``, in [0, 1] for points inside the grid.
    inside : ndarray of bool, shape (n,)
        Points within the grid (up to rounding of the range).
    """
    pos = (points - grid.origin) / grid.spacing
    top = np.asarray(grid.shape) - 1
    # Axis by axis: a reduction along the short last axis costs more than the comparisons.
    inside = np.ones(len(pos), dtype=bool)
    for a in range(pos.shape[1]):
        inside &= (pos[:, a] >= -1e-9) & (pos[:, a] <= top[a] + 1e-9)
    index = np.floor(pos)
    np.clip(index, 0, np.maximum(top - 1, 0), out=index)
    index = index.astype(np.intp)
    fraction = pos - index
    return index, fraction, inside


def same_grid(a, b):
    return (
        a.shape == b.shape
        and np.array_equal(a.origin, b.origin)
        and np.array_equal(a.spacing, b.spacing)
    )


def _strides(shape):
    return np.array([int(np.prod(shape[a + 1 :])) for a in range(len(shape))], dtype=np.intp)


def corners(index, fraction, shape):
    """Flat indices and weights of the 2^d corners of each point's cell."""
    strides = _strides(shape)
    base = index[:, 0] * strides[0]
    for a in range(1, len(shape)):
        base = base + index[:, a] * strides[a]
    for corner in product((0, 1), repeat=len(shape)):
        weight = None
        for a, c in enumerate(corner):
            factor = fraction[:, a] if c else 1.0 - fraction[:, a]
            weight = factor if weight is None else weight * factor
        yield base + int(np.dot(corner, strides)), weight


def locate_cells(points, grid):
    """Cell index (b, d), fractions (d, b) and whether inside the grid (b,)."""
    index, fraction, inside = locate(points, grid)
    return index, np.ascontiguousarray(fraction.T), inside


#: Points per block of :func:`interpolate_columns`: its gathers and products stay in a
#: few buffers that fit the cache and are reused, where whole columns of 10⁶ points each
#: took fresh memory (about three times slower).
INTERPOLATION_BLOCK = 8192


def interpolate_columns(table, grid, index, fraction):
    """The (bi)linear interpolant of ``table`` (grid.size, k) at located points, as
    columns (k, b). Whole rows of the table are gathered: one cache line per corner."""
    n, k = len(index), table.shape[1]
    out = np.empty((k, n))
    size = min(n, INTERPOLATION_BLOCK)
    total, term = np.empty((size, k)), np.empty((size, k))
    for start in range(0, n, size):
        rows = slice(start, min(start + size, n))
        m = rows.stop - rows.start
        first = True
        for flat, weight in corners(index[rows], fraction[:, rows].T, grid.shape):
            into = total[:m] if first else term[:m]
            np.take(table, flat, axis=0, out=into)
            into *= weight[:, None]
            if not first:
                total[:m] += into
            first = False
        out[:, rows] = total[:m].T
    return out


def interpolate_points(table, grid, points):
    """:func:`interpolate_columns` of ``table`` (grid.size, k) at ``points`` (n, d), each
    block of them located in turn: columns (k, n), and whether each point lies within the
    grid (:func:`locate`)."""
    n = len(points)
    out, inside = np.empty((table.shape[1], n)), np.empty(n, dtype=bool)
    for start in range(0, n, INTERPOLATION_BLOCK):
        rows = slice(start, min(start + INTERPOLATION_BLOCK, n))
        index, fraction, inside[rows] = locate(points[rows], grid)
        out[:, rows] = interpolate_columns(table, grid, index, np.ascontiguousarray(fraction.T))
    return out, inside


def interpolate(values, grid, points):
    """Linear (bilinear in 2-D) interpolation of gridded ``values`` at ``points``.

    Parameters
    ----------
    values : ndarray of shape grid.shape + (k,)
    grid : Grid
    points : ndarray of shape (n, d)
        Points outside the grid get the nearest cell's interpolant, extrapolated.

    Returns
    -------
    ndarray of shape (n, k)

    Examples
    --------
    >>> grid = Grid(np.array([0.0, 0.0]), np.array([1.0, 1.0]), (2, 2))
    >>> values = np.array([[0.0, 1.0], [2.0, 3.0]])[..., None]   # 2 x + y
    >>> interpolate(values, grid, [[0.5, 0.25]])
    array([[1.25]])
    """
    points = check_points(points, grid.n_dims, name="points")
    table = np.asarray(values, dtype=float).reshape(grid.size, -1)
    return interpolate_points(table, grid, points)[0].T
