r"""``FeatureKernel``: the fitted kernel of linear attention, the feature sums of the keys.

Every head :math:`h` of the kernel is a softmax head
(:class:`~kernattn._engine.heads.SoftmaxHeads`)
with projected queries :math:`q` and keys :math:`k` and the kernel
:math:`\exp(q^\top k + b_k)` up to factors of the query alone, which cancel in the
Nadaraya–Watson ratio; :math:`b_k = -\|k\|^2/2` for the Gaussian similarity and 0 for the
dot product and cosine. A fitted feature map :math:`\phi` replaces the kernel by
:math:`\phi(q)^\top \phi(k)`, so that the estimate is

.. math::

    \hat y(q) = \frac{\phi(q)^\top S}{\phi(q)^\top z}, \qquad
    S = \sum_i s_i\, c_i\, \phi(k_i)\, y_i^\top, \quad z = \sum_i s_i\, c_i\, \phi(k_i),

and the keys enter only through the sums (and :math:`S_2`, the same with :math:`y_i^2`, for
the spread). A map estimates its own base kernel, so the key weight :math:`c_i` carries the
rest:

- maps that estimate :math:`\exp(q^\top k)` (positive random features): :math:`c = e^{b_k}`;
- maps that estimate the Gaussian :math:`\exp(q^\top k - \|q\|^2/2 - \|k\|^2/2)`
  (trigonometric, Nyström): :math:`c = e^{b_k + \|k\|^2/2}` (1 for the Gaussian similarity);
- maps that define a kernel of their own (elu + 1, relu): :math:`c = 1`.

For the Gaussian similarity the features see :math:`q - m_h` and :math:`k - m_h`, with
:math:`m_h` the head's weighted key mean (``key_shift``): :math:`-\|q - k\|^2/2` is unchanged,
and the positive features' variance, which grows like :math:`\exp(\|q + k\|^2)`, is smallest
for centered inputs.

**Stabilisation.** Maps with a log domain are evaluated as log-features. A query's
log-features have their row maximum subtracted (a factor of the query alone, which cancels).
The keys' log-features (or log-weights) have one constant per head subtracted, the running
maximum over every chunk accumulated so far (``key_log_scale``); the sums are rescaled by
:math:`e^{c_{\mathrm{old}} - c_{\mathrm{new}}}` when it grows. A constant per key would not
cancel (it would reweight the keys), so there is none. A map whose estimate is
:math:`a(q)^\top G\, a(k)` (Nyström) has its base features :math:`a` summed over the keys and
:math:`G` applied once to the sums (its ``inner``).

**Unreliable rows.** A query's denominator :math:`\phi(q)^\top z` is not trusted when it is
not above ``RELATIVE_TINY`` times :math:`|\phi(q)|^\top |z|` (cancellation among signed
features, or a negative sum), when it underflows, when the sums are not finite, when the map
does not cover the query (its ``covered``: a Nyström query far from every landmark), when,
for signed *random* features, it lies within ``SIGNED_Z`` standard errors of 0 (the r terms
:math:`\phi_j(q) z_j` are random draws whose mean is the denominator, so their spread
estimates its error), or, for a Gaussian head whose map estimates a kernel, when the query is
more than ``REACH`` kernel units beyond every key (there every key's kernel value is below
:math:`e^{-18}`, and the estimate is an extrapolation of the features, not an average of
nearby targets). Such rows are reported to the estimator, which computes them exactly with
``exact_heads``, the softmax heads bound to the training keys, or, without keys, gives them the
weighted training mean.
"""

import copy

import numpy as np

from kernattn._core.blocks import KEY_TILE, iter_query_blocks
from kernattn._core.sums import merge, rescaling, row_shift
from kernattn._engine.heads import SoftmaxHeads, key_bias

# Denominators below this fraction of Σ_j |φ_j(q) z_j| are dominated by cancellation.
RELATIVE_TINY = 1e-6
# Signed random features: denominators within this many standard errors of 0 are noise.
SIGNED_Z = 3.0
# Denominators below this (with the row maximum of the query features at 1) have underflowed.
ABSOLUTE_TINY = 1e-280
# A Gaussian query this many kernel units beyond every key sees kernel values below e^-18.
REACH = 6.0
# Entries of a (rows × features) block: a few MiB, however large the chunk of keys.
_BLOCK_ENTRIES = 2**19


class FeatureKernel:
    """A fitted linear-attention kernel: per head a feature map and the key sums.

    Parameters
    ----------
    heads : SoftmaxHeads
        The softmax heads being approximated (their projections, scales, mixture and
        similarity); their own keys are not used.
    feature_maps : list of FeatureMap
        One fitted map per head.
    key_shift : ndarray of shape (n_heads, head_dim)
        Subtracted from a head's projected queries and keys before the map sees them
        (the weighted key mean for the Gaussian similarity, 0 otherwise).
    head_bias : ndarray of shape (n_outputs,)
        Added to the mixture of the heads, in the centered target units of the estimator.
    weight_scale : float
        The sample weight that counts as 1 in the sums (the largest weight of the data the
        kernel was first fitted on), so that chunks of data weigh alike.
    value_scale : ndarray of shape (n_outputs,), optional
        The values are summed divided by it (a power of two per output, exact): the sums
        of squares of targets near 1e200 would overflow. The moments come out in these
        units. Ones by default.

    Attributes
    ----------
    exact_heads : SoftmaxHeads or None
        The same heads bound to the training keys (:meth:`bind`), for the rows the features
        cannot serve; ``None`` when the keys are not kept.
    key_sums : ndarray of shape (n_heads, n_components, 2 * n_outputs + 1)
        Per head the columns of :math:`S`, :math:`S_2` and :math:`z`, divided by
        ``exp(key_log_scale[h])``.
    key_log_scale : ndarray of shape (n_heads,)
        The constant taken out of every head's key sums (−inf before any key).
    key_radius : ndarray of shape (n_heads,)
        The largest norm of a head's (shifted) projected keys.
    target_sums : ndarray of shape (3, n_outputs)
        :math:`\\sum s v`, :math:`\\sum s v^2` and :math:`\\sum s` of the centered values.

    Examples
    --------
    The sums of chunks add up to the sums of the whole:

    >>> from kernattn._engine.heads import unbound_heads
    >>> from kernattn.feature_maps import PositiveRandomFeatures
    >>> rng = np.random.default_rng(0)
    >>> X, v = 0.5 * rng.standard_normal((100, 2)), rng.standard_normal((100, 1))
    >>> heads = unbound_heads("gaussian", center=np.zeros(2), input_scale=np.ones(2))
    >>> phi = PositiveRandomFeatures(64).fit(X, random_state=0)
    >>> def kernel():
    ...     return FeatureKernel(heads, [phi], np.zeros((1, 2)), np.zeros(1), weight_scale=1.0)
    >>> whole = kernel().accumulate(X, v, np.ones(100))
    >>> chunks = kernel().accumulate(X[:30], v[:30], np.ones(30))
    >>> chunks = chunks.accumulate(X[30:], v[30:], np.ones(70))
    >>> first, second, unreliable = whole.moments(X[:3], 0)
    >>> bool(np.allclose(first, chunks.moments(X[:3], 0)[0])), unreliable.tolist()
    (True, [False, False, False])
    """

    def __init__(self, heads, feature_maps, key_shift, head_bias, weight_scale, value_scale=None):
        self.heads = heads
        self.feature_maps = list(feature_maps)
        self.key_shift = np.asarray(key_shift, dtype=float)
        self.head_bias = np.asarray(head_bias, dtype=float)
        self.weight_scale = float(weight_scale)
        self.exact_heads = None
        t = len(self.head_bias)
        self.value_scale = np.ones(t) if value_scale is None else np.asarray(value_scale, float)
        r = self.n_components
        self.key_sums = np.zeros((self.n_heads, r, 2 * t + 1))
        self.key_log_scale = np.full(self.n_heads, -np.inf)
        self.key_radius = np.zeros(self.n_heads)
        self.target_sums = np.zeros((3, t))

    @property
    def n_heads(self):
        return self.heads.n_heads

    @property
    def head_weights(self):
        return self.heads.head_weights

    @property
    def n_outputs(self):
        return len(self.head_bias)

    @property
    def n_components(self):
        """The most features of any head (Nyström heads can have fewer landmarks); 0 for a
        kernel without maps, whose weights are all computed exactly."""
        return max((feature_map.n_components_ for feature_map in self.feature_maps), default=0)

    def project(self, X, h, side="query"):
        """Head ``h``'s projected queries (or keys) of inputs ``X`` as the map sees them."""
        return self.heads.project(X, h, side) - self.key_shift[h]

    def log_weights(self, sample_weight):
        """``log(s / weight_scale)``: the log-weights the sums are taken with."""
        return np.log(np.asarray(sample_weight, dtype=float) / self.weight_scale)

    def bind(self, keys, sample_weight, dtype=np.float64):
        """Keep the training keys: set :attr:`exact_heads`, the heads bound to them."""
        heads = self.heads
        self.exact_heads = SoftmaxHeads(
            similarity=heads.similarity,
            center=heads.center,
            input_scale=heads.input_scale,
            query_weights=heads.query_weights,
            key_weights=heads.key_weights,
            scale=heads.scale,
            head_weights=heads.head_weights,
            head_bias=self.head_bias,
            keys=keys,
            log_sample_weight=self.log_weights(sample_weight),
            dtype=dtype,
        )
        return self

    def empty(self):
        """A kernel with the same heads, maps and scales, and no sums or keys."""
        return FeatureKernel(
            self.heads,
            self.feature_maps,
            self.key_shift,
            self.head_bias,
            self.weight_scale,
            value_scale=self.value_scale,
        )

    def without_keys(self):
        """A copy whose sums can grow independently and that keeps no keys."""
        out = copy.copy(self)
        out.exact_heads = None
        return out

    # ------------------------------------------------------------- features

    def key_features(self, h, K, log_weight):
        """Key features of projected keys ``K`` times their weights, divided by ``exp(m)``,
        and ``m`` (the largest log-feature of the block)."""
        feature_map = self.feature_maps[h]
        log_weight = log_weight.copy()
        similarity = self.heads.similarity
        if feature_map.approximates == "softmax":
            log_weight += key_bias(K, similarity)
        elif feature_map.approximates == "gaussian":
            log_weight += key_bias(K, similarity) + 0.5 * np.einsum("ij,ij->i", K, K)
        if feature_map.log_domain:
            logs = feature_map.log_transform(K)
            logs += log_weight[:, None]
            top = row_shift(logs, axis=None)
            logs -= top
            return np.exp(logs, out=logs), top
        top = row_shift(log_weight, axis=None)
        return feature_map.transform(K) * np.exp(log_weight - top)[:, None], top

    def _query_features(self, X, h):
        """Head ``h``'s query features (up to a factor per query), the projected queries,
        and which queries the map covers."""
        feature_map = self.feature_maps[h]
        Q = self.project(X, h, "query")
        covered = feature_map.covered(Q)
        if feature_map.log_domain:
            logs = feature_map.shifted_log_transform(Q)
            return np.exp(logs, out=logs), Q, covered
        return feature_map.transform(Q), Q, covered

    def _inner_sums(self, h):
        """Head ``h``'s key sums as its query features meet them (``G`` applied)."""
        r = self.feature_maps[h].n_components_
        return self.feature_maps[h].inner(self.key_sums[h, :r])

    # ---------------------------------------------------------- accumulating

    def accumulate(self, X, values, sample_weight):
        """Add keys ``X`` with centered ``values`` and positive ``sample_weight`` to the sums.

        The keys go through in row blocks bounded by ``working_memory``. New arrays are
        assigned at the end, so a failure leaves the sums as they were.
        """
        if not len(X):
            return self
        log_weight = self.log_weights(sample_weight)
        values = values / self.value_scale
        moments = np.hstack([values, values**2, np.ones((len(values), 1))])
        sums = self.key_sums.copy()
        scales = self.key_log_scale.copy()
        radius = self.key_radius.copy()
        # Keys beyond the float range (a bandwidth near 1e-300) give sums that are not
        # finite: every query is then unreliable and computed exactly, never NaN.
        with np.errstate(over="ignore", invalid="ignore"):
            self._accumulate_heads(X, log_weight, moments, sums, scales, radius)
        self.key_sums, self.key_log_scale, self.key_radius = sums, scales, radius
        # Weights relative to weight_scale: n weights near 1e308 would overflow the sum.
        weight = sample_weight / self.weight_scale
        self.target_sums = self.target_sums + np.stack(
            [weight @ values, weight @ values**2, np.full(values.shape[1], weight.sum())]
        )
        return self

    def _accumulate_heads(self, X, log_weight, moments, sums, scales, radius):
        """Add the keys' features times their moments to ``sums`` (in place), head by head."""
        for h in range(self.n_heads):
            r = self.feature_maps[h].n_components_
            for rows in iter_query_blocks(len(X), r, n_arrays=3, cache=_BLOCK_ENTRIES):
                K = self.project(X[rows], h, "key")
                radius[h] = max(radius[h], np.sqrt(np.einsum("ij,ij->i", K, K).max()))
                features, top = self.key_features(h, K, log_weight[rows])
                # The sums so far and the block's, merged at the larger shift.
                scales[h], sums[h, :r] = merge(
                    scales[h], sums[h, :r], top, features.T @ moments[rows]
                )

    # ------------------------------------------------------------ predicting

    def _unreliable(self, features, Q, covered, key_sums, sums, h):
        """The rows whose denominator is not trusted (see the module docstring)."""
        denominator = sums[:, -1]
        bound = np.abs(features) @ np.abs(key_sums[:, -1])
        reliable = (denominator > RELATIVE_TINY * bound) & (denominator > ABSOLUTE_TINY)
        reliable &= covered
        reliable &= np.all(np.isfinite(sums), axis=1)
        feature_map = self.feature_maps[h]
        if feature_map.signed and feature_map.random:
            # den = Σ_j T_j over r random terms T_j = φ_j(q) z_j: its standard error is
            # √(Σ T_j² − den²/r). A denominator within a few standard errors of 0 is noise.
            r = features.shape[1]
            squares = features**2 @ key_sums[:, -1] ** 2
            error = np.sqrt(np.maximum(squares - denominator**2 / r, 0.0))
            reliable &= denominator > SIGNED_Z * error
        if self.heads.similarity == "gaussian" and feature_map.approximates is not None:
            # ‖q − k‖ ≥ ‖q‖ − max‖k‖: beyond the reach of every key.
            reliable &= np.sqrt(np.einsum("ij,ij->i", Q, Q)) <= self.key_radius[h] + REACH
        return ~reliable

    def moments(self, X, h):
        """Head ``h``'s first and second moments of the centered values (divided by
        ``value_scale``) at queries ``X``.

        Returns
        -------
        first, second : ndarray of shape (n_queries, n_outputs)
            :math:`S^\\top\\phi(q) / z^\\top\\phi(q)` and the same with :math:`S_2`; 0 on
            the unreliable rows.
        unreliable : ndarray of bool, shape (n_queries,)
            The rows the features cannot serve.
        """
        # A query beyond the float range has features that are not finite: it is
        # unreliable, and the estimator computes it exactly.
        with np.errstate(over="ignore", invalid="ignore"):
            features, Q, covered = self._query_features(X, h)
            key_sums = self._inner_sums(h)
            sums = features @ key_sums
            unreliable = self._unreliable(features, Q, covered, key_sums, sums, h)
        t = self.n_outputs
        reliable = ~unreliable
        first = np.zeros((len(X), t))
        second = np.zeros((len(X), t))
        ratio = sums[reliable, :-1] / sums[reliable, -1:]
        first[reliable], second[reliable] = ratio[:, :t], ratio[:, t:]
        return first, second, unreliable

    def training_moments(self):
        """The weighted mean of the (scaled) centered values and of their squares (no keys
        needed)."""
        totals = self.target_sums
        return totals[0] / totals[2, 0], totals[1] / totals[2, 0]

    def weights(self, X, h):
        """Head ``h``'s implied weights :math:`\\phi(q)^\\top s_i c_i \\phi(k_i) /
        \\phi(q)^\\top z` against the bound keys.

        Returns
        -------
        weights : ndarray of shape (n_queries, n_keys)
            Rows sum to 1; 0 on the unreliable rows.
        unreliable : ndarray of bool, shape (n_queries,)
        """
        exact = self.exact_heads
        features, Q, covered = self._query_features(X, h)
        key_sums = self._inner_sums(h)
        sums = features @ key_sums
        unreliable = self._unreliable(features, Q, covered, key_sums, sums, h)
        K = exact.keys(h) - self.key_shift[h]
        log_weight = exact.log_sample_weight
        inner = self.feature_maps[h].inner
        weights = np.empty((len(X), len(K)))
        for rows in iter_query_blocks(len(K), features.shape[1], n_arrays=3, cache=_BLOCK_ENTRIES):
            block, top = self.key_features(h, K[rows], log_weight[rows])
            block *= rescaling(top, self.key_log_scale[h])
            weights[:, rows] = features @ inner(block.T)
        reliable = ~unreliable
        weights[reliable] /= sums[reliable, -1:]
        weights[unreliable] = 0.0
        return weights, unreliable


def exact_moments(exact_heads, X, h, columns, n_outputs):
    """The first and second moments of the values at queries ``X`` under head ``h`` of the
    exact kernel ``exact_heads`` (bound to the training keys): its sums of the value columns
    ``[v, v², 1]``, in blocks of queries bounded by ``working_memory``."""
    width = (
        min(exact_heads.n_keys, KEY_TILE) if exact_heads.nonpositive else 2 * exact_heads.n_keys
    )
    sums = np.vstack(
        [
            exact_heads.sums(X[rows], h, columns)
            for rows in iter_query_blocks(len(X), width, cache=False)
        ]
    ).astype(np.float64, copy=False)
    t = n_outputs
    return sums[:, :t] / sums[:, -1:], sums[:, t : 2 * t] / sums[:, -1:]


def served_moments(kernel, X, h, exact, columns, moments=None):
    """Head ``h``'s first and second moments at ``X`` from the features of ``kernel``
    (``moments``: already computed), and the rows they cannot serve.

    Those rows get the moments of ``exact`` (an exact kernel, or a provider of its moments:
    ``exact.moments(X, h, columns)``) or, where it is ``None`` (no keys kept), the weighted
    training moments. ``columns``: a function of no arguments giving the value columns
    (asked for only when a row needs them).
    """
    first, second, unreliable = kernel.moments(X, h) if moments is None else moments
    if np.any(unreliable):
        rows = np.flatnonzero(unreliable)
        if exact is None:
            first[rows], second[rows] = kernel.training_moments()
        else:
            first[rows], second[rows] = exact.moments(X[rows], h, columns())
    return first, second, unreliable


def served_weights(kernel, X, h):
    """Head ``h``'s weights at ``X`` from the features of ``kernel``, the rows they cannot
    serve from its exact kernel (bound to the training keys)."""
    weights, unreliable = kernel.weights(X, h)
    if np.any(unreliable):
        weights[unreliable] = kernel.exact_heads.weights(X[unreliable], h)
    return weights
