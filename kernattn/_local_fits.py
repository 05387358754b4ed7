r"""Local fits a fitted kernel carries: a line at every query, or weights tilted to balance
the keys about it.

Both start from a head's kernel weights :math:`w_j(x)` on its keys :math:`k_j` (in the head's
key space) and are bound to the keys at fit, so the engine applies them to any estimator's
kernel the same way (:class:`~kernattn._heads.SoftmaxHeads` holds one per head):

- :class:`LocalLines`: the weighted least-squares line at each query
  (:mod:`kernattn._local_linear`), :math:`l_j = w_j (1 + (k_j - m)^\top C^{-1} (q - m))` —
  signed weights that sum to 1, beyond Nadaraya–Watson; a query whose weights rest on fewer
  distinct keys than the line has parameters keeps the kernel average. Its estimate needs
  only kernel sums of the columns
  :math:`[v, v^2, 1, k, k k^\top, v k^\top]` (one pass of the one reduction);
- :class:`TiltedWeights`: non-negative weights whose centroid is the query
  (:mod:`kernattn._tilt`) — still Nadaraya–Watson.
"""

import numpy as np

from kernattn._local_linear import equivalent_weights, line_columns
from kernattn._tilt import key_spread, tilted_weights


class LocalLines:
    """A local line per query, in the columns ``dims`` of a head's key space.

    Parameters
    ----------
    keys : ndarray of shape (n_keys, head_dim)
        The head's keys.
    value_columns : ndarray of shape (n_keys, 2 t + 1)
        What the engine sums for a kernel average (``[v, v², 1]`` of the scaled values).
    values : ndarray of shape (n_keys, t)
        The scaled centered values.
    n_params : int
        The parameters of the line: a query whose weights rest on fewer distinct keys keeps
        the kernel average.
    groups : ndarray of int or None
        The duplicate groups of the keys (``None``: every key distinct).
    dims : ndarray of int, optional
        The key-space columns the line lives in (default all; with discrete features the
        continuous ones).
    possible : bool
        Whether the keys hold enough distinct positions for a line at all (``False``: every
        query keeps the kernel average, without a ridge-sized solve).
    """

    def __init__(
        self, keys, value_columns, values, n_params, groups=None, dims=None, possible=True
    ):
        self.dims = np.arange(keys.shape[1]) if dims is None else np.asarray(dims, dtype=int)
        self.keys = keys[:, self.dims]
        # In float64: the local covariance is a difference of these sums.
        self.columns = line_columns(value_columns, values, self.keys)
        self.n_params = int(n_params)
        self.groups = groups
        self.possible = bool(possible)
        self._first = value_columns.shape[1]

    def queries(self, kernel, X, h):
        """The queries in the line's space (the head's key-side projection)."""
        return kernel.project(X, h, side="key")[:, self.dims]

    def weights(self, kernel_weights, kernel, X, h):
        """The equivalent weights of the lines (rows sum to 1) from the head's normalized
        kernel weights, and the rows that kept the kernel weights."""
        d = len(self.dims)
        Q = self.queries(kernel, X, h)
        with np.errstate(over="ignore", invalid="ignore"):
            return equivalent_weights(
                np.asarray(kernel_weights, dtype=np.float64),
                self.keys,
                Q,
                self.n_params,
                self.groups,
                columns=self.columns[:, self._first : self._first + d + d * (d + 1) // 2],
            )


class TiltedWeights:
    """Kernel weights tilted to balance the keys about each query (:mod:`kernattn._tilt`),
    with the keys' covariance of the penalty's floor (``key_spread``) and the penalty."""

    def __init__(self, keys, sample_weight, penalty):
        self.spread = key_spread(keys, sample_weight)
        self.penalty = float(penalty)

    def weights(self, kernel_weights, kernel, X, h):
        """The tilted weights (rows sum to 1, non-negative); no row keeps the kernel
        weights."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            # A projection beyond the float range is inf or NaN: such a query is not tilted.
            Q = kernel.project(X, h, side="key")
        tilted = tilted_weights(
            np.asarray(kernel_weights, dtype=np.float64),
            kernel.keys(h),
            Q,
            spread=self.spread,
            penalty=self.penalty,
        )
        return tilted, np.zeros(len(tilted), dtype=bool)
