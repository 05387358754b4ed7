r"""The leave-one-out objective of :class:`~kernattn.AttentionRegressor` and its gradient.

For standardized inputs :math:`z_i`, head :math:`h` projects queries and keys,
:math:`q_i = z_i W_q^h`, :math:`k_j = z_j W_k^h`, and makes the logits

- ``"dot"``: :math:`\ell_{ij} = s_h\, q_i^\top k_j`,
- ``"cosine"``: :math:`\ell_{ij} = s_h\, \hat q_i^\top \hat k_j` with
  :math:`\hat u = u / \sqrt{\|u\|^2 + \epsilon}`,
- ``"gaussian"``: :math:`\ell_{ij} = -\tfrac{s_h}{2}\|q_i - k_j\|^2`, computed as
  :math:`s_h (q_i^\top k_j - \tfrac12\|k_j\|^2)` (the query-only term cancels in the softmax),

plus :math:`\log s_j` for the sample weights (:math:`s_h` is the head's scale, the multiplier
of the similarity). The leave-one-out estimate of head :math:`h` at training point :math:`i`
is :math:`f^h_i = \sum_j w^h_{ij} y_j`, the softmax taken over the keys :math:`j` whose input
differs from :math:`x_i`: the query's own key and its exact duplicates are left out
(:class:`~kernattn._core.loo.DuplicateGroups`), otherwise a sharp kernel copies each target from
itself and repeated rows would not act as integer weights (``leave_one_out=False`` keeps
them: the resubstitution loss, whose minimum is a kernel that looks only at the query itself).
The heads are mixed, :math:`\hat y_i = \sum_h a_h f^h_i + b`: convexly by default
(:math:`a = \mathrm{softmax}(c)` of learned logits :math:`c`, :math:`b = 0`, so that
:math:`\hat y_i` is itself a Nadaraya–Watson estimate), or affinely (free :math:`a, b`). The
objective is

.. math::

    L = \frac{1}{V \sum_i s_i} \sum_i s_i \|\hat y_i - y_i\|^2
        + \frac{\alpha}{\sum_i s_i} \sum_W \sum_{a \ne b} W_{ab}^2,

with :math:`V` the weighted variance of the (centered) targets (the estimator passes
targets divided by their standard deviation, so that the parameters, the head bias
included, and the optimizer's path do not depend on the targets' units): the data term reads as a
leave-one-out :math:`1 - R^2`, so ``alpha`` and ``tol`` do not depend on the targets' units,
and ``alpha`` weighs the penalty against the sum of squared errors (as in ridge
regression), so the penalty matters less as the sample grows. The penalty is on the
off-diagonal entries of each projection :math:`W` (:math:`W_q^h`, :math:`W_k^h`): a diagonal
projection weighs each feature by its own factor, as the per-feature bandwidths of a kernel
smoother, so the penalty shrinks the learned kernel towards that smoother (whose
bandwidths the leave-one-out loss still chooses freely: in one dimension there is nothing
else to learn) rather than towards a kernel that ignores the inputs. With
:math:`r_i = \hat y_i - y_i`, the gradient with respect to the logits is

.. math::

    \frac{\partial L}{\partial \ell^h_{ij}} = \frac{2 s_i a_h}{V \sum s}\,
        w^h_{ij} \langle r_i, y_j - f^h_i\rangle =: G^h_{ij},

the chain rule through the (bi)linear logits gives the projections' gradients as matrix
products with :math:`G`:
:math:`\partial L/\partial q_i = s_h \sum_j G_{ij} k_j`,
:math:`\partial L/\partial k_j = s_h \sum_i G_{ij} (q_i - [\text{gaussian}]\, k_j)` and
:math:`\partial L/\partial \log s_h = \sum_{ij} G_{ij} (\ell_{ij} - \log s_j)`. For a
convex mixture, :math:`\partial L/\partial c_h = a_h(\partial L/\partial a_h -
\sum_g a_g\, \partial L/\partial a_g)`.

Queries are processed in blocks bounded by scikit-learn's ``working_memory``, on threads for
large problems (:func:`~kernattn._core.blocks.map_query_blocks`); each block returns its share of
the loss and of the key gradients, and the shares are added in block order, so the result
does not depend on the number of threads. No (n × n) matrix is formed.

With ``loss="log"`` (:class:`~kernattn.KernelClassifier` and
:class:`~kernattn.AttentionClassifier`) the targets are the
one-hot codes of the labels, not centered, the mixture is convex, and the data term is the
leave-one-out log-loss of the class probabilities :math:`\hat y_i` (the objective of
neighbourhood components analysis [2]_, in its log form),

.. math::

    L = -\frac{1}{\sum_i s_i} \sum_i s_i \log\big(\langle \hat y_i, y_i\rangle
        + \epsilon\big),

with :math:`\epsilon` = ``LOG_FLOOR`` keeping a query none of whose neighbours shares its
class finite. Only :math:`\partial L/\partial \hat y_i` changes, to
:math:`-s_i y_i / ((\langle \hat y_i, y_i\rangle + \epsilon) \sum s)`, where the squared
error has :math:`2 s_i r_i / (V \sum s)`: the chain rule below is the same for both.

References
----------
.. [1] K. Q. Weinberger, G. Tesauro, "Metric Learning for Kernel Regression", AISTATS 2007.
.. [2] J. Goldberger, S. Roweis, G. Hinton, R. Salakhutdinov, "Neighbourhood Components
   Analysis", NeurIPS 2004.
"""

import threading
from contextlib import contextmanager

import numpy as np

from kernattn._core.blocks import map_query_blocks, single_threaded_blas
from kernattn._core.loo import DuplicateGroups
from kernattn._core.numerics import power_of_two_scale
from kernattn._core.sums import kernel_sums, softmax_weights
from kernattn._engine.heads import key_bias, project
from kernattn._local.warp import apply_warp, warp_basis, warp_gradient

# A logit spread below this fraction of the size of the logits' terms is rounding noise.
_ROUNDING_SPREAD = 1e-12
# The leave-one-out log-loss takes the log of the probability of the true class plus this:
# a query none of whose neighbours shares its class costs log(1/LOG_FLOOR), not infinity.
LOG_FLOOR = 1e-6
# Entries per (queries × keys) array of a block: the objective passes over a block several
# times (logits, weights, gradient products), and blocks of about this size are fastest.
_BLOCK_ENTRIES = 2**18


class Layout:
    r"""Where each parameter lives in the flat vector the optimizers see.

    The vector holds ``W_q`` (n_heads, n_features, head_dim), ``W_k`` (unless tied),
    ``log s`` (n_heads, only for a learned scale) and the mixture of the heads:

    - ``"convex"``: one logit ``c_h`` per head, the head weights being their softmax,
      :math:`a = \mathrm{softmax}(c)` (non-negative, summing to one), and no bias;
    - ``"affine"``: the head weights ``a`` (n_heads) and the head bias ``b`` (n_outputs, in
      the objective's target units) as they are.

    Parameters
    ----------
    n_heads, n_features, head_dim, n_outputs : int
    tie_qk : bool
        Queries and keys share ``W_q``.
    learn_scale : bool
        The log-scales are parameters.
    mixture : {"convex", "affine"}, default="convex"
        How the heads' estimates are mixed.
    warp_pieces : int, default=0
        Pieces of the monotone warp of each input (:mod:`kernattn._local.warp`), whose
        log-slopes (n_features, warp_pieces) come last; 0 for no warp.
    """

    def __init__(
        self,
        n_heads,
        n_features,
        head_dim,
        n_outputs,
        tie_qk,
        learn_scale,
        mixture="convex",
        warp_pieces=0,
    ):
        self.shape = (n_heads, n_features, head_dim)
        self.warp_shape = (n_features, warp_pieces)
        self.n_heads = n_heads
        self.n_outputs = n_outputs
        self.tie_qk = tie_qk
        self.learn_scale = learn_scale
        self.mixture = mixture
        self.convex = mixture == "convex"
        w = n_heads * n_features * head_dim
        sizes = [("query", w), ("key", 0 if tie_qk else w)]
        sizes += [("log_scale", n_heads if learn_scale else 0), ("a", n_heads)]
        sizes += [("b", 0 if self.convex else n_outputs), ("warp", n_features * warp_pieces)]
        self.slices = {}
        start = 0
        for name, size in sizes:
            self.slices[name] = slice(start, start + size)
            start += size
        self.size = start

    @property
    def warped(self):
        """Whether the inputs are warped."""
        return self.warp_shape[1] > 0

    def pack(self, query, key, log_scale, a, b, log_slopes=None):
        """The flat vector of the parameters (``key`` ignored when tied, ``log_scale`` when
        the scale is fixed, ``b`` for a convex mixture, whose ``a`` is stored as its
        logits ``log a``; the warp's ``log_slopes`` default to 0, the identity)."""
        theta = self._projections_and_scales(query, key, log_scale)
        if self.warped and log_slopes is not None:
            theta[self.slices["warp"]] = np.ravel(log_slopes)
        if self.convex:
            # A head weight of 0 (a pruned mixture) stays negligible, not -inf.
            a = np.asarray(a, dtype=float)
            theta[self.slices["a"]] = np.log(np.maximum(a / a.sum(), 1e-300))
        else:
            theta[self.slices["a"]] = a
            theta[self.slices["b"]] = b
        return theta

    def _projections_and_scales(self, query, key, log_scale):
        """A flat vector holding ``query``, ``key`` (unless tied) and ``log_scale`` (when
        learned) in their places, 0 elsewhere: parameters or their gradient."""
        out = np.zeros(self.size)
        out[self.slices["query"]] = np.ravel(query)
        if not self.tie_qk:
            out[self.slices["key"]] = np.ravel(key)
        if self.learn_scale:
            out[self.slices["log_scale"]] = log_scale
        return out

    def unpack(self, theta):
        """``(W_q, W_k, log_scale, a, b)``, the projections as views of ``theta``
        (``log_scale`` is ``None`` for a fixed scale, ``W_k`` is ``W_q`` when tied; a convex
        mixture's ``a`` is the softmax of its logits and its ``b`` is 0)."""
        query = theta[self.slices["query"]].reshape(self.shape)
        key = query if self.tie_qk else theta[self.slices["key"]].reshape(self.shape)
        log_scale = theta[self.slices["log_scale"]] if self.learn_scale else None
        if self.convex:
            a = softmax_weights(theta[self.slices["a"]].copy())
            return query, key, log_scale, a, np.zeros(self.n_outputs)
        return query, key, log_scale, theta[self.slices["a"]], theta[self.slices["b"]]

    def projections(self):
        """The mask of the projections' entries (``W_q``, ``W_k``) in the flat vector."""
        mask = np.zeros(self.size, dtype=bool)
        mask[self.slices["query"]] = True
        mask[self.slices["key"]] = True
        return mask

    def widened(self, theta, log_factor):
        """``theta`` with every head's logits multiplied by ``exp(log_factor)``: through the
        log-scales when they are learned, else through the projections (dot and Gaussian
        logits are bilinear in ``(W_q, W_k)``; a cosine head's logits do not change)."""
        out = theta.copy()
        if self.learn_scale:
            out[self.slices["log_scale"]] += log_factor
        else:
            for name in ("query", "key"):
                out[self.slices[name]] *= np.exp(log_factor / 2)
        return out

    def log_slopes(self, theta):
        """The warp's log-slopes (n_features, warp_pieces), or ``None`` without a warp.

        Centered per feature (the parameters minus their mean): the warp only shares out
        the resolution along each feature, its overall scale is the projection's. A free
        mean would trade off exactly against the size of the projection, a direction in
        which the loss is flat and the optimizer crawls."""
        if not self.warped:
            return None
        raw = theta[self.slices["warp"]].reshape(self.warp_shape)
        return raw - raw.mean(axis=1, keepdims=True)

    def pack_gradient(self, g_query, g_key, g_log_scale, g_a, g_b, a, g_warp=None):
        r"""The gradient as a flat vector, from the gradients with respect to ``W_q``,
        ``W_k``, ``log s`` and the mixture's ``a`` and ``b``.

        For a convex mixture the chain rule goes through the softmax,
        :math:`\partial L/\partial c_h = a_h (\partial L/\partial a_h - \sum_g a_g\,
        \partial L/\partial a_g)`, and ``g_b`` is dropped.
        """
        grad = self._projections_and_scales(g_query, g_key, g_log_scale)
        if self.convex:
            grad[self.slices["a"]] = a * (g_a - a @ g_a)
        else:
            grad[self.slices["a"]] = g_a
            grad[self.slices["b"]] = g_b
        if g_warp is not None:
            grad[self.slices["warp"]] = np.ravel(g_warp)
        return grad

    def warp_roughness(self, theta):
        """The differences of neighboring log-slopes of the warp, ``(n_features,
        warp_pieces − 1)`` (empty without a warp): what its penalty shrinks, towards a
        warp of constant slope (a fixed bandwidth)."""
        log_slopes = self.log_slopes(theta)
        if log_slopes is None:
            return np.zeros((0, 0))
        return np.diff(log_slopes, axis=1)

    def off_diagonal(self, theta):
        """The off-diagonal entries of every projection (``W[i, j]`` for ``i != j``), as a
        flat vector (0 on the diagonals and outside the projections): what the penalty
        shrinks. A diagonal projection scales each feature by its own factor, as the
        per-feature bandwidths of a kernel smoother."""
        out = np.zeros(self.size)
        d, head_dim = self.shape[1:]
        k = min(d, head_dim)
        for name in ("query", "key"):
            part = self.slices[name]
            if part.stop == part.start:
                continue
            W = theta[part].reshape(self.shape).copy()
            W[:, np.arange(k), np.arange(k)] = 0.0
            out[part] = W.ravel()
        return out


class _Head:
    """One head's projections at some parameters, in the form the blocks use.

    ``queries`` is ``[s q, 1]`` for every row and ``keys`` is ``[k, s·kb + log s_j]`` for
    the keys (``kb`` the key bias, ``−½‖k‖²`` for ``"gaussian"``), so that one matrix
    product gives a block of logits; ``keys_t`` holds the key projections transposed, the
    layout in which the gradient's products are fastest. ``Pq``/``Pk`` and their norms are
    kept for the chain rule of the cosine normalization.
    """

    def __init__(self, Z, Wq, Wk, scale, similarity, log_sw, keys, tied):
        hd = Wq.shape[1]
        self.scale = scale
        self.Pq, self.norm_q = project(Z, Wq, similarity)
        self.Pk, self.norm_k = (self.Pq, self.norm_q) if tied else project(Z, Wk, similarity)
        self.queries = np.empty((len(Z), hd + 1))
        np.multiply(self.Pq, scale, out=self.queries[:, :hd])
        self.queries[:, hd] = 1.0
        K = self.Pk if keys is None else self.Pk[keys]
        self.key_bias = key_bias(K, similarity)
        self.keys = np.empty((len(K), hd + 1))
        self.keys[:, :hd] = K
        self.keys[:, hd] = scale * self.key_bias + (log_sw if keys is None else log_sw[keys])
        self.keys_t = np.ascontiguousarray(K.T)


class _Scratch:
    """Blocks of scratch memory reused from one evaluation to the next.

    The objective is evaluated hundreds of times on blocks of the same shape; a fresh
    (rows × keys) array each time costs more in page faults than the products filling it.
    One set of arrays per block in flight (threads take and return them).
    """

    def __init__(self):
        self._free = []
        self._lock = threading.Lock()

    @contextmanager
    def take(self, n_arrays, shape):
        size = shape[0] * shape[1]
        with self._lock:
            memory = self._free.pop() if self._free else None
        if memory is None or memory.shape[0] < n_arrays or memory.shape[1] < size:
            memory = np.empty((n_arrays, size))
        try:
            yield [memory[i, :size].reshape(shape) for i in range(n_arrays)]
        finally:
            with self._lock:
                self._free.append(memory)


def _as_slice(rows):
    """A slice for rows that are a contiguous increasing range (no copies when indexing)."""
    if len(rows) and rows[-1] - rows[0] == len(rows) - 1 and np.all(np.diff(rows) == 1):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


class LeaveOneOutObjective:
    """Leave-one-out loss and gradient of the multi-head attention regressor.

    Parameters
    ----------
    Z : ndarray of shape (n, d)
        Standardized inputs.
    Y : ndarray of shape (n, t)
        Targets, centered by their weighted mean.
    sample_weight : ndarray of shape (n,)
        Positive.
    groups : DuplicateGroups
        The groups of identical training inputs.
    layout : Layout
    similarity : {"dot", "cosine", "gaussian"}
    scale : ndarray of shape (n_heads,)
        The multipliers of the similarity when they are not learned.
    alpha : float
        L2 penalty on the projections' off-diagonal entries, :meth:`Layout.off_diagonal`
        (against the sum of squared errors / V).
    n_jobs : int, optional
        Threads over query blocks (see :func:`~kernattn._core.blocks.effective_n_jobs`).
    leave_one_out : bool, default=True
        Leave each query's own duplicate group out of its softmax; ``False`` gives the
        resubstitution loss.
    warp_knots : ndarray of shape (n_features, warp_pieces + 1), optional
        The knots of the monotone warp of the inputs (with ``layout.warp_pieces > 0``): the
        heads project the warped inputs instead of the inputs, and the warp's smoothness,
        ``alpha`` times the squared differences of neighboring log-slopes, joins the
        penalty.    loss : {"squared", "log"}, default="squared"
        The data term: the squared error divided by the targets' variance, or the
        log-loss of one-hot targets ``Y`` (not centered) under a convex mixture.
    """

    def __init__(
        self,
        Z,
        Y,
        sample_weight,
        groups,
        layout,
        similarity,
        scale,
        alpha,
        n_jobs=None,
        leave_one_out=True,
        warp_knots=None,
        loss="squared",
    ):
        self.loss_name = loss
        self.Z = np.ascontiguousarray(Z, dtype=float)
        self.warp_knots = warp_knots if layout.warped else None
        self._basis = None if self.warp_knots is None else warp_basis(self.Z, warp_knots)
        self.Y = np.ascontiguousarray(Y, dtype=float)
        # Divided by a power of two near the largest (exact, so every ratio of sums is
        # unchanged): weights near 1e308 would overflow their sum.
        unit = power_of_two_scale(sample_weight)
        self.sw = np.asarray(sample_weight, dtype=float) / unit
        #: ``sw`` times this is the sample weights as given (precision weights of the local
        #: line's variance rule count them as observations).
        self.weight_unit = unit
        self.log_sw = np.log(self.sw / self.sw.max())
        self.groups = groups
        self.layout = layout
        self.similarity = similarity
        self.scale = np.asarray(scale, dtype=float)
        # alpha weighs against the sum of the weights as given.
        with np.errstate(over="ignore"):
            self.alpha = alpha / (self.sw.sum() * unit)
        variance = np.sum(self.sw @ self.Y**2) / self.sw.sum()
        self.variance = variance if variance > 0 else 1.0
        self.n_jobs = n_jobs
        self.leave_one_out = leave_one_out
        # [y, 1]: one product gives a block's weighted sums of the values and of the weights.
        self._values_one = np.hstack([self.Y, np.ones((len(self.Y), 1))])
        self._scratch = _Scratch()

    # ---------------------------------------------------------------- helpers

    def inputs(self, theta):
        """What the heads project: the standardized inputs, warped at ``theta``'s slopes."""
        if self.warp_knots is None:
            return self.Z
        return apply_warp(self._basis, self.warp_knots, self.layout.log_slopes(theta))

    def heads(self, theta, keys=None, inputs=None):
        """Every head at ``theta`` against the rows ``keys`` (all for ``None``), in the form
        the blocks use (projected queries and keys, their biases)."""
        query, key, log_scale, _, _ = self.layout.unpack(theta)
        scales = np.exp(log_scale) if log_scale is not None else self.scale
        inputs = self.inputs(theta) if inputs is None else inputs
        return [
            _Head(
                inputs,
                query[h],
                key[h],
                scales[h],
                self.similarity,
                self.log_sw,
                keys,
                self.layout.tie_qk,
            )
            for h in range(self.layout.n_heads)
        ]

    def _rows_and_keys(self, queries, keys):
        """Valid query rows, keys (``None`` for all rows in order) and the key count."""
        n = len(self.Z)
        if keys is not None:
            keys = np.asarray(keys)
            if len(keys) == n and np.array_equal(keys, np.arange(n)):
                keys = None
        queries = np.arange(n) if queries is None else np.asarray(queries)
        if self.leave_one_out:
            queries = self.groups.valid_queries(queries, np.arange(n) if keys is None else keys)
        return queries, keys, n if keys is None else len(keys)

    def _left_out(self, rows, keys, shape):
        """A function that sets the block's entries pairing a query with a key of its own
        duplicate group to ``-inf``.

        For contiguous rows against all keys the pairs are looked up (no pass over the
        block); otherwise they are found once per block and reused for every head. Without
        ``leave_one_out`` (the resubstitution loss) nothing is left out.
        """
        if not self.leave_one_out:
            return lambda block: block
        if keys is None and isinstance(rows, slice):
            return lambda block: self.groups.leave_out(block, rows)
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop)
        mask = self.groups.leave_out(np.zeros(shape, dtype=bool), rows, keys, value=True)
        flat = np.flatnonzero(mask)

        def leave_out(block):
            block.reshape(-1)[flat] = -np.inf
            return block

        return leave_out

    def _block_softmax(self, heads, rows, keys, values_one, kernels):
        """Fill ``kernels[h]`` with head ``h``'s ``exp(ℓ − max)`` for a block and return its
        sums ``[Σ_j e_ij y_j, Σ_j e_ij]``, through the reduction
        (:func:`~kernattn._core.sums.kernel_sums`, all keys in one tile: the weights stay
        in ``kernels[h]`` for the gradient).

        The query's own group gets logit ``-inf``, which the reduction's floor turns into
        ``e^-700``: nothing next to the row maximum's 1 in any float64 sum.
        """
        leave_out = self._left_out(rows, keys, kernels[0].shape)
        n_keys = kernels[0].shape[1]
        sums = []
        for head, kernel in zip(heads, kernels, strict=True):

            def logits(_, out, head=head, kernel=kernel):
                return leave_out(np.matmul(head.queries[rows], head.keys.T, out=kernel))

            sums.append(kernel_sums(logits, n_keys, values_one, tile=n_keys)[1])
        return sums

    def _map_blocks(self, function, n_queries, n_keys, n_arrays):
        """``function(span, scratch)`` over query blocks, ``scratch`` a list of ``n_arrays``
        (rows × n_keys) arrays; results in block order."""

        def run(span):
            shape = (span.stop - span.start, n_keys)
            with self._scratch.take(n_arrays, shape) as scratch:
                return function(span, scratch)

        # Blocks bounded by working_memory only: a block is a dozen calls over a few arrays,
        # and cache-sized blocks would be so short that the calls' overhead dominates.
        return map_query_blocks(
            run, n_queries, n_keys, n_jobs=self.n_jobs, n_arrays=n_arrays, cache=_BLOCK_ENTRIES
        )

    # ---------------------------------------------------------------- public

    def head_estimates(self, theta, queries=None, keys=None):
        """Leave-one-out estimates ``f^h_i`` of every head, shape (n_queries, n_heads, t).

        Queries without any key outside their duplicate group get ``nan``.
        """
        n = len(self.Z)
        asked = np.arange(n) if queries is None else np.asarray(queries)
        valid, keys, n_keys = self._rows_and_keys(asked, keys)
        t = self.Y.shape[1]
        out = np.full((len(asked), self.layout.n_heads, t), np.nan)
        index = np.flatnonzero(np.isin(asked, valid))
        heads = self.heads(theta, keys)
        values_one = self._values_one if keys is None else self._values_one[keys]

        def estimate(span, kernels):
            rows = _as_slice(asked[index[span]])
            sums = self._block_softmax(heads, rows, keys, values_one, kernels)
            for h, s in enumerate(sums):
                out[index[span], h] = s[:, :t] / s[:, t:]

        self._map_blocks(estimate, len(index), n_keys, self.layout.n_heads)
        return out

    def loss(self, theta, queries=None, keys=None):
        """The objective at ``theta`` (queries against keys, both row indices; all rows for
        ``None``)."""
        return self.loss_and_grad(theta, queries, keys, gradient=False)[0]

    def loss_and_grad(self, theta, queries=None, keys=None, gradient=True):
        """Objective and its gradient at ``theta`` (queries against keys, both row indices).

        The data term is averaged over the queries that have a key outside their
        duplicate group; with none, it is 0 (and so is its gradient).
        """
        with single_threaded_blas():
            if keys is not None and queries is not None:
                rows = np.union1d(queries, keys)
                if 2 * len(rows) < len(self.Z):
                    # A mini-batch against a key subsample: the projections of the other
                    # rows are not needed, and computing them would make every step O(n).
                    sub = self.restricted(rows)
                    local_queries = np.searchsorted(rows, queries)
                    local_keys = np.searchsorted(rows, keys)
                    return sub._loss_and_grad(theta, local_queries, local_keys, gradient)
            return self._loss_and_grad(theta, queries, keys, gradient)

    def restricted(self, rows):
        """The same objective over ``rows`` only (the same normalization, weights and
        penalty): its loss and gradient for queries and keys among them are this one's."""
        sub = object.__new__(type(self))
        sub.__dict__.update(self.__dict__)
        sub.Z = self.Z[rows]
        sub.Y = self.Y[rows]
        sub.sw = self.sw[rows]
        sub.log_sw = self.log_sw[rows]
        # Rows share a group when their inputs are identical: group ids say that already.
        sub.groups = DuplicateGroups(self.groups.ids[rows][:, None])
        sub._values_one = self._values_one[rows]
        if self._basis is not None:
            sub._basis = self._basis[rows]
        return sub

    def _loss_and_grad(self, theta, queries, keys, gradient):
        layout = self.layout
        H, t = layout.n_heads, layout.n_outputs
        queries, keys, n_keys = self._rows_and_keys(queries, keys)
        query, key, _, a, b = layout.unpack(theta)
        inputs = self.inputs(theta)
        heads = self.heads(theta, keys, inputs)
        total = self.sw[queries].sum()
        values_one = self._values_one if keys is None else self._values_one[keys]
        values_one_t = np.ascontiguousarray(values_one.T)
        # ∂L/∂(s q_i) per head, written by the blocks into their own rows.
        grad_queries = [np.zeros_like(head.Pq) for head in heads] if gradient else None
        log_loss = self.loss_name == "log"
        if log_loss:
            normalizer = 1.0 / total if total > 0 else 0.0
        else:
            normalizer = 2.0 / (self.variance * total) if total > 0 else 0.0

        def block(span, scratch):
            rows = _as_slice(queries[span])
            kernels = scratch[:H]
            sums = self._block_softmax(heads, rows, keys, values_one, kernels)
            estimates = [s[:, :t] / s[:, t:] for s in sums]
            residual = b - self.Y[rows]
            for h in range(H):
                residual += a[h] * estimates[h]
            sw = self.sw[rows]
            if log_loss:
                # residual + y is the mixed estimate: its entry at the true class.
                truth = np.einsum("ij,ij->i", residual, self.Y[rows]) + 1.0 + LOG_FLOOR
                data = -(sw @ np.log(truth))
            else:
                data = sw @ np.einsum("ij,ij->i", residual, residual)
            if not gradient:
                return data, None
            if log_loss:
                # ∂L/∂ŷ_i = −s_i y_i / (p_i + ε) / Σ s: what the squared error's 2 s_i r_i
                # / (V Σ s) is below.
                weighted = self.Y[rows] * (-normalizer * sw / truth)[:, None]
            else:
                weighted = residual * (normalizer * sw)[:, None]
            g_a = np.array([np.sum(weighted * f) for f in estimates])
            g_b = weighted.sum(axis=0)
            g_log_scale = np.zeros(H)
            key_parts = []
            for h, head in enumerate(heads):
                # G_ij = e_ij (u_i·y_j − u_i·f_i), u_i = a_h c_i r_i / Σ_j e_ij: in place of e.
                u = weighted * (a[h] / sums[h][:, t:])
                coef = np.hstack([u, -np.einsum("ij,ij->i", u, estimates[h])[:, None]])
                G = kernels[h]
                G *= np.matmul(coef, values_one_t, out=scratch[H])
                # The products are taken with the long key axis last (twice as fast).
                GK = (head.keys_t @ G.T).T  # Σ_j G_ij k_j = ∂L/∂(s q_i)
                grad_queries[h][rows] = head.scale * GK
                g_log_scale[h] = np.einsum("ij,ij->", head.queries[rows, :-1], GK)
                # Rows: Σ_i G_ij s q_i (the keys' gradient) and Σ_i G_ij (column sums).
                KG = head.queries[rows].T @ G
                if self.similarity == "gaussian":
                    KG[:-1] -= head.scale * KG[-1] * head.keys_t
                    g_log_scale[h] += head.scale * (KG[-1] @ head.key_bias)
                key_parts.append(KG[:-1])
            return data, (g_a, g_b, g_log_scale, key_parts)

        results = self._map_blocks(block, len(queries), n_keys, H + 1)
        data = 0.0
        for part, _ in results:
            data += part
        if log_loss:
            scale = total if total > 0 else 1.0
        else:
            scale = self.variance * total if total > 0 else 1.0
        off_diagonal = self.layout.off_diagonal(theta)
        roughness = self.layout.warp_roughness(theta)
        penalty = self.alpha * (np.sum(off_diagonal**2) + np.sum(roughness**2))
        if not gradient:
            return data / scale + penalty, None
        g_a, g_b, g_log_scale = np.zeros(H), np.zeros(t), np.zeros(H)
        grad_keys = [np.zeros_like(head.keys_t) for head in heads]
        for _, (block_a, block_b, block_scale, key_parts) in results:
            g_a += block_a
            g_b += block_b
            g_log_scale += block_scale
            for h in range(H):
                grad_keys[h] += key_parts[h]
        g_query = np.empty(layout.shape)
        g_key = np.empty(layout.shape)
        # ∂L/∂(warped inputs), through both the queries and the keys of every head.
        g_inputs = np.zeros_like(inputs) if layout.warped else None
        for h, head in enumerate(heads):
            gq = _unnormalize(grad_queries[h], head.Pq, head.norm_q)
            g_query[h] = inputs.T @ gq
            if keys is None:
                gk = grad_keys[h].T
            else:
                gk = np.zeros_like(head.Pk)
                gk[keys] = grad_keys[h].T
            gk = _unnormalize(gk, head.Pk, head.norm_k)
            g_key[h] = inputs.T @ gk
            if g_inputs is not None:
                g_inputs += gq @ query[h].T + gk @ key[h].T
        if layout.tie_qk:
            g_query += g_key
        g_warp = None
        if g_inputs is not None:
            g_warp = warp_gradient(self._basis, layout.log_slopes(theta), g_inputs)
            # Through the centering of the log-slopes (a symmetric projection).
            g_warp -= g_warp.mean(axis=1, keepdims=True)
        grad = layout.pack_gradient(g_query, g_key, g_log_scale, g_a, g_b, a, g_warp)
        if total == 0:
            grad[:] = 0.0
        grad += 2.0 * self.alpha * off_diagonal
        if roughness.size:
            g_rough = np.zeros(layout.warp_shape)
            g_rough[:, 1:] += 2.0 * self.alpha * roughness
            g_rough[:, :-1] -= 2.0 * self.alpha * roughness
            grad[layout.slices["warp"]] += g_rough.ravel()
        return data / scale + penalty, grad

    def within_row_logits(self, query, key, scale, rows):
        """Per head: weighted within-row variance of the logits and mean largest weight.

        Queries are ``rows``; keys are all rows outside the query's duplicate group (as in
        the leave-one-out loss), weighted by their sample weights, so repeated rows and
        integer weights give the same figures. Computed over query blocks: no
        ``len(rows) × n`` array is formed beyond the ``working_memory`` bound.

        Parameters
        ----------
        query, key : ndarray of shape (n_heads, n_features, head_dim)
        scale : ndarray of shape (n_heads,)
        rows : ndarray of int

        Returns
        -------
        variance, top : ndarray of shape (n_heads,)
        """
        H = len(scale)
        n = len(self.Z)
        projections = []
        for h in range(H):
            Pq, _ = project(self.Z[rows], query[h], self.similarity)
            Pk, _ = project(self.Z, key[h], self.similarity)
            projections.append((scale[h] * Pq, Pk, scale[h] * key_bias(Pk, self.similarity)))

        def block(span):
            block_rows = rows[span]
            kw = np.broadcast_to(self.sw, (len(block_rows), n)).copy()
            self.groups.leave_out(kw, block_rows, value=0.0)
            norm = kw.sum(axis=1)
            ok = norm > 0
            safe_norm = np.where(ok, norm, 1.0)
            sw = self.sw[block_rows][ok]
            out = np.zeros((H, 3))
            for h, (Qs, Pk, bias) in enumerate(projections):
                logits = Qs[span] @ Pk.T
                logits += bias
                mean = (kw * logits).sum(axis=1) / safe_norm
                var = (kw * (logits - mean[:, None]) ** 2).sum(axis=1) / safe_norm
                logits += self.log_sw
                logits[kw == 0] = -np.inf
                logits[~ok] = 0.0
                w = softmax_weights(logits)
                out[h] = [var[ok] @ sw, sw.sum(), w.max(axis=1)[ok] @ sw]
            return out

        parts = map_query_blocks(
            block, len(rows), n, n_jobs=self.n_jobs, n_arrays=5, cache=_BLOCK_ENTRIES
        )
        totals = np.zeros((H, 3))
        for part in parts:
            totals += part
        weight = np.where(totals[:, 1] > 0, totals[:, 1], 1.0)
        variance = totals[:, 0] / weight
        # Logits that are equal up to rounding (every key at the same logit) have a
        # variance of rounding noise, which depends on the order of the rows: relative to
        # the size of the logits' terms, it is 0.
        size = np.array(
            [
                _largest_norm(Qs) * _largest_norm(Pk) + np.abs(bias).max(initial=0.0)
                for Qs, Pk, bias in projections
            ]
        )
        variance = np.where(variance > (_ROUNDING_SPREAD * size) ** 2, variance, 0.0)
        return variance, totals[:, 2] / weight


def _largest_norm(P):
    return np.sqrt(np.einsum("ij,ij->i", P, P).max(initial=0.0))


def _unnormalize(g, P, norm):
    """Back through ``u = p/√(‖p‖² + ε)``: ``∂u/∂p = (I − u uᵀ)/√(‖p‖² + ε)``."""
    if norm is None:
        return g
    return (g - np.einsum("ij,ij->i", g, P)[:, None] * P) / norm[:, None]
