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
about as many keys wherever the data are dense or sparse; a :class:`scipy.spatial.cKDTree`
on the centers finds them, and a :class:`sklearn.neighbors.KDTree` orders each center's
neighbours). A query's near set
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
not assumed (:mod:`kernattn.linear._near_search`): the split weights of sampled training rows
(each left out of its own sums) are compared with the exact weights.

**Cost.** Prediction sorts the queries by cell once; each cell's queries meet their near
keys in one dense product (the logits in double precision, their exponentials in single
precision, relative error below 1e-7), on threads over runs of cells. At fit, the keys'
features go through in runs of whole cells, each run summed per cell in one sparse product;
the far sums of every cell are one sparse product of the near-cell indicator with the
per-cell sums.

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
from scipy.spatial import cKDTree
from sklearn.neighbors import KDTree

from kernattn._core.blocks import KEY_TILE, map_query_blocks, query_block_size
from kernattn._core.sums import (
    augment_keys,
    augment_queries,
    gaussian_key_bias,
    kernel_sums,
    merge_shifts,
    rescaling,
    row_shift,
)
from kernattn.linear._feature_kernel import REACH

# A query more than REACH kernel units from every near key (near mass below e^(−REACH²/2)
# of a key of the largest weight at distance 0) may have its nearest keys in cells that are
# not near its own: it is computed exactly.
NEAR_MASS = np.exp(-0.5 * REACH**2)
# Entries of a (queries × near keys) tile of logits: it stays in cache.
_TILE_ENTRIES = 2**17
# Entries of a (rows × features × moments) block when the keys are summed per cell.
_CELL_ENTRIES = 2**21
# Query-key pairs per block of cells in a prediction (a few cells per thread task).
_CELL_WORK = 2**20


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
    >>> from kernattn._engine.heads import unbound_heads
    >>> from kernattn.feature_maps import NystroemFeatures
    >>> from kernattn.linear._feature_kernel import FeatureKernel
    >>> rng = np.random.default_rng(0)
    >>> X, v = 3 * rng.standard_normal((400, 2)), rng.standard_normal((400, 1))
    >>> heads = unbound_heads("gaussian", center=np.zeros(2), input_scale=np.ones(2))
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
        # scipy's tree answers the one-nearest queries of every key and query (a few times
        # faster than scikit-learn's on these sizes); scikit-learn's orders the centers'
        # neighbours.
        self._nearest = cKDTree(self.centers)
        self.set_near_cells(n_near_cells)
        self.near_keys = None
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
    def exact_heads(self):
        return self.far.exact_heads

    @property
    def _counts(self):
        """Keys per cell: those sorted for the near field, else those summed."""
        return np.diff(self.near_keys["start"]) if self.near_keys is not None else self.cell_counts

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
        if self.near_keys is not None:
            raise RuntimeError("the near field keeps the keys of one fit; call without_keys")
        self.near_keys = self.sorted_keys(X, values, sample_weight)
        return self

    def sorted_keys(self, X, values, sample_weight):
        """The keys ``X`` sorted by cell with their values, log-weights and the table the
        near sums read (:meth:`near_sums`), as a dict; nothing is kept here (a part of the
        training set kept elsewhere is sorted with this, and read with ``near_sums(...,
        keys=...)``)."""
        order, keys, log_weight, moments, cells, start = self._by_cell(X, values, sample_weight)
        return {
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
        keep = far.exact_heads is not None
        if keep:
            if self.near_keys is None:
                self.sort_keys(X, values, sample_weight)
            elif self.near_keys["summed"]:
                raise RuntimeError("the near field keeps the keys of one fit; call without_keys")
            near = self.near_keys
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
        # The sums so far and every run's, merged at the largest shift.
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            top, factors = merge_shifts(np.array([far.key_log_scale[0]] + [t for _, t in runs]))
            old = factors[0]
            for (run, _), factor in zip(runs, factors[1:], strict=True):
                new_sums[run] *= factor
                new_inner[run] *= factor
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
            self.near_keys["summed"] = True
        return self

    # ------------------------------------------------------------- the split

    def near_rows(self, c, start=None):
        """Positions (in cell order) of the keys of cell ``c``'s near cells (among the kept
        keys, or keys whose cells begin at ``start``)."""
        start = self.near_keys["start"] if start is None else start
        cells = self.near_cells[c]
        first, length = start[cells], start[cells + 1] - start[cells]
        # Runs first[j], first[j] + 1, …, first[j] + length[j] - 1, in one allocation.
        offsets = np.repeat(first - np.cumsum(length) + length, length)
        return offsets + np.arange(length.sum())

    def far_sums(self, c):
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
            cells[rows] = self._nearest.query(U[rows], k=1)[1]

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
        near = self.near_keys
        rows = self.near_rows(c)
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
        # No near key (empty cells): the far field sets the shift.
        top = row_shift(logits, fallback=far_logs)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            kernel = np.exp(logits - top[:, None])
            far = np.exp(far_logs - top[:, None])
        return rows, kernel, far, top

    def _combine(self, kernel, far, rows, c):
        """Near and far sums of the moments; the far field only where its mass is positive."""
        near_sums = kernel @ self.near_keys["moments"][rows]
        with np.errstate(over="ignore", invalid="ignore"):
            far_sums = far @ self.far_sums(c)
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

    def near_sums(self, Q, c, buffers=None, keys=None, augmented=None):
        """The near part of :meth:`split_sums`: the exact sums of the moments over the kept
        keys of cell ``c``'s near cells (without a shift), or over ``keys`` (a set of keys
        sorted with :meth:`sorted_keys`, with its ``"head"`` and ``"tail"``). The sums of
        several sets of keys (the partitions of a training set) add up.

        ``buffers``: two float arrays, C-contiguous, with at least as many rows as the near
        keys, that receive the near keys' rows of the two contiguous parts of the table of
        keys, ``keys["head"]`` (``[k, 1, log s - ‖k‖²/2]``) and ``keys["tail"]`` (the
        moments), instead of new arrays: over many cells, no large allocation per cell (an
        allocator that maps every large array anew makes those slow). ``augmented``: the
        queries augmented (:func:`~kernattn._core.sums.augment_queries`), if already."""
        near = self.near_keys if keys is None else keys
        rows = self.near_rows(c, near["start"])
        p = Q.shape[1] + 2
        if buffers is None:
            table = np.take(near["table"], rows, axis=0)
            head, tail = table[:, :p], table[:, p:]
        else:
            # mode="clip": the rows are valid, and "raise" would copy through a buffer.
            head = np.take(near["head"], rows, axis=0, out=buffers[0][: len(rows)], mode="clip")
            tail = np.take(near["tail"], rows, axis=0, out=buffers[1][: len(rows)], mode="clip")
        Qa = augment_queries(Q) if augmented is None else augmented
        # Tiles of keys whose block of logits stays in cache, within working_memory.
        tile = max(KEY_TILE, _TILE_ENTRIES // max(len(Q), 1))
        tile = min(tile, query_block_size(len(head), len(Q), n_arrays=2, cache=False))

        def logits(keys, out):
            # Formed in double precision, rounded to single as they are written: the
            # reduction exponentiates them in place.
            if out is None:
                out = np.empty((len(Qa), keys.stop - keys.start), dtype=np.float32)
            return np.matmul(Qa, head[keys].T, out=out)

        _, near_sums = kernel_sums(
            logits,
            len(head),
            tail,
            shift=False,
            floor=False,
            tile=tile,
            precision=np.float32,
            xp=np,
        )
        return near_sums

    def far_field_sums(self, Q, c):
        r"""The far part of :meth:`split_sums`: :math:`a(q)^\top G (S - \sum_{C(c)} S_c)`
        for queries ``Q`` (projected) of cell ``c``, without a shift."""
        with np.errstate(under="ignore", over="ignore", invalid="ignore"):
            logs = self.feature_map.log_transform(Q)
            logs += self.far.key_log_scale[0]
            return np.exp(logs, out=logs) @ self.far_sums(c)

    @staticmethod
    def join_sums(near_sums, far_sums):
        """:meth:`split_sums` from its near and far parts: the far part only where its mass
        is positive; the rows whose near mass is below ``NEAR_MASS`` are named."""
        keep = (far_sums[:, -1] > 0) & np.all(np.isfinite(far_sums), axis=1)
        far_query = ~((near_sums[:, -1] > NEAR_MASS) & np.all(np.isfinite(near_sums), axis=1))
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

    def sorted_moments(self, Q, cells, near=None):
        """:meth:`moments` of projected queries ``Q`` whose ``cells`` are sorted (the queries
        of a cell together), as the estimator's prediction gives them; ``near``: their
        near sums (:meth:`near_sums`), taken elsewhere (over keys not kept here)."""
        far = np.empty((len(Q), self.far.key_sums.shape[2]))
        given = np.empty_like(far) if near is None else near
        bounds = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1], True])
        # The augmented queries of every cell at once (row by row, the same numbers).
        augmented = augment_queries(Q) if near is None else None
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            group = slice(start, stop)
            c = cells[start]
            far[group] = self.far_field_sums(Q[group], c)
            if near is None:
                given[group] = self.near_sums(Q[group], c, augmented=augmented[group])
        # Row by row: joined for every cell at once, the same numbers.
        return self.moments_of(*self.join_sums(given, far))

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
        if self.near_keys is None:
            return self.far.moments(X, h)
        Q, cells = self.query_cells(X)
        order = np.argsort(cells, kind="stable")
        first, second, unreliable = self.sorted_moments(Q[order], cells[order])
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return first[inverse], second[inverse], unreliable[inverse]

    def key_features(self, positions):
        """Nyström base features times the weights of the keys at ``positions`` (cell
        order), on the scale of the sums."""
        near = self.near_keys
        features, top = self.far.key_features(
            0, near["keys"][positions], near["log_weight"][positions]
        )
        return features * rescaling(top, self.far.key_log_scale[0])

    def _split_weights(self, X, keys=None, exclude=None):
        """Split weights of queries ``X`` on the keys at ``keys`` (cell order; all by
        default), normalized by the full denominator, and the denominators' parts."""
        near = self.near_keys
        n = len(near["order"])
        keys = np.arange(n) if keys is None else keys
        column = np.full(n, -1, dtype=np.int64)
        column[keys] = np.arange(len(keys))
        key_features = self.key_features(keys)
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
            bad |= ~(top > np.log(NEAR_MASS))
            weights[group] = low_rank / np.where(bad, 1.0, denominator)[:, None]
            weights[group[bad]] = 0.0
            unreliable[group] = bad
        return weights, unreliable

    def weights(self, X, h):
        """Head ``h``'s split weights against the bound keys (in the order they were given):
        exact on each query's near cells, Nyström elsewhere; rows sum to 1 (0 on the
        unreliable rows)."""
        if self.near_keys is None:
            return self.far.weights(X, h)
        sorted_weights, unreliable = self._split_weights(X)
        weights = np.empty_like(sorted_weights)
        weights[:, self.near_keys["order"]] = sorted_weights
        return weights, unreliable

    # ------------------------------------------------------------- its error


def predict_by_cell(kernel, X, head_moments, return_std, dtype, n_jobs=None, near=None):
    """The estimate (and spread) at the queries ``X`` from the split ``kernel``, the
    queries of one cell together.

    The queries are sorted by cell once, and threads take runs of whole cells: each cell's
    queries meet their near keys in one dense product (:meth:`NearFieldKernel.sorted_moments`).
    One Gaussian head of weight 1 and no bias: the estimate is its mean.

    Parameters
    ----------
    kernel : NearFieldKernel
    X : ndarray of shape (n_queries, n_features)
    head_moments : callable
        ``head_moments(X_rows, moments)``: the mean, spread and unreliable rows of the
        queries ``X_rows`` from their ``moments`` (first, second, unreliable), the rows the
        features cannot serve computed otherwise.
    return_std : bool
    dtype : dtype
        Of the returned arrays.
    n_jobs : int, optional
    near : ndarray, optional
        The queries' near sums, taken where the keys are (a prediction in stages).

    Returns
    -------
    mean, variance : ndarray of shape (n_queries, n_outputs) (``variance`` ``None``
        without ``return_std``)
    n_fallback : int
        The queries the features could not serve.
    """
    Q, cells = kernel.query_cells(X)
    order = np.argsort(cells, kind="stable")
    Q, cells = Q[order], cells[order]
    starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1], True])
    t = kernel.n_outputs
    mean = np.empty((len(X), t), dtype=dtype)
    variance = np.empty((len(X), t), dtype=dtype) if return_std else None

    def predict_cells(groups):
        part = slice(starts[groups.start], starts[groups.stop])
        rows = order[part]
        given = None if near is None else near[rows]
        moments = kernel.sorted_moments(Q[part], cells[part], given)
        first, spread, unreliable = head_moments(X[rows], moments)
        mean[rows] = first
        if return_std:
            variance[rows] = np.maximum(spread, 0.0)
        return int(unreliable.sum())

    # A "row" of the map is a cell: its work is its queries times its near keys.
    work = max(len(X) * kernel.mean_near_keys / max(len(starts) - 1, 1), 1.0)
    n_fallback = map_query_blocks(
        predict_cells, len(starts) - 1, int(work), n_jobs=n_jobs, cache=_CELL_WORK
    )
    return mean, variance, sum(n_fallback)
