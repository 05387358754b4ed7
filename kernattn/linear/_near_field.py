r"""``NearFieldKernel``: each query's near keys exactly, the rest through Nyström features.

A Gaussian Nadaraya–Watson weight at a small bandwidth sits on a few near keys, which no
low-rank kernel resolves, while the many far keys carry little weight each, which a
low-rank kernel estimates well enough. The split (sparse + low-rank attention, Chen et al.,
2021, "Scatterbrain") computes the first exactly and the second from feature sums, without
counting any key twice:

.. math::

    \hat y(q) = \frac{\sum_{i \in N(q)} s_i \kappa(q, k_i)\, v_i
                      + a(q)^\top G \big(S - \sum_{c \in C(q)} S_c\big)}
                     {\sum_{i \in N(q)} s_i \kappa(q, k_i)
                      + a(q)^\top G \big(z - \sum_{c \in C(q)} z_c\big)},

with :math:`a(u)_j = \exp(-\|u - l_j\|^2/2)` the Nyström base features at the landmarks
:math:`l_j` and :math:`G` the pseudo-inverse of their kernel matrix
(:class:`~kernattn.feature_maps.NystroemFeatures`).

**Cells.** The landmarks double as the cells of a partition of the keys: key :math:`k` lies
in cell :math:`c(k) = \arg\max_j a_j(k)`, the landmark nearest to it. A query's near set
:math:`N(q)` is every key in the cells :math:`C(q)` of the ``n_near_cells`` landmarks nearest
to the query's own landmark (found with a :class:`sklearn.neighbors.KDTree` on the
landmarks), so queries of one cell share their near set, and the exact part is one dense
product per cell. The far field of those queries is the low-rank estimate over all keys
minus its part over the near cells: :math:`S_c, z_c`, the feature sums of cell :math:`c`,
are sums over the rows of that cell, accumulated in the same pass as the totals
:math:`S = \sum_c S_c`, :math:`z = \sum_c z_c`.

**Guarantees.** Near keys get their exact kernel, so their weights are positive; far keys
get :math:`a(q)^\top G\, a(k)`, which can be negative. When the far field's denominator is
not positive (the low-rank estimate of a positive mass is wrong), the query uses its near
field alone: its weights are then those of the exact kernel truncated to :math:`N(q)`,
positive. The weights of a query sum to 1 either way. The error of the split is measured,
not assumed: :meth:`NearFieldKernel.weight_errors` compares the split weights of sampled
training rows (each left out of its own sums) with the exact weights.

References
----------
.. [1] B. Chen, T. Dao, E. Winsor, Z. Song, A. Rudra, C. Ré, "Scatterbrain: unifying sparse
   and low-rank attention", NeurIPS 2021.
.. [2] C. K. I. Williams, M. Seeger, "Using the Nyström method to speed up kernel
   machines", NeurIPS 2001.
"""

import numpy as np
from sklearn.neighbors import KDTree
from sklearn.utils import check_random_state

from kernattn._blocks import iter_query_blocks

# Near keys per tile: a (rows × tile) block of logits stays in cache.
_KEY_TILE = 512
# A query more than REACH kernel units from every near key (near mass below e^(−REACH²/2)
# of a key of the largest weight at distance 0) may have its nearest keys in cells that are
# not near its own: it is computed exactly.
REACH = 6.0
_NEAR_MASS = np.exp(-0.5 * REACH**2)
# Entries of a (rows × features × moments) block when the keys are summed per cell.
_CELL_ENTRIES = 2**21


class NearFieldKernel:
    """A fitted split kernel: exact near cells, Nyström far field (see the module docstring).

    Parameters
    ----------
    far : FeatureKernel
        One Gaussian head whose feature map is a fitted
        :class:`~kernattn.feature_maps.NystroemFeatures`; its key sums are the totals
        :math:`S, S_2, z` of the far field.
    n_near_cells : int
        Cells computed exactly per query (the query's cell and its nearest neighbours).

    Attributes
    ----------
    cell_sums : ndarray of shape (n_cells, n_components, 2 * n_outputs + 1)
        Per cell the columns of :math:`S_c`, :math:`S_{2,c}`, :math:`z_c`, on the scale of
        ``far.key_sums`` (they add up to it).
    cell_counts : ndarray of shape (n_cells,)
        Keys per cell.
    near_cells : ndarray of shape (n_cells, n_near_cells)
        The cells computed exactly for the queries of each cell, nearest first.

    Examples
    --------
    >>> from kernattn._heads import SoftmaxHeads
    >>> from kernattn.feature_maps import NystroemFeatures
    >>> from kernattn.linear._feature_kernel import FeatureKernel
    >>> rng = np.random.default_rng(0)
    >>> X, v = 3 * rng.standard_normal((400, 2)), rng.standard_normal((400, 1))
    >>> heads = SoftmaxHeads(
    ...     similarity="gaussian", center=np.zeros(2), input_scale=np.ones(2),
    ...     query_weights=None, key_weights=None, scale=np.ones(1), head_weights=np.ones(1),
    ...     head_bias=np.zeros(1), keys=np.zeros((0, 2)), log_sample_weight=np.zeros(0))
    >>> phi = NystroemFeatures(16).fit(X, random_state=0)
    >>> far = FeatureKernel(heads, [phi], np.zeros((1, 2)), np.zeros(1), weight_scale=1.0)
    >>> kernel = NearFieldKernel(far, X[:16], n_near_cells=16)  # every cell: exact
    >>> kernel = kernel.bind(X, np.ones(400)).accumulate(X, v, np.ones(400))
    >>> weights, unreliable = kernel.weights(X[:3], 0)
    >>> exact = np.exp(-0.5 * ((X[:3, None] - X[None]) ** 2).sum(-1))
    >>> bool(np.allclose(weights, exact / exact.sum(1, keepdims=True)))
    True
    """

    def __init__(self, far, centers, n_near_cells):
        self.far = far
        self.centers = np.asarray(centers, dtype=float)
        self.cell_sums = np.zeros((len(self.centers), far.n_components, far.key_sums.shape[2]))
        self.cell_counts = np.zeros(len(self.centers), dtype=np.int64)
        self._tree = KDTree(self.centers)
        self.set_near_cells(n_near_cells)
        self._near = None

    # ------------------------------------------------------------ what it is

    @property
    def feature_map(self):
        return self.far.feature_maps[0]

    @property
    def n_cells(self):
        return len(self.centers)

    @property
    def n_heads(self):
        return 1

    @property
    def heads(self):
        return self.far.heads

    @property
    def head_weights(self):
        return self.far.head_weights

    @property
    def head_bias(self):
        return self.far.head_bias

    @property
    def n_outputs(self):
        return self.far.n_outputs

    @property
    def n_components(self):
        return self.far.n_components

    @property
    def exact(self):
        return self.far.exact

    @property
    def n_keys(self):
        return int(self.cell_counts.sum())

    @property
    def mean_near_keys(self):
        """Keys computed exactly per query, averaged over the cells (as keys fall)."""
        counts = self.cell_counts
        if not counts.sum():
            return 0.0
        near = counts[self.near_cells].sum(axis=1)
        return float(near @ counts / counts.sum())

    def set_near_cells(self, n_near_cells):
        """Compute ``n_near_cells`` cells exactly per query (at most every cell)."""
        P = int(min(max(n_near_cells, 1), self.n_cells))
        self.n_near_cells = P
        self.near_cells = self._tree.query(self.centers, k=P, return_distance=False)
        self._far_ready = np.zeros(self.n_cells, dtype=bool)
        return self

    def training_moments(self):
        return self.far.training_moments()

    def bind(self, keys, sample_weight, dtype=np.float64):
        """Keep the training keys (for the near field and the exact fallback)."""
        self.far.bind(keys, sample_weight, dtype)
        return self

    def without_keys(self):
        """The far field alone, a :class:`FeatureKernel` whose sums can grow (``partial_fit``
        keeps no keys, so there is no near field to compute)."""
        return self.far.without_keys()

    # ---------------------------------------------------------- accumulating

    def accumulate(self, X, values, sample_weight):
        """Add keys to the total and per-cell sums; with the keys bound (``fit``), also keep
        them sorted by cell for the near field (one call only)."""
        if not len(X):
            return self
        far = self.far
        keep = far.exact is not None
        if keep and self._near is not None:
            raise RuntimeError("the near field keeps the keys of one fit; call without_keys")
        log_weight = far.log_weights(sample_weight)
        scaled = values / far.value_scale
        moments = np.hstack([scaled, scaled**2, np.ones((len(scaled), 1))])
        sums, cell_sums = far.key_sums.copy(), self.cell_sums.copy()
        scale, radius = far.key_log_scale.copy(), far.key_radius.copy()
        r, m = self.far.n_components, moments.shape[1]
        with np.errstate(over="ignore", invalid="ignore"):
            keys = far.project(X, 0, "key")
            radius[0] = max(radius[0], np.sqrt(np.einsum("ij,ij->i", keys, keys).max()))
            cells = self.cells_of(keys)
            # Keys in cell order: each block's cells are runs of rows, summed per run.
            order = np.argsort(cells, kind="stable")
            for block in iter_query_blocks(len(X), r * (m + 1), cache=_CELL_ENTRIES):
                rows = order[block]
                features, top = far.key_features(0, keys[rows], log_weight[rows])
                if top > scale[0]:
                    if np.isfinite(scale[0]):
                        factor = np.exp(scale[0] - top)
                        sums[0] *= factor
                        cell_sums *= factor
                    scale[0] = top
                features *= np.exp(top - scale[0])
                block_moments = moments[rows]
                sums[0, :r] += features.T @ block_moments
                block_cells = cells[rows]
                starts = np.flatnonzero(np.r_[True, block_cells[1:] != block_cells[:-1]])
                for j in range(m):
                    runs = np.add.reduceat(features * block_moments[:, j, None], starts, axis=0)
                    cell_sums[block_cells[starts], :, j] += runs
        far.key_sums, far.key_log_scale, far.key_radius = sums, scale, radius
        far.target_sums = far.target_sums + np.stack(
            [
                (sample_weight / far.weight_scale) @ scaled,
                (sample_weight / far.weight_scale) @ scaled**2,
                np.full(scaled.shape[1], (sample_weight / far.weight_scale).sum()),
            ]
        )
        self.cell_sums = cell_sums
        self.cell_counts = self.cell_counts + np.bincount(cells, minlength=self.n_cells)
        if keep:
            self._near = {
                "order": order,
                "start": np.searchsorted(cells[order], np.arange(self.n_cells + 1)),
                "keys": keys[order],
                "moments": moments[order],
                "log_weight": log_weight[order],
                # [k, −½‖k‖² + log s, 1]: with [q, 1, −½‖q‖²] one product gives the logit
                # −½‖q − k‖² + log s.
                "augmented": np.hstack(
                    [
                        keys,
                        (log_weight - 0.5 * np.einsum("ij,ij->i", keys, keys))[:, None],
                        np.ones((len(keys), 1)),
                    ]
                )[order],
            }
        inner = self.feature_map.inner
        self._inner_total = inner(sums[0, :r])
        # G S_c for every cell at once: the far field of a cell is G S − Σ_near G S_c.
        self._inner_cells = inner(cell_sums.transpose(1, 0, 2).reshape(r, -1))
        self._inner_cells = np.ascontiguousarray(
            self._inner_cells.reshape(r, self.n_cells, m).transpose(1, 0, 2)
        )
        self._far_cache = np.empty_like(self._inner_cells)
        self._far_ready[:] = False
        return self

    # ------------------------------------------------------------- the split

    def _near_rows(self, c):
        """Positions (in cell order) of the keys of cell ``c``'s near cells."""
        start = self._near["start"]
        cells = self.near_cells[c]
        first, length = start[cells], start[cells + 1] - start[cells]
        # Runs first[j], first[j] + 1, …, first[j] + length[j] - 1, in one allocation.
        offsets = np.repeat(first - np.cumsum(length) + length, length)
        return offsets + np.arange(length.sum())

    def _far_sums(self, c):
        r"""The far field's sums for cell ``c``'s queries, :math:`G(S - \sum_{C(c)} S_c)`
        (computed once per cell; threads that race compute the same values)."""
        if not self._far_ready[c]:
            self._far_cache[c] = self._inner_total - self._inner_cells[self.near_cells[c]].sum(0)
            self._far_ready[c] = True
        return self._far_cache[c]

    def cells_of(self, U):
        """The cell of each projected input: its nearest center."""
        U = np.nan_to_num(np.asarray(U, dtype=float), nan=0.0, posinf=1e300, neginf=-1e300)
        return self._tree.query(U, k=1, return_distance=False).ravel().astype(np.int64)

    def cell_order(self, X):
        """An order of the queries ``X`` that puts those of one cell together."""
        return np.argsort(self.cells_of(self.far.project(X, 0, "query")), kind="stable")

    def _groups(self, X):
        """The projected queries, their log base features, and their rows grouped by cell."""
        Q = self.far.project(X, 0, "query")
        with np.errstate(over="ignore", invalid="ignore"):
            logs = self.feature_map.log_transform(Q)
        cells = self.cells_of(Q)
        order = np.argsort(cells, kind="stable")
        bounds = np.flatnonzero(np.diff(cells[order])) + 1
        groups = [(cells[rows[0]], rows) for rows in np.split(order, bounds) if len(rows)]
        return Q, logs, groups

    def _split(self, Q, logs, c, exclude=None):
        """Per query of cell ``c``: the near keys' shifted kernel values, the far field's
        scaled query features, the shift, and whether the far field is kept.

        ``exclude`` (positions in cell order, one per query, or -1) leaves a key out of the
        near field (the query's own row, for a leave-one-out measurement).
        """
        near = self._near
        rows = self._near_rows(c)
        centre = self.centers[c]
        dq = Q - centre
        dk = near["keys"][rows] - centre
        logits = dq @ dk.T
        logits -= 0.5 * np.einsum("ij,ij->i", dq, dq)[:, None]
        logits += (near["log_weight"][rows] - 0.5 * np.einsum("ij,ij->i", dk, dk))[None, :]
        if exclude is not None:
            hit = rows[None, :] == exclude[:, None]
            logits[hit] = -np.inf
        far_logs = logs + self.far.key_log_scale[0]
        top = logits.max(axis=1, initial=-np.inf)
        # No near key (empty cells): the far field sets the scale.
        empty = ~np.isfinite(top)
        top[empty] = far_logs[empty].max(axis=1)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            kernel = np.exp(logits - top[:, None])
            far = np.exp(far_logs - top[:, None])
        return rows, kernel, far, top

    def _combine(self, kernel, far, rows, c):
        """Near and far sums of the moments; the far field only where its mass is positive."""
        near_sums = kernel @ self._near["moments"][rows]
        with np.errstate(over="ignore", invalid="ignore"):
            far_sums = far @ self._far_sums(c)
        keep = (far_sums[:, -1] > 0) & np.all(np.isfinite(far_sums), axis=1)
        return near_sums + np.where(keep[:, None], far_sums, 0.0), keep

    # ------------------------------------------------------------ predicting

    def _unshifted_sums(self, Q, logs, c):
        r"""Near plus far sums of queries of cell ``c`` without a shift, and the rows that
        lie more than ``REACH`` kernel units from every near key.

        Every logit :math:`-\|q - k\|^2/2 + \log s` is at most 0 (and so is every far
        log-feature, :math:`\log a_j(q)` plus the sums' scale), so nothing overflows, and
        a query within ``REACH`` of a near key of the largest weight keeps a near mass far
        above the underflow. The keys go in tiles that stay in cache.
        """
        near = self._near
        rows = self._near_rows(c)
        K, moments = near["augmented"][rows], near["moments"][rows]
        half = 0.5 * np.einsum("ij,ij->i", Q, Q)
        Q = np.hstack([Q, np.ones((len(Q), 1)), -half[:, None]])
        near_sums = np.zeros((len(Q), moments.shape[1]))
        with np.errstate(under="ignore", over="ignore", invalid="ignore"):
            for start in range(0, len(rows), _KEY_TILE):
                tile = slice(start, start + _KEY_TILE)
                logits = Q @ K[tile].T
                near_sums += np.exp(logits, out=logits) @ moments[tile]
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            far = np.exp(logs + self.far.key_log_scale[0])
            far_sums = far @ self._far_sums(c)
        keep = (far_sums[:, -1] > 0) & np.all(np.isfinite(far_sums), axis=1)
        far_query = ~((near_sums[:, -1] > _NEAR_MASS) & np.all(np.isfinite(near_sums), axis=1))
        return near_sums + np.where(keep[:, None], far_sums, 0.0), far_query

    def moments(self, X, h):
        """First and second moments of the scaled centered values at ``X`` (as
        :meth:`FeatureKernel.moments`); the far field alone without kept keys."""
        if self._near is None:
            return self.far.moments(X, h)
        Q, logs, groups = self._groups(X)
        sums = np.zeros((len(X), self.far.key_sums.shape[2]))
        far_query = np.zeros(len(X), dtype=bool)
        for c, group in groups:
            sums[group], far_query[group] = self._unshifted_sums(Q[group], logs[group], c)
        t = self.n_outputs
        unreliable = far_query | ~((sums[:, -1] > 0) & np.all(np.isfinite(sums), axis=1))
        first = np.zeros((len(X), t))
        second = np.zeros((len(X), t))
        ok = ~unreliable
        first[ok] = sums[ok, :t] / sums[ok, -1:]
        second[ok] = sums[ok, t : 2 * t] / sums[ok, -1:]
        return first, second, unreliable

    def _key_features(self, positions):
        """Nyström base features times the weights of the keys at ``positions`` (cell
        order), on the scale of the sums."""
        near = self._near
        features, top = self.far.key_features(
            0, near["keys"][positions], near["log_weight"][positions]
        )
        return features * np.exp(top - self.far.key_log_scale[0])

    def _split_weights(self, X, keys=None, exclude=None):
        """Split weights of queries ``X`` on the keys at ``keys`` (cell order; all by
        default), normalized by the full denominator, and the denominators' parts."""
        near = self._near
        n = len(near["order"])
        keys = np.arange(n) if keys is None else keys
        column = np.full(n, -1, dtype=np.int64)
        column[keys] = np.arange(len(keys))
        key_features = self._key_features(keys)
        inner = self.feature_map.inner
        Q, logs, groups = self._groups(X)
        weights = np.zeros((len(X), len(keys)))
        unreliable = np.zeros(len(X), dtype=bool)
        for c, group in groups:
            rows, kernel, far, top = self._split(
                Q[group], logs[group], c, None if exclude is None else exclude[group]
            )
            sums, keep = self._combine(kernel, far, rows, c)
            with np.errstate(over="ignore", invalid="ignore"):
                low_rank = far @ inner(key_features.T)
            low_rank[~keep] = 0.0
            mine = column[rows] >= 0
            low_rank[:, column[rows[mine]]] = kernel[:, mine]
            denominator = sums[:, -1]
            bad = ~((denominator > 0) & np.all(np.isfinite(low_rank), axis=1))
            bad |= ~(top > np.log(_NEAR_MASS))
            weights[group] = low_rank / np.where(bad, 1.0, denominator)[:, None]
            weights[group[bad]] = 0.0
            unreliable[group] = bad
        return weights, unreliable

    def weights(self, X, h):
        """Head ``h``'s split weights against the bound keys (in the order they were given):
        exact on each query's near cells, Nyström elsewhere; rows sum to 1 (0 on the
        unreliable rows)."""
        if self._near is None:
            return self.far.weights(X, h)
        sorted_weights, unreliable = self._split_weights(X)
        weights = np.empty_like(sorted_weights)
        weights[:, self._near["order"]] = sorted_weights
        return weights, unreliable

    # ------------------------------------------------------------- its error

    def weight_errors(self, rows, n_keys_sample=None, random_state=None):
        r"""The L1 distance between the split weights and the exact weights of training rows.

        Row ``i`` (an index into the keys given to :meth:`bind`) is a query left out of the
        sums, as a new query would be: its own key is removed from its near field and from
        the exact weights. With ``n_keys_sample`` below the number of keys, the far keys'
        part of the distance is estimated from a uniform sample of that many keys (scaled
        by the number of far keys over the number sampled); the near keys' part is exact.

        Parameters
        ----------
        rows : array_like of int
            Training rows (indices into the keys given to :meth:`bind`).
        n_keys_sample : int, optional
            Keys the far part is measured on; all by default.
        random_state : int, RandomState instance or None
            Draws the sample of keys.

        Returns
        -------
        errors : ndarray of shape (len(rows),)
            :math:`\sum_j |\hat w_j - w_j|` per row, between 0 and 2.
        """
        return _ErrorProbe(self, rows, n_keys_sample, random_state).errors()


class _ErrorProbe:
    """The exact weights of sampled training rows and their low-rank estimates on a sample
    of keys, computed once, against which any number of near cells is measured."""

    def __init__(self, kernel, rows, n_keys_sample=None, random_state=None):
        self.kernel = kernel
        near = kernel._near
        n = len(near["order"])
        position = np.empty(n, dtype=np.int64)
        position[near["order"]] = np.arange(n)
        self.own = position[np.asarray(rows)]
        self.Q = near["keys"][self.own]
        self.exact = self._exact_weights()
        if n_keys_sample is None or n_keys_sample >= n:
            self.sample = np.arange(n)
        else:
            rng = np.random.default_rng(check_random_state(random_state).randint(2**31 - 1))
            self.sample = np.sort(rng.choice(n, n_keys_sample, replace=False))
        self.logs = kernel.feature_map.log_transform(self.Q)
        self.cells = kernel.cells_of(self.Q)
        # The low-rank estimate on the sampled keys, each row scaled by its largest feature;
        # the scale a given near field needs is applied per row later.
        self.top_logs = self.logs.max(axis=1) + kernel.far.key_log_scale[0]
        features = np.exp(self.logs - self.logs.max(axis=1, keepdims=True))
        # (a(q)ᵀ G) a(k): r² per query, then r per sampled key.
        inner_queries = kernel.feature_map.inner(features.T).T
        self.low_rank = inner_queries @ kernel._key_features(self.sample).T

    def _exact_weights(self):
        """The exact weights of the queries over every key (cell order), each with its own
        key left out."""
        near = self.kernel._near
        K = near["keys"]
        half = 0.5 * np.einsum("ij,ij->i", K, K) - near["log_weight"]
        weights = np.empty((len(self.Q), len(K)))
        for part in iter_query_blocks(len(self.Q), len(K), cache=False):
            logits = self.Q[part] @ K.T - half[None, :]
            logits[np.arange(len(logits)), self.own[part]] = -np.inf
            logits -= logits.max(axis=1, keepdims=True)
            w = np.exp(logits, out=logits)
            weights[part] = w / w.sum(axis=1, keepdims=True)
        return weights

    def errors(self):
        """Per query, the L1 distance of the split weights (at the kernel's current near
        cells) from the exact ones: near keys exactly, far keys on the sample."""
        kernel = self.kernel
        n = len(kernel._near["order"])
        errors = np.zeros(len(self.Q))
        for c in np.unique(self.cells):
            group = np.flatnonzero(self.cells == c)
            rows, near_kernel, far, top = kernel._split(
                self.Q[group], self.logs[group], c, self.own[group]
            )
            sums, keep = kernel._combine(near_kernel, far, rows, c)
            denominator = sums[:, -1:]
            exact_near = self.exact[np.ix_(group, rows)]
            near_error = np.abs(near_kernel / denominator - exact_near).sum(axis=1)
            is_far = np.ones(n, dtype=bool)
            is_far[rows] = False
            far_sample = is_far[self.sample]
            with np.errstate(over="ignore", under="ignore"):
                scale = np.exp(self.top_logs[group] - top)[:, None] / denominator
            low_rank = self.low_rank[group][:, far_sample] * scale
            low_rank[~keep] = 0.0
            gap = np.abs(low_rank - self.exact[np.ix_(group, self.sample[far_sample])])
            # A query's own key lies in its own cell, so it is never among the far keys.
            factor = is_far.sum() / max(far_sample.sum(), 1)
            errors[group] = near_error + gap.sum(axis=1) * factor
        return errors


def choose_near_cells(kernel, tol, max_near_keys, rows, n_keys_sample, random_state=None):
    """The fewest near cells whose measured weight error is within ``tol``.

    Doubles the near cells (1, 2, 4, …) until the mean L1 weight error of the sampled
    training ``rows`` (:meth:`NearFieldKernel.weight_errors`) is at most ``tol``, or until
    more cells would compute more than ``max_near_keys`` keys exactly per query (then the
    most cells within that bound). The exact weights are computed once.

    Parameters
    ----------
    kernel : NearFieldKernel
        With its keys accumulated; left set to the chosen number of cells.
    tol : float
        Tolerance on the mean L1 distance between split and exact weights.
    max_near_keys : float
        Most keys computed exactly per query (on average).
    rows : ndarray of int
        Training rows (indices into the bound keys) used as left-out queries.
    n_keys_sample : int
        Keys on which the far field's part of the error is measured.
    random_state : int, RandomState instance or None

    Returns
    -------
    errors : ndarray of shape (len(rows),)
        The per-row L1 errors at the chosen number of cells.
    met : bool
        Whether the mean error is within ``tol``.
    """
    probe = _ErrorProbe(kernel, rows, n_keys_sample, random_state)
    chosen, chosen_errors = None, None
    P = 1
    while True:
        kernel.set_near_cells(P)
        if chosen is not None and kernel.mean_near_keys > max_near_keys:
            break
        errors = probe.errors()
        chosen, chosen_errors = kernel.n_near_cells, errors
        if errors.mean() <= tol or kernel.n_near_cells == kernel.n_cells:
            break
        P *= 2
    kernel.set_near_cells(chosen)
    return chosen_errors, bool(chosen_errors.mean() <= tol)
