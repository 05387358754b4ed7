r"""Local fits a fitted kernel carries: a polynomial at every query, or weights tilted to
balance the keys about it.

Both start from a head's kernel weights :math:`w_j(x)` on its keys :math:`k_j` (in the head's
key space) and are bound to the keys at fit, so the engine applies them to any estimator's
kernel the same way (:class:`~kernattn._engine.heads.SoftmaxHeads` holds one per head):

- :class:`LocalPolynomials`: the weighted least-squares polynomial of a degree at each query
  (:mod:`kernattn._local.polynomial`), :math:`l_j = w_j (1 + \tilde\psi_j^\top g)` — signed
  weights that sum to 1, beyond Nadaraya–Watson — held back toward the kernel average where
  the local design cannot support it (its variance :math:`\sum_j l_j^2` bounded). Its
  estimate needs only kernel sums of the columns :math:`[v, v^2, 1, \phi(k), v\,\phi(k)]`
  and of the design's monomials with the squared weights, in one pass of the one reduction;
- :class:`TiltedWeights`: non-negative weights whose centroid is the query
  (:mod:`kernattn._local.tilt`) — still Nadaraya–Watson;
- :class:`BlendedLine`: a share of a local line, at its own width, mixed with the head's
  local constant (its kernel average, or its tilted weights): equivalent weights
  :math:`(1 - s)\,w_j + s\,l_j`, which sum to 1.
"""

import numpy as np

from kernattn._local.polynomial import (
    anchor_groups,
    anchor_points,
    equivalent_weights,
    n_design_columns,
    polynomial_columns,
    polynomial_estimate,
    slope_weights,
)
from kernattn._local.tilt import KINDS, key_spread, tilt_weights, trend_direction


class LocalPolynomials:
    """A local polynomial of ``degree`` per query, in the columns ``dims`` of a head's key
    space.

    Parameters
    ----------
    keys : ndarray of shape (n_keys, head_dim)
        The head's keys.
    value_columns : ndarray of shape (n_keys, 2 t + 1)
        What the engine sums for a kernel average (``[v, v², 1]`` of the scaled values).
    values : ndarray of shape (n_keys, t)
        The scaled centered values.
    degree : int
        At least 1 (:func:`~kernattn._local.polynomial.check_degree` gives the range).
    dims : ndarray of int, optional
        The key-space columns the polynomial lives in (default all; with discrete features
        the continuous ones).
    sample_weight : ndarray of shape (n_keys,), optional
        The keys' sample weights (absolute), precision weights of the variance rule: the
        squared weights' sums are divided by them, so that an integer weight holds back
        the same queries as repeated rows (``None``: all 1).
    """

    def __init__(self, keys, value_columns, values, degree, dims=None, sample_weight=None):
        self.dims = np.arange(keys.shape[1]) if dims is None else np.asarray(dims, dtype=int)
        self.degree = int(degree)
        self.keys = keys[:, self.dims]
        t = values.shape[1]
        self.total = 2 * t
        self.value_columns = value_columns
        self.values = values
        self.sample_weight = None
        if sample_weight is not None and np.any(np.asarray(sample_weight) != 1.0):
            self.sample_weight = np.asarray(sample_weight, dtype=np.float64)
        self.columns, self.design_columns, self.squared_columns = self._column_sets(self.keys)

    def _column_sets(self, keys):
        """The columns summed with the kernel weights (float64: the local covariances are
        differences of these sums), the keys' monomials of degree 1 to 2p among them, and
        ``[1, monomials]`` for the squared weights (the variance of the fit), each key's
        divided by its precision weight; of the keys ``keys`` (about some point)."""
        columns = polynomial_columns(self.value_columns, self.values, keys, self.degree)
        n_design = n_design_columns(keys.shape[1], self.degree)
        design = np.ascontiguousarray(columns[:, self.total + 1 : self.total + 1 + n_design])
        squared = columns[:, self.total : self.total + 1 + n_design]
        if self.sample_weight is not None:
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                squared = squared / self.sample_weight[:, None]
        return columns, design, np.ascontiguousarray(squared)

    def queries(self, kernel, X, h):
        """The queries in the polynomial's space (the head's key-side projection)."""
        with np.errstate(over="ignore", invalid="ignore"):
            return kernel.project(X, h, side="key")[:, self.dims]

    def _about(self, point):
        """The column sets of the keys about ``point`` (the fit's own about the training
        center, 0)."""
        if not np.any(point):
            return self.columns, self.design_columns, self.squared_columns
        return self._column_sets(self.keys - point)

    def sums(self, kernel, X, h, left_out=None):
        """The kernel sums of both column sets for a block of queries, in one pass
        (``left_out``: pairs of block rows and keys that weigh nothing, for leave-one-out
        fits); with the monomials about each query's point
        (:func:`~kernattn._local.polynomial.anchor_points`)."""
        groups = anchor_groups(self.queries(kernel, X, h), self.degree)
        if len(groups) == 1:
            columns, _, squared = self._about(groups[0][0])
            return self._sums(kernel, X, h, columns, squared, left_out)
        out = None
        for point, rows in groups:
            columns, _, squared = self._about(point)
            part = self._sums(kernel, X[rows], h, columns, squared, _rows_of(left_out, rows))
            if out is None:
                out = np.empty((len(X), part.shape[1]), dtype=part.dtype)
            out[rows] = part
        return out

    def _sums(self, kernel, X, h, columns, squared, left_out):
        with np.errstate(over="ignore", invalid="ignore"):
            return kernel.sums(X, h, columns, squared=squared, total=self.total, left_out=left_out)

    def estimate(self, sums, Q, n_outputs):
        """The local polynomial at the queries from their :meth:`sums`
        (:func:`~kernattn._local.polynomial.polynomial_estimate`), about each query's
        :func:`~kernattn._local.polynomial.anchor_points`."""
        anchors = anchor_points(Q, self.degree)
        if anchors is not None:
            Q = Q - anchors
        width = self.columns.shape[1]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return polynomial_estimate(
                sums[:, :width], sums[:, width:], Q, n_outputs, len(self.dims), self.degree
            )

    def weights(self, kernel_weights, kernel, X, h):
        """The equivalent weights (rows sum to 1) from the head's normalized kernel weights,
        and the rows held back."""
        return self._of_weights(equivalent_weights, kernel_weights, kernel, X, h)

    def slopes(self, kernel_weights, kernel, X, h):
        """The weights of the fitted polynomials' slopes at the queries, (b, n, len(dims))
        per unit of the keys (:func:`~kernattn._local.polynomial.slope_weights`), and the
        rows held back."""
        return self._of_weights(slope_weights, kernel_weights, kernel, X, h)

    def _of_weights(self, function, kernel_weights, kernel, X, h):
        """``function`` (:func:`~kernattn._local.polynomial.equivalent_weights` or
        :func:`~kernattn._local.polynomial.slope_weights`) of the head's kernel weights at
        the queries ``X``."""
        Q = self.queries(kernel, X, h)
        kernel_weights = np.asarray(kernel_weights, dtype=np.float64)
        groups = anchor_groups(Q, self.degree)
        if len(groups) == 1 and not np.any(groups[0][0]):
            return self._apply(function, kernel_weights, self.keys, Q, self.design_columns)
        weights, held_back = None, np.zeros(len(Q), dtype=bool)
        for point, rows in groups:
            _, design, _ = self._about(point)
            part, held_back[rows] = self._apply(
                function, kernel_weights[rows], self.keys - point, Q[rows] - point, design
            )
            if weights is None:
                weights = np.empty((len(Q),) + part.shape[1:])
            weights[rows] = part
        return weights, held_back

    def _apply(self, function, kernel_weights, keys, Q, design):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return function(
                kernel_weights,
                keys,
                Q,
                self.degree,
                columns=design,
                sample_weight=self.sample_weight,
            )


def _rows_of(left_out, rows):
    """The ``(rows, keys)`` pairs of ``left_out`` whose row is among ``rows`` (sorted), with
    the rows renumbered as positions in ``rows``."""
    if left_out is None:
        return None
    inside = np.isin(left_out[0], rows)
    return np.searchsorted(rows, left_out[0][inside]), left_out[1][inside]


class TiltedWeights:
    """Kernel weights tilted to balance the keys about each query (:mod:`kernattn._local.tilt`):
    in every direction of the key space (``kind="balance"``), along each query's local
    slope of the ``values`` (``"slope"``) or along their linear trend over all keys
    (``"trend"``), with the keys' covariance of the penalty's floor (``key_spread``) and the
    penalty."""

    def __init__(self, keys, sample_weight, penalty, kind="balance", values=None):
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
        self.kind = kind
        self.spread = key_spread(keys, sample_weight)
        self.penalty = float(penalty)
        self.values = np.asarray(values, dtype=np.float64) if kind == "slope" else None
        self.direction = trend_direction(keys, values, sample_weight) if kind == "trend" else None

    def weights(self, kernel_weights, kernel, X, h):
        """The tilted weights (rows sum to 1, non-negative); no row keeps the kernel
        weights."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            # A projection beyond the float range is inf or NaN: such a query is not tilted.
            Q = kernel.project(X, h, side="key")
        tilted, _ = tilt_weights(
            self.kind,
            np.asarray(kernel_weights, dtype=np.float64),
            kernel.keys(h),
            Q,
            spread=self.spread,
            penalty=self.penalty,
            values=self.values,
            direction=self.direction,
        )
        return tilted, np.zeros(len(tilted), dtype=bool)


class BlendedLine:
    r"""A head's local constant and a local line mixed: the estimate :math:`(1 - s)\,\hat
    y_0 + s\,\hat y_1`, the weights :math:`(1 - s)\,w + s\,l`.

    The constant is the head's own (its kernel average at the head's width, or
    ``constant``'s weights: :class:`TiltedWeights`); the line is fitted on ``kernel``, a
    copy of the head alone whose logits carry the line's own width factor (a line wants
    more neighbours than an average), by its local fit ``kernel.local[0]``
    (:class:`LocalPolynomials`). Both stay bound to the keys, so the blend is applied to
    any query as the other local fits are; its queries held back are the line's.

    Parameters
    ----------
    kernel : SoftmaxHeads
        One head, at the line's width, with its :class:`LocalPolynomials`.
    share : float
        :math:`s` in (0, 1), the line's share.
    constant : TiltedWeights, optional
        The constant's weights (``None``: the kernel average).
    """

    def __init__(self, kernel, share, constant=None):
        self.kernel = kernel
        self.share = float(share)
        self.constant = constant

    @property
    def line(self):
        """The line's :class:`LocalPolynomials` (on :attr:`kernel`'s head 0)."""
        return self.kernel.local[0]

    @property
    def degree(self):
        return self.line.degree

    def constant_weights(self, kernel_weights, kernel, X, h):
        """The constant's weights (rows sum to 1) from the head's kernel weights."""
        if self.constant is None:
            return np.asarray(kernel_weights, dtype=np.float64)
        return self.constant.weights(kernel_weights, kernel, X, h)[0]

    def weights(self, kernel_weights, kernel, X, h):
        """The blended weights (rows sum to 1) and the rows whose line is held back."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            # A far query's kernel weights come from its far-field logits.
            line_kernel_weights = self.kernel.weights(X, 0)
        line, held_back = self.line.weights(line_kernel_weights, self.kernel, X, 0)
        constant = self.constant_weights(kernel_weights, kernel, X, h)
        return (1.0 - self.share) * constant + self.share * line, held_back
