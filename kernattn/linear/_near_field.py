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

**Cells.** The keys are cut into cells: key :math:`k` lies in the cell of its nearest
center :math:`m_c` (the centers are random training keys, about one per 50, so cells hold
about as many keys wherever the data are dense or sparse; a
:class:`sklearn.neighbors.KDTree` on the centers finds them). A query's near set
:math:`N(q)` is every key in the cells :math:`C(q)` of the ``n_near_cells`` centers nearest to
the query's own center, so queries of one cell share their near set and the exact part is
one dense product per cell. The far field of those queries is the low-rank estimate over all
keys minus its part over the near cells: :math:`S_c, z_c`, the feature sums of cell
:math:`c`, are sums over the rows of that cell, accumulated in the same pass as the totals
:math:`S = \sum_c S_c`, :math:`z = \sum_c z_c`. A query more than ``REACH`` (6) kernel
units from every key of its near set is not served (its nearest keys may lie in cells that
are not near): the estimator computes it exactly.

**Guarantees.** Near keys get their exact kernel, so their weights are positive; far keys
get :math:`a(q)^\top G\, a(k)`, which can be negative. When the far field's denominator is
not positive (the low-rank estimate of a positive mass is wrong), the query uses its near
field alone: its weights are then those of the exact kernel truncated to :math:`N(q)`,
positive. The weights of a query sum to 1 either way. The error of the split is measured,
not assumed: :meth:`NearFieldKernel.weight_errors` compares the split weights of sampled
training rows (each left out of its own sums) with the exact weights.

**Cost.** Prediction sorts the queries by cell once; each cell's queries meet their near
keys in one dense product (the logits in double precision, their exponentials in single
precision, relative error below 1e-7), on threads over runs of cells. At fit, the keys'
features go through in runs of whole cells, each run summed per cell in one sparse product;
the far sums of every cell are one sparse product of the near-cell indicator with the
per-cell sums. The error probe (:class:`_ErrorProbe`) keeps only what does not depend on
the near field or the far field's map — each sampled row's exact total, its largest logit,
its exact kernel on a sample of keys — so that the near field can be grown
(:func:`grow_near_cells`) and several maps compared (``n_components="auto"``) at the cost
of the near keys of 100 rows per step.

References
----------
.. [1] B. Chen, T. Dao, E. Winsor, Z. Song, A. Rudra, C. Ré, "Scatterbrain: unifying sparse
   and low-rank attention", NeurIPS 2021.
.. [2] C. K. I. Williams, M. Seeger, "Using the Nyström method to speed up kernel
   machines", NeurIPS 2001.
"""

import copy

import numpy as np
from scipy import sparse
from sklearn.neighbors import KDTree
from sklearn.utils import check_random_state

from kernattn._blocks import KEY_TILE, map_query_blocks, query_block_size
from kernattn._sums import augment_keys, augment_queries, gaussian_key_bias, kernel_sums

# A query more than REACH kernel units from every near key (near mass below e^(−REACH²/2)
# of a key of the largest weight at distance 0) may have its nearest keys in cells that are
# not near its own: it is computed exactly.
REACH = 6.0
_NEAR_MASS = np.exp(-0.5 * REACH**2)
# Entries of a (queries × near keys) tile of logits: it stays in cache.
_TILE_ENTRIES = 2**17
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
    centers : ndarray of shape (n_cells, head_dim)
        The cell centers, in the projected (and shifted) coordinates the map sees.
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
        self._inner_cells = None

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
    def _counts(self):
        """Keys per cell: those sorted for the near field, else those summed."""
        return np.diff(self._near["start"]) if self._near is not None else self.cell_counts

    @property
    def n_keys(self):
        return int(self._counts.sum())

    @property
    def mean_near_keys(self):
        """Keys computed exactly per query, averaged over the cells (as keys fall)."""
        counts = self._counts
        if not counts.sum():
            return 0.0
        near = counts[self.near_cells].sum(axis=1)
        return float(near @ counts / counts.sum())

    def set_near_cells(self, n_near_cells):
        """Compute ``n_near_cells`` cells exactly per query (at most every cell)."""
        P = int(min(max(n_near_cells, 1), self.n_cells))
        self.n_near_cells = P
        # Nearest first, so fewer cells are a prefix of more: one query serves every P up
        # to the widest asked so far.
        if getattr(self, "_nearest_cells", None) is None or self._nearest_cells.shape[1] < P:
            width = min(max(2 * P, 64), self.n_cells)
            self._nearest_cells = self._tree.query(self.centers, k=width, return_distance=False)
        self.near_cells = self._nearest_cells[:, :P]
        self._far_all = None
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

    def set_feature_map(self, feature_map):
        """Use another fitted Nyström map for the far field (before any sums are taken):
        the near field's keys, cells and exact kernel stay."""
        if self.far.target_sums[2].any():
            raise RuntimeError("the far field's map can only change before its sums are taken")
        far = copy.copy(self.far)
        far.feature_maps = [feature_map]
        r, m = feature_map.n_components_, far.key_sums.shape[2]
        far.key_sums = np.zeros((1, r, m))
        self.far = far
        self.cell_sums = np.zeros((self.n_cells, r, m))
        return self

    def sort_keys(self, X, values, sample_weight):
        """Keep the bound keys ``X`` sorted by cell, with their values, for the near field
        (once; :meth:`accumulate` does it if it was not done)."""
        if self._near is not None:
            raise RuntimeError("the near field keeps the keys of one fit; call without_keys")
        order, keys, log_weight, moments, cells, start = self._by_cell(X, values, sample_weight)
        self._near = {
            "order": order,
            "cells": cells,
            "start": start,
            "keys": keys,
            "log_weight": log_weight,
            "moments": moments,
            # The augmented keys [k, 1, −½‖k‖² + log s] (one product with the augmented
            # queries gives the logit −½‖q − k‖² + log s), then the moments: one row of the
            # table per key.
            "table": np.hstack([augment_keys(keys, gaussian_key_bias(keys, log_weight)), moments]),
            "summed": False,
        }
        return self

    def _by_cell(self, X, values, sample_weight):
        """The keys of ``X``, their log sample weights, moments ``[v, v², 1]`` and cells,
        sorted by cell (stable), with the sort order and each cell's first row."""
        far = self.far
        log_weight = far.log_weights(sample_weight)
        scaled = values / far.value_scale
        moments = np.hstack([scaled, scaled**2, np.ones((len(scaled), 1))])
        with np.errstate(over="ignore", invalid="ignore"):
            keys = far.project(X, 0, "key")
            cells = self.cells_of(keys)
        order = np.argsort(cells, kind="stable")
        cells = cells[order]
        start = np.searchsorted(cells, np.arange(self.n_cells + 1))
        return order, keys[order], log_weight[order], moments[order], cells, start

    def accumulate(self, X, values, sample_weight):
        """Add keys to the total and per-cell sums; with the keys bound (``fit``), also keep
        them sorted by cell for the near field (one call only).

        The keys go through in runs of whole cells (on threads for large problems): each
        run sums its cells' features times the moments in one sparse product and applies
        :math:`G` to them, with its own scale, and the runs are brought to a common scale
        at the end (the totals are the sums over the cells).
        """
        if not len(X):
            return self
        far = self.far
        keep = far.exact is not None
        if keep:
            if self._near is None:
                self.sort_keys(X, values, sample_weight)
            elif self._near["summed"]:
                raise RuntimeError("the near field keeps the keys of one fit; call without_keys")
            near = self._near
            keys, log_weight, moments = near["keys"], near["log_weight"], near["moments"]
            cells, start = near["cells"], near["start"]
        else:
            _, keys, log_weight, moments, cells, start = self._by_cell(X, values, sample_weight)
        r, m = far.n_components, moments.shape[1]
        inner_matrix = self.feature_map.inner_matrix_
        new_sums = np.zeros((self.n_cells, r, m))
        new_inner = np.zeros((self.n_cells, r, m))

        def sum_cells(run):
            rows = slice(start[run.start], start[run.stop])
            n_rows = rows.stop - rows.start
            if not n_rows:
                return run, -np.inf
            with np.errstate(over="ignore", invalid="ignore", under="ignore"):
                features, top = far.key_features(0, keys[rows], log_weight[rows])
            local = cells[rows] - run.start
            spread = sparse.csr_matrix(
                (
                    moments[rows].T.ravel(),
                    (
                        (np.arange(m)[:, None] * (run.stop - run.start) + local).ravel(),
                        np.tile(np.arange(n_rows), m),
                    ),
                ),
                shape=(m * (run.stop - run.start), n_rows),
            )
            # Row j · cells + c of the product: Σ over cell c's keys of moment j × features.
            block = np.asarray(spread @ features).reshape(m, run.stop - run.start, r)
            new_sums[run] = block.transpose(1, 2, 0)
            new_inner[run] = np.einsum("kl,jcl->ckj", inner_matrix, block, optimize=True)
            return run, top

        per_key = max(len(keys) / self.n_cells, 1.0) * r * (m + 1)
        runs = map_query_blocks(
            sum_cells, self.n_cells, int(per_key), n_jobs=None, cache=_CELL_ENTRIES
        )
        tops = np.array([top for _, top in runs])
        top = max(far.key_log_scale[0], tops.max(initial=-np.inf))
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            for run, run_top in runs:
                factor = np.exp(run_top - top) if np.isfinite(run_top) else 0.0
                new_sums[run] *= factor
                new_inner[run] *= factor
            old = np.exp(far.key_log_scale[0] - top) if np.isfinite(far.key_log_scale[0]) else 0.0
        cell_sums = self.cell_sums * old + new_sums
        inner_cells = (
            self._inner_cells * old if self._inner_cells is not None else 0.0
        ) + new_inner
        sums = far.key_sums.copy()
        sums[0, :r] = cell_sums.sum(axis=0)
        radius = far.key_radius.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            radius[0] = max(radius[0], np.sqrt(np.einsum("ij,ij->i", keys, keys).max()))
        far.key_sums, far.key_radius = sums, radius
        far.key_log_scale = np.array([top])
        weight = np.exp(log_weight)
        scaled = moments[:, : self.n_outputs]
        far.target_sums = far.target_sums + np.stack(
            [weight @ scaled, weight @ scaled**2, np.full(scaled.shape[1], weight.sum())]
        )
        self.cell_sums = cell_sums
        self.cell_counts = self.cell_counts + np.diff(start)
        self._inner_cells = inner_cells
        self._inner_total = inner_cells.sum(axis=0)
        self._far_all = None
        if keep:
            self._near["summed"] = True
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
        r"""The far field's sums for cell ``c``'s queries, :math:`G(S - \sum_{C(c)} S_c)`."""
        if self._far_all is not None:
            return self._far_all[c]
        return self._inner_total - self._inner_cells[self.near_cells[c]].sum(axis=0)

    def precompute(self):
        """Compute every cell's far-field sums once (after the near cells are chosen), so
        that prediction, on several threads, only reads them: one sparse product of the
        cells' near-cell indicator with the per-cell sums."""
        n_cells, P = self.near_cells.shape
        indicator = sparse.csr_matrix(
            (np.ones(n_cells * P), self.near_cells.ravel(), np.arange(0, n_cells * P + 1, P)),
            shape=(n_cells, n_cells),
        )
        flat = self._inner_cells.reshape(n_cells, -1)
        far_all = np.empty_like(flat)

        def subtract(rows):
            far_all[rows] = self._inner_total.reshape(-1) - indicator[rows] @ flat

        map_query_blocks(subtract, n_cells, P * flat.shape[1], cache=False)
        self._far_all = far_all.reshape(self._inner_cells.shape)
        return self

    def cells_of(self, U):
        """The cell of each projected input: its nearest center."""
        U = np.nan_to_num(np.asarray(U, dtype=float), nan=0.0, posinf=1e300, neginf=-1e300)
        cells = np.empty(len(U), dtype=np.int64)

        def assign(rows):
            cells[rows] = self._tree.query(U[rows], k=1, return_distance=False).ravel()

        # The tree search releases the GIL: blocks of queries on threads.
        map_query_blocks(assign, len(U), self.n_cells, cache=False)
        return cells

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

    def query_cells(self, X):
        """The projected queries ``X`` and the cell of each."""
        Q = self.far.project(X, 0, "query")
        return Q, self.cells_of(Q)

    def split_sums(self, Q, c):
        r"""Near plus far sums of the moments for queries ``Q`` (projected) of cell ``c``,
        without a shift, and the rows that lie more than ``REACH`` kernel units from every
        near key.

        Every logit :math:`-\|q - k\|^2/2 + \log s` is at most 0 (and so is every far
        log-feature, :math:`\log a_j(q)` plus the sums' scale), so nothing overflows, and
        a query within ``REACH`` of a near key of the largest weight keeps a near mass far
        above the underflow. The logits are formed in double precision with one product,
        :math:`[q, -\|q\|^2/2, 1]^\top [k, 1, \log s - \|k\|^2/2]`; their exponentials
        in single precision (relative error below 1e-7, a few times faster), summed in
        double precision. Logits below about −87 give subnormal or zero exponentials (keys
        weighing less than 1e-37 of a key at distance 0: nothing a served query can see);
        they are kept as they are, which measured faster than raising them to a floor.
        """
        return self.join_sums(self.near_sums(Q, c), self.far_field_sums(Q, c))

    def near_sums(self, Q, c, buffers=None):
        """The near part of :meth:`split_sums`: the exact sums of the moments over the kept
        keys of cell ``c``'s near cells (without a shift). The sums of several sets of keys
        (the partitions of a training set, each sorted with :meth:`sort_keys`) add up.

        ``buffers``: two float arrays, C-contiguous, with at least as many rows as the near
        keys, that receive the near keys' rows of the two contiguous parts of the table of
        keys, ``_near["head"]`` (``[k, 1, log s - ‖k‖²/2]``) and ``_near["tail"]`` (the
        moments), instead of new arrays: over many cells, no large allocation per cell (an
        allocator that maps every large array anew makes those slow)."""
        near = self._near
        rows = self._near_rows(c)
        p = Q.shape[1] + 2
        if buffers is None:
            table = np.take(near["table"], rows, axis=0)
            head, tail = table[:, :p], table[:, p:]
        else:
            # mode="clip": the rows are valid, and "raise" would copy through a buffer.
            head = np.take(near["head"], rows, axis=0, out=buffers[0][: len(rows)], mode="clip")
            tail = np.take(near["tail"], rows, axis=0, out=buffers[1][: len(rows)], mode="clip")
        Qa = augment_queries(Q)
        tile = max(KEY_TILE, _TILE_ENTRIES // max(len(Q), 1))

        def logits(keys, out):
            return np.matmul(Qa, head[keys].T, out=out)

        _, near_sums = kernel_sums(
            logits, len(head), tail, shift=False, floor=False, tile=tile, precision=np.float32
        )
        return near_sums

    def far_field_sums(self, Q, c):
        r"""The far part of :meth:`split_sums`: :math:`a(q)^\top G (S - \sum_{C(c)} S_c)`
        for queries ``Q`` (projected) of cell ``c``, without a shift."""
        with np.errstate(under="ignore", over="ignore", invalid="ignore"):
            logs = self.feature_map.log_transform(Q)
            logs += self.far.key_log_scale[0]
            return np.exp(logs, out=logs) @ self._far_sums(c)

    @staticmethod
    def join_sums(near_sums, far_sums):
        """:meth:`split_sums` from its near and far parts: the far part only where its mass
        is positive; the rows whose near mass is below ``_NEAR_MASS`` are named."""
        keep = (far_sums[:, -1] > 0) & np.all(np.isfinite(far_sums), axis=1)
        far_query = ~((near_sums[:, -1] > _NEAR_MASS) & np.all(np.isfinite(near_sums), axis=1))
        return near_sums + np.where(keep[:, None], far_sums, 0.0), far_query

    def set_cell_sums(self, cell_sums, cell_counts):
        """Take per-cell sums accumulated elsewhere (on the scale of ``far.key_sums``, which
        the caller sets to their total): the far field's :math:`G S_c` follow from them."""
        self.cell_sums = np.asarray(cell_sums, dtype=float)
        self.cell_counts = np.asarray(cell_counts, dtype=np.int64)
        G = self.feature_map.inner_matrix_
        self._inner_cells = np.einsum("kl,clj->ckj", G, self.cell_sums, optimize=True)
        self._inner_total = self._inner_cells.sum(axis=0)
        self._far_all = None
        return self

    def sorted_moments(self, Q, cells):
        """:meth:`moments` of projected queries ``Q`` whose ``cells`` are sorted (the queries
        of a cell together), as the estimator's prediction gives them."""
        sums = np.zeros((len(Q), self.far.key_sums.shape[2]))
        far_query = np.zeros(len(Q), dtype=bool)
        bounds = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1], True])
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            group = slice(start, stop)
            sums[group], far_query[group] = self.split_sums(Q[group], cells[start])
        return self.moments_of(sums, far_query)

    def moments_of(self, sums, far_query):
        """First and second moments (and the unreliable rows) from :meth:`split_sums`."""
        t = self.n_outputs
        unreliable = far_query | ~((sums[:, -1] > 0) & np.all(np.isfinite(sums), axis=1))
        first = np.zeros((len(sums), t))
        second = np.zeros((len(sums), t))
        ok = ~unreliable
        first[ok] = sums[ok, :t] / sums[ok, -1:]
        second[ok] = sums[ok, t : 2 * t] / sums[ok, -1:]
        return first, second, unreliable

    def moments(self, X, h):
        """First and second moments of the scaled centered values at ``X`` (as
        :meth:`FeatureKernel.moments`); the far field alone without kept keys."""
        if self._near is None:
            return self.far.moments(X, h)
        Q, cells = self.query_cells(X)
        order = np.argsort(cells, kind="stable")
        first, second, unreliable = self.sorted_moments(Q[order], cells[order])
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return first[inverse], second[inverse], unreliable[inverse]

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
        return _ErrorProbe(self, rows, n_keys_sample, random_state).use_kernel().errors()


class _ErrorProbe:
    r"""The exact kernel of sampled training rows (each left out of its own sums), against
    which any number of near cells, and any Nyström map of the far field, is measured.

    For a query :math:`q` with exact kernel values :math:`\kappa_j` (shifted by the
    largest), total :math:`T = \sum_j \kappa_j`, near mass :math:`M = \sum_{N(q)}
    \kappa_j`, low-rank values :math:`\ell_j = a(q)^\top G\, a(k_j) s_j` and far mass
    :math:`F` (the low-rank sum over the far keys, 0 when it is not positive), the split
    weights are :math:`\kappa_j / D` on the near keys and :math:`\ell_j / D` on the far
    keys, :math:`D = M + F`, so the L1 error is

    .. math::

        M \left|\tfrac1D - \tfrac1T\right| + \sum_{j \notin N(q)}
        \left|\tfrac{\ell_j}{D} - \tfrac{\kappa_j}{T}\right| :

    the near keys' part is exact, the far keys' part is measured on a uniform sample of
    keys (scaled by the far keys over the far keys sampled). :math:`F` is the kernel's own
    far sum (:meth:`use_kernel`), or, for a map whose sums over every key are not taken
    (:meth:`use_map`, to choose the rank), the same scaled sum over the sampled far keys.
    A query with a near mass below :math:`e^{-18}` of a key at distance 0 is computed
    exactly by the estimator: its error is 0.
    """

    def __init__(self, kernel, rows, n_keys_sample=None, random_state=None):
        self.kernel = kernel
        near = kernel._near
        n = len(near["order"])
        position = np.empty(n, dtype=np.int64)
        position[near["order"]] = np.arange(n)
        self.own = position[np.asarray(rows)]
        self.Q = near["keys"][self.own]
        self.cells = near["cells"][self.own]
        if n_keys_sample is None or n_keys_sample >= n:
            self.sample = np.arange(n)
        else:
            rng = np.random.default_rng(check_random_state(random_state).randint(2**31 - 1))
            self.sample = np.sort(rng.choice(n, n_keys_sample, replace=False))
        self.sample_cells = near["cells"][self.sample]
        self._augmented = augment_queries(self.Q)
        self.top, self.total = self._exact_totals()
        self.sample_kernel = self._kernel(np.arange(len(self.Q)), self.sample)
        self.low_rank = None
        self._masses = {}

    def _kernel(self, queries, positions):
        """Exact kernel values of queries (indices into the probe's) on keys at
        ``positions`` (cell order), shifted by each query's largest, own key at 0."""
        p = self.Q.shape[1] + 2
        logits = self._augmented[queries] @ self.kernel._near["table"][positions, :p].T
        logits[positions[None, :] == self.own[queries][:, None]] = -np.inf
        logits -= self.top[queries][:, None]
        with np.errstate(under="ignore"):
            return np.exp(logits, out=logits)

    def _exact_totals(self):
        """Per query the largest logit over the other keys and the sum of the kernel
        shifted by it (the online softmax over tiles of keys)."""
        table = self.kernel._near["table"]
        p = self.Q.shape[1] + 2

        def logits(keys, out):
            return np.matmul(self._augmented, table[keys, :p].T, out=out)

        def total(weights, keys):
            return weights.sum(axis=1, keepdims=True)

        own = (np.arange(len(self.Q)), self.own)
        tile = query_block_size(len(table), len(self.Q))
        top, sums = kernel_sums(logits, len(table), total, floor=False, left_out=own, tile=tile)
        return top, sums[:, 0]

    def _near_mass(self):
        """Per query the exact kernel's mass on its near keys (at the kernel's current near
        cells; kept for each number of cells, since every far field meets the same)."""
        kernel = self.kernel
        P = kernel.n_near_cells
        if P not in self._masses:
            mass = np.zeros(len(self.Q))
            for c in np.unique(self.cells):
                group = np.flatnonzero(self.cells == c)
                mass[group] = self._kernel(group, kernel._near_rows(c)).sum(axis=1)
            self._masses[P] = mass
        return self._masses[P]

    def use_kernel(self):
        """Measure the kernel's own far field (its sums over every key)."""
        kernel = self.kernel
        self._map = kernel.feature_map
        logs = self._map.log_transform(self.Q)
        self._query_scale = logs.max(axis=1)
        features = np.exp(logs - self._query_scale[:, None])
        self._far_logs = logs + kernel.far.key_log_scale[0] - self.top[:, None]
        with np.errstate(over="ignore", under="ignore"):
            scale = np.exp(self._query_scale + kernel.far.key_log_scale[0] - self.top)
            self.low_rank = self._map.inner(features.T).T @ kernel._key_features(self.sample).T
            self.low_rank *= scale[:, None]
        self.sampled_far = False
        self.columns = slice(None)
        return self

    def use_map(self, feature_map):
        """Measure a far field of another fitted Nyström map, its far sums estimated on the
        sampled keys."""
        near = self.kernel._near
        logs = feature_map.log_transform(self.Q)
        query_scale = logs.max(axis=1)
        # Every few sampled keys: a map being compared with others needs less precision.
        self.columns = slice(None, None, max(1, len(self.sample) // SEARCH_KEYS))
        sample = self.sample[self.columns]
        key_logs = feature_map.log_transform(near["keys"][sample])
        key_logs += near["log_weight"][sample][:, None]
        key_scale = key_logs.max()
        with np.errstate(over="ignore", under="ignore"):
            queries = feature_map.inner(np.exp(logs - query_scale[:, None]).T).T
            self.low_rank = queries @ np.exp(key_logs - key_scale).T
            self.low_rank *= np.exp(query_scale + key_scale - self.top)[:, None]
        self.sampled_far = True
        return self

    def errors(self):
        """Per query, the L1 distance of the split weights (at the kernel's current near
        cells) from the exact ones: near keys exactly, far keys on the sample."""
        kernel = self.kernel
        counts = np.diff(kernel._near["start"])
        queries = np.arange(len(self.Q))
        near_cells = kernel.near_cells[self.cells]
        # Which sampled keys are far from each query: their cell is not one of its near.
        is_near = np.zeros((len(self.Q), kernel.n_cells), dtype=bool)
        is_near[queries[:, None], near_cells] = True
        far_sample = ~is_near[:, self.sample_cells[self.columns]]
        n_far_sample = far_sample.sum(axis=1)
        factor = (counts.sum() - counts[near_cells].sum(axis=1)) / np.maximum(n_far_sample, 1)
        mass = self._near_mass()
        far = np.zeros(len(self.Q))
        if not self.sampled_far:
            for c in np.unique(self.cells):
                group = np.flatnonzero(self.cells == c)
                with np.errstate(over="ignore", invalid="ignore"):
                    far[group] = np.exp(self._far_logs[group]) @ kernel._far_sums(c)[:, -1]
        low_rank = np.where(far_sample, self.low_rank, 0.0)
        if self.sampled_far:
            far = factor * low_rank.sum(axis=1)
        keep = (far > 0) & np.isfinite(far)
        denominator = mass + np.where(keep, far, 0.0)
        low_rank[~keep] = 0.0
        exact = np.where(far_sample, self.sample_kernel[:, self.columns], 0.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            gap = np.abs(low_rank / denominator[:, None] - exact / self.total[:, None])
            errors = mass * np.abs(1 / denominator - 1 / self.total) + factor * gap.sum(axis=1)
            served = np.log(mass) + self.top > np.log(_NEAR_MASS)
        return np.where(served & np.isfinite(errors), errors, 0.0)


#: Sampled keys on which a candidate map's far field is measured (every few of the probe's).
SEARCH_KEYS = 5000
#: Near cells tried, in this order: steps of about 2^(1/4), so the chosen near field is at most
#: about 1.2 times the smallest that meets the tolerance.
NEAR_CELL_STEPS = np.unique(np.round(2.0 ** (np.arange(80) / 4)).astype(np.int64))


def grow_near_cells(kernel, probe, tol, max_near_keys, first=1):
    """The fewest near cells (on ``NEAR_CELL_STEPS``) whose measured mean weight error is
    within ``tol``, or the most within ``max_near_keys`` keys per query; the kernel is left
    set to them. The search starts at ``first`` cells (a guess) and moves down while the
    tolerance is met, else up (doubling, then back step by step). Returns the errors at the
    chosen number and whether they meet ``tol``."""
    steps = NEAR_CELL_STEPS[NEAR_CELL_STEPS < kernel.n_cells].tolist() + [kernel.n_cells]
    measured = {}

    def measure(i):
        if i not in measured:
            kernel.set_near_cells(steps[i])
            too_many = i > 0 and kernel.mean_near_keys > max_near_keys
            measured[i] = None if too_many else probe.errors()
        return measured[i]

    def met(i):
        errors = measure(i)
        return errors is not None and errors.mean() <= tol

    i = int(np.searchsorted(steps, max(first, 1)))
    i = min(i, len(steps) - 1)
    while i > 0 and measure(i) is None:
        i -= 1
    if met(i):
        # Down while the tolerance is met.
        while i > 0 and met(i - 1):
            i -= 1
    else:
        # Up by doubling (four steps) until met or out of bounds, then back while met.
        low = i
        while not met(i):
            if measure(i) is None or i == len(steps) - 1:
                break
            low, i = i, min(i + 4, len(steps) - 1)
        while met(i) and i - 1 > low and met(i - 1):
            i -= 1
        if not met(i):
            # The most cells within the bound: the last step that was measured.
            i = max(j for j, errors in measured.items() if errors is not None)
    kernel.set_near_cells(steps[i])
    errors = measure(i)
    return errors, bool(errors.mean() <= tol)


def choose_near_cells(kernel, tol, max_near_keys, rows, n_keys_sample, random_state=None):
    """The fewest near cells whose measured weight error is within ``tol``.

    Grows the near cells (1, 2, 3, 4, 6, 8, 11, …, steps of about √2) until the mean L1
    weight error of the sampled training ``rows`` (:meth:`NearFieldKernel.weight_errors`)
    is at most ``tol``, or until more cells would compute more than ``max_near_keys`` keys
    exactly per query (then the most cells within that bound). The exact kernel of the
    rows is computed once.

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
    probe = _ErrorProbe(kernel, rows, n_keys_sample, random_state).use_kernel()
    return grow_near_cells(kernel, probe, tol, max_near_keys)
