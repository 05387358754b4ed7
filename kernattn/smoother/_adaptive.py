r"""Nearest-neighbour bandwidths for :class:`~kernattn.KernelClassifier` (R np's
``bwtype="generalized_nn"``).

A fixed bandwidth smooths as much where the training rows are dense as where they are
sparse. A nearest-neighbour bandwidth follows the density: at a query :math:`x` it is a
factor :math:`c` times the distance :math:`d_k(x)` from :math:`x` to its :math:`k`-th nearest
training row (Li and Racine 2007, ch. 1 and 4; np's "generalized nearest neighbour"
bandwidth, which varies with the point of evaluation — a *balloon* estimator). On the
continuous features :math:`u = x / h` scaled by the fixed bandwidths :math:`h` and the
discrete features' encoded columns :math:`z` (scaled by their λ kernels' σ, as
:class:`~kernattn.bandwidth._mixed.MixedEncoding` has them), the logit of query :math:`x`
and training row :math:`j` is

.. math::

    \ell_j(x) = -\frac{\|u - u_j\|^2}{2\, c^2 d_k(x)^2} - \tfrac12 \|z - z_j\|^2 + \log s_j,

and the class probabilities are the softmax weights' class sums. The factor
:math:`1/d_k(x)^{p}` of a density cancels in the ratio, since every key of a query shares
its bandwidth.

Rows are counted by their weights (:math:`d_k` is the smallest distance within which the
rows weigh :math:`k` units), in units of the mean weight of a distinct input: integer
weights count as repeated rows, and the weights' scale does not matter. At a training row
left out of the sums (the leave-one-out probabilities), the row and its exact duplicates
are left out of its own :math:`d_k` too.

:math:`k` and :math:`c` minimize the leave-one-out log-loss of the probabilities smoothed
toward the class frequencies at their best share
(:func:`~kernattn._engine.labels.choose_prior_share`): Brent's search on :math:`\log c` for
each :math:`k` of :data:`NEIGHBORS`.

References
----------
.. [1] Q. Li, J. S. Racine, *Nonparametric Econometrics: Theory and Practice*, Princeton
   University Press (2007).
.. [2] T. Hayfield, J. S. Racine, "Nonparametric econometrics: the np package",
   J. Statist. Software 27 (2008).
"""

import numpy as np
from scipy.optimize import minimize_scalar
from sklearn.neighbors import NearestNeighbors

from kernattn._core.blocks import KEY_TILE, map_query_blocks, query_block_size
from kernattn._core.loo import DuplicateGroups
from kernattn._core.sums import kernel_sums, softmax_weights
from kernattn._engine.labels import choose_prior_share
from kernattn.bandwidth._mixed import CONTINUOUS
from kernattn.kernels import squared_distances

#: The numbers of neighbours searched (those below the training rows' count).
NEIGHBORS = (1, 2, 3, 5, 8, 13, 21, 34, 55, 89)
#: The search over k stops after this many values in a row without a lower loss.
PATIENCE = 2
#: The factor :math:`c` is searched between these.
FACTOR_RANGE = (0.05, 20.0)
# Cumulative counts of neighbours are compared with k to this relative slack: weights of 2
# and two rows of weight 1 count alike whatever their rounding.
_COUNT_SLACK = 1e-9


class NeighborDistances:
    """Distances to the :math:`k`-th nearest training row, rows counted by weight.

    Parameters
    ----------
    points : ndarray of shape (n, p)
        The training rows' scaled continuous features.
    sample_weight : ndarray of shape (n,)
        Positive.
    groups : DuplicateGroups
        The training rows' groups of identical inputs (every feature).
    """

    def __init__(self, points, sample_weight, groups):
        self.points = points
        self.counts = sample_weight * (max(groups.n_groups, 1) / sample_weight.sum())
        self.groups = groups
        self.own = np.bincount(groups.ids, weights=self.counts, minlength=groups.n_groups)[
            groups.ids
        ]
        self.tree = NearestNeighbors().fit(points)

    @property
    def total(self):
        """The count of every training row together."""
        return float(self.counts.sum())

    def distances(self, queries, ks, rows=None):
        """``(len(queries), len(ks))``: per query the smallest distance within which the
        training rows count ``k`` (every row: the largest distance), for each ``k`` of
        ``ks``; ``rows``: the queries are these training rows, each left out of its own
        count with its duplicates."""
        ks = np.asarray(ks, dtype=float)
        n = len(self.points)
        out = np.empty((len(queries), len(ks)))
        pending = np.arange(len(queries))
        width = min(n, int(np.ceil(ks.max())) + 1)
        if rows is not None:
            width = min(n, width + int(np.bincount(self.groups.ids).max()))
        while len(pending):
            dist, index = self.tree.kneighbors(queries[pending], width)
            counted = np.cumsum(self.counts[index], axis=1)
            if rows is not None:
                counted -= self.own[rows[pending], None]
            reached = counted[:, :, None] >= ks[None, None, :] * (1.0 - _COUNT_SLACK)
            done = np.all(reached[:, -1, :], axis=1) | (width == n)
            first = np.where(reached.any(axis=1), reached.argmax(axis=1), width - 1)
            out[pending[done]] = np.take_along_axis(dist, first, axis=1)[done]
            pending = pending[~done]
            width = min(n, 2 * width)
        return out


class BalloonKernel:
    """The nearest-neighbour kernel bound to its keys: one head, for the engine
    (:class:`~kernattn._engine.labels.LabelEngine`) to predict and weigh with.

    Parameters
    ----------
    source : BalloonSource
    keys : ndarray of shape (n, n_features)
        The training rows with positive weight.
    log_sample_weight : ndarray of shape (n,)
    """

    def __init__(self, source, keys, log_sample_weight):
        self.source = source
        self.log_sample_weight = np.asarray(log_sample_weight, dtype=float)
        self.points, self.codes = source.features(keys)
        weights = np.exp(self.log_sample_weight)
        self.neighbors = NeighborDistances(self.points, weights, DuplicateGroups(keys))
        # One head, mixed with weight 1, no bias and no local fit.
        self.head_weights, self.head_bias, self.local = np.ones(1), np.zeros(1), (None,)

    @property
    def n_heads(self):
        return 1

    @property
    def n_keys(self):
        return len(self.log_sample_weight)

    def bandwidths(self, points):
        """:math:`c\\, d_k(x)` of queries (scaled continuous features); a query with
        :math:`k` rows at its own point (:math:`d_k = 0`) takes the source's floor instead."""
        d = self.neighbors.distances(points, [self.source.n_neighbors])[:, 0]
        return self.source.factor * np.where(d > 0, d, self.source.floor)

    def _logits(self, X):
        points, codes = self.source.features(X)
        bandwidths = self.bandwidths(points)
        return balloon_logits(
            points, codes, bandwidths, self.points, self.codes, self.log_sample_weight
        )

    def sums(self, X, h, columns):
        """``Σ_j exp(ℓ_j − c) C_j`` of a block of queries (one reduction over key tiles)."""
        return kernel_sums(self._logits(X), self.n_keys, columns, removed=False)[1]

    def weights(self, X, h):
        """The normalized weights (rows sum to 1) of a block of queries."""
        logits = self._logits(X)(slice(None), None)
        return softmax_weights(logits)


def balloon_logits(points, codes, bandwidths, key_points, key_codes, log_weight):
    """``logits(keys, out)`` for :func:`~kernattn._core.sums.kernel_sums`: the balloon
    kernel's logits of queries (scaled continuous ``points``, scaled discrete ``codes``, one
    bandwidth each) against the keys of the slice ``keys``."""
    inverse = 1.0 / bandwidths**2

    def logits(keys, out=None):
        block = squared_distances(points, key_points[keys])
        block *= (-0.5 * inverse)[:, None]
        if codes.shape[1]:
            block -= 0.5 * squared_distances(codes, key_codes[keys])
        block += log_weight[keys][None, :]
        return block

    return logits


class BalloonSource:
    """What the nearest-neighbour kernel needs besides its keys: the features' encoding
    and scales, ``k``, the factor and the bandwidths' floor (in scaled units)."""

    def __init__(self, encoding, center, column_scales, n_neighbors, factor, floor):
        self.encoding = encoding
        self.center = center
        self.column_scales = column_scales
        self.n_neighbors = n_neighbors
        self.factor = factor
        self.floor = floor
        continuous = [encoding.columns[j][0] for j in np.flatnonzero(~encoding.discrete)]
        self.continuous = np.asarray(continuous, dtype=int)
        self.discrete = np.setdiff1d(np.arange(encoding.n_columns), self.continuous)

    def features(self, X):
        """The scaled continuous features and scaled discrete codes of raw inputs."""
        Z = (self.encoding.transform(X) - self.center) / self.column_scales
        return Z[:, self.continuous], Z[:, self.discrete]

    def bind(self, keys, log_sample_weight, dtype):
        """The :class:`BalloonKernel` over ``keys``."""
        return BalloonKernel(self, keys, log_sample_weight)


class BalloonCriterion:
    """The leave-one-out log-loss of the nearest-neighbour kernel's smoothed class
    probabilities, over ``k`` and the factor ``c``.

    Parameters
    ----------
    encoding : MixedEncoding
    bandwidth : ndarray of shape (n_features,)
        The fixed bandwidths that scale the features (``h``, or ``λ`` of a discrete one).
    X, Y, sample_weight : ndarrays
        The positive-weight training rows, their one-hot codes and weights.
    queries : ndarray of int
        The rows whose leave-one-out probabilities are measured.
    n_jobs : int, optional
    """

    def __init__(self, encoding, bandwidth, X, Y, sample_weight, queries, n_jobs=None):
        Z = encoding.transform(X)
        # Centered: the squared distances' expansion loses digits far from 0.
        center = np.average(Z, axis=0, weights=sample_weight)
        self.source = BalloonSource(
            encoding, center, encoding.column_scales(bandwidth), None, None, None
        )
        self.points, self.codes = self.source.features(X)
        self.groups = DuplicateGroups(X)
        self.neighbors = NeighborDistances(self.points, sample_weight, self.groups)
        self.Y, self.sample_weight, self.queries = Y, sample_weight, queries
        self.log_weight = np.log(sample_weight / sample_weight.max())
        self.prior = sample_weight @ Y / sample_weight.sum()
        largest_own = float(self.neighbors.own.max())
        self.ks = [k for k in NEIGHBORS if k <= self.neighbors.total - largest_own]
        self.ks = self.ks or [1]
        own = self.neighbors.distances(self.points[queries], self.ks, rows=queries)
        positive = [own[:, i][own[:, i] > 0] for i in range(len(self.ks))]
        # A distance of 0 (other rows at the same continuous point): the smallest positive.
        self.floors = [float(p.min()) if len(p) else 1.0 for p in positive]
        self.own = np.where(own > 0, own, self.floors)
        self.n_jobs = n_jobs
        self._cached = None

    def _parts(self):
        """The logits' two parts of the query rows against every row: the continuous
        features' squared distances and the rest (discrete codes, log weights); kept after
        the first call when they fit in ``working_memory``, ``None`` otherwise."""
        if self._cached is None:
            queries, n = self.queries, len(self.points)
            if query_block_size(len(queries), n, n_arrays=2, cache=False) < len(queries):
                return None
            distances = squared_distances(self.points[queries], self.points)
            rest = balloon_logits(
                np.zeros((len(queries), 0)),
                self.codes[queries],
                np.ones(len(queries)),
                np.zeros((n, 0)),
                self.codes,
                self.log_weight,
            )(slice(None))
            self._cached = distances, rest
        return self._cached

    def probabilities(self, i, factor):
        """The leave-one-out class probabilities of the query rows at ``k = ks[i]`` and the
        factor; ``nan`` for a row without any key outside its duplicate group."""
        queries = self.queries
        n = len(self.points)
        columns = np.column_stack([self.Y, np.ones(n)])
        out = np.empty((len(queries), self.Y.shape[1]))
        parts = self._parts()

        def block(rows):
            rows_of = queries[rows]
            if parts is None:
                logits = balloon_logits(
                    self.points[rows_of],
                    self.codes[rows_of],
                    factor * self.own[rows, i],
                    self.points,
                    self.codes,
                    self.log_weight,
                )
            else:
                inverse = -0.5 / (factor * self.own[rows, i]) ** 2

                def logits(keys, out=None):
                    return parts[0][rows, keys] * inverse[:, None] + parts[1][rows, keys]

            left_out = self.groups.pairs_of(rows_of)
            _, sums = kernel_sums(logits, n, columns, left_out=left_out)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[rows] = sums[:, :-1] / sums[:, -1:]

        map_query_blocks(block, len(queries), n, n_jobs=self.n_jobs, key_tile=KEY_TILE)
        return out

    def loss(self, i, factor):
        """The leave-one-out log-loss at its best prior share."""
        q = self.queries
        P = self.probabilities(i, factor)
        _, loss = choose_prior_share(P, self.Y[q], self.sample_weight[q], self.prior)
        return loss

    def search(self):
        """``(loss, k, factor, floor)`` of the smallest leave-one-out log-loss: ``k`` of
        :attr:`ks` in increasing order, Brent's search on the factor's logarithm for each,
        until :data:`PATIENCE` ``k`` in a row do no better than the best so far."""
        best, worse = None, 0
        low, high = np.log(FACTOR_RANGE)
        for i, k in enumerate(self.ks):
            result = minimize_scalar(
                lambda log_c, i=i: self.loss(i, np.exp(log_c)),
                bounds=(low, high),
                method="bounded",
                options={"xatol": 0.05},
            )
            loss = float(result.fun)
            if best is None or (np.isfinite(loss) and not loss >= best[0]):
                best, worse = (loss, k, float(np.exp(result.x)), self.floors[i]), 0
            else:
                worse += 1
                if worse == PATIENCE:
                    break
        return best

    def source_at(self, k, factor, floor):
        """The :class:`BalloonSource` of the kernel at ``k`` and ``factor``."""
        source = self.source
        return BalloonSource(
            source.encoding, source.center, source.column_scales, k, factor, floor
        )


def row_log_losses(probabilities, Y, sample_weight, prior):
    """Per row, the log-loss of leave-one-out probabilities smoothed toward ``prior`` at
    their best share (:func:`~kernattn._engine.labels.choose_prior_share`); ``nan`` for a
    row without probabilities."""
    share, _ = choose_prior_share(probabilities, Y, sample_weight, prior)
    truth = np.clip(np.einsum("ij,ij->i", probabilities, Y), 0.0, 1.0)
    return -np.log((1.0 - share) * truth + share * (Y @ prior))


def has_continuous(encoding):
    """Whether any feature is continuous (a nearest-neighbour bandwidth needs one)."""
    return bool(np.any(encoding.kinds == CONTINUOUS))
