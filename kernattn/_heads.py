r"""``SoftmaxHeads``: the fitted kernel of every exact kernattn estimator.

A head compares a query :math:`x` with a key :math:`x'` through projections of their
standardized inputs :math:`u = (x - c)/\sigma`,

.. math::

    q = \sqrt{s}\, \mathrm{norm}(u W_q), \qquad k = \sqrt{s}\, \mathrm{norm}(u' W_k),

(``norm`` scales to unit length for the cosine similarity and is the identity otherwise, and
:math:`s` is the head's scale, the multiplier of the similarity) and makes the logit

====================  ==============================================================
similarity            logit :math:`\ell(q, k)`
====================  ==============================================================
``"dot"``             :math:`q^\top k` (:math:`= s\, (uW_q)^\top(u'W_k)`)
``"cosine"``          :math:`q^\top k` (:math:`= s \cos\angle(uW_q, u'W_k)`)
``"gaussian"``        :math:`-\tfrac12\|q - k\|^2 = q^\top k - \tfrac12\|k\|^2 - \tfrac12\|q\|^2`
``"epanechnikov"``    :math:`\log(1 - \|q - k\|^2)` inside the unit ball
``"tricube"``         :math:`3 \log(1 - \|q - k\|^3)` inside the unit ball
====================  ==============================================================

plus :math:`\log s_i` for the key's sample weight. The head's weights are the softmax of the
logits over the keys, its estimate the weighted mean of the values, and the heads' estimates
are mixed with ``head_weights`` (and ``head_bias``).

The Gaussian smoother with bandwidth :math:`h` is one head with :math:`c` the training mean,
:math:`\sigma = h`, :math:`W_q = W_k = I` and :math:`s = 1`: Gaussian Nadaraya–Watson *is*
softmax attention with a key bias :math:`-\tfrac12\|k\|^2` (the query's own
:math:`-\tfrac12\|q\|^2` cancels in the softmax; it is kept here so that the logits are never
positive, which lets the exact path skip the row maximum). A learned attention kernel is the
same object with learned :math:`W_q, W_k, s`.
"""

import numpy as np

from kernattn._numerics import exp_floor
from kernattn.kernels import OUTSIDE_SLOPE, log_kernel, squared_distances

#: Similarities whose logits depend on the distance ‖q − k‖ only (never positive).
RADIAL = ("gaussian", "epanechnikov", "tricube")
SIMILARITIES = ("dot", "cosine") + RADIAL

# Added to ‖u‖² before the square root of the cosine normalization: a zero projection then
# has a zero (not NaN) direction and the normalization stays differentiable.
COSINE_EPS = 1e-12


def project(U, W, similarity):
    """Projections ``U @ W`` (``U`` itself for ``W=None``), unit length for ``"cosine"``.

    Returns the projections and, for ``"cosine"``, the norms they were divided by.
    """
    P = U if W is None else U @ W
    if similarity != "cosine":
        return P, None
    norm = np.sqrt(np.einsum("ij,ij->i", P, P) + COSINE_EPS)
    return P / norm[:, None], norm


def key_bias(K, similarity):
    """The key-only logit term of a dot product: ``-½‖k‖²`` for ``"gaussian"``, else 0."""
    if similarity == "gaussian":
        return -0.5 * np.einsum("ij,ij->i", K, K)
    return np.zeros(len(K), dtype=K.dtype)


class SoftmaxHeads:
    """A fitted multi-head softmax kernel bound to its keys (see the module docstring).

    Parameters
    ----------
    similarity : {"dot", "cosine", "gaussian", "epanechnikov", "tricube"}
    center, input_scale : ndarray of shape (n_features,)
        Inputs are standardized to ``(x - center) / input_scale`` before projecting.
    query_weights, key_weights : ndarray of shape (n_heads, n_features, head_dim) or None
        ``None``: one head whose projection is the identity.
    scale : ndarray of shape (n_heads,)
        Positive multipliers of the similarity.
    head_weights : ndarray of shape (n_heads,)
    head_bias : ndarray of shape (n_outputs,)
        Added to the mixture, in the centered target units of the estimator.
    keys : ndarray of shape (n_keys, n_features)
        The training inputs (positive sample weight only).
    log_sample_weight : ndarray of shape (n_keys,)
        ``log(s_i / max s)``, never positive.
    dtype : {numpy.float64, numpy.float32}
        The precision of the logits.
    """

    def __init__(
        self,
        *,
        similarity,
        center,
        input_scale,
        query_weights,
        key_weights,
        scale,
        head_weights,
        head_bias,
        keys,
        log_sample_weight,
        dtype=np.float64,
    ):
        self.similarity = similarity
        self.center = np.asarray(center, dtype=float)
        self.input_scale = np.asarray(input_scale, dtype=float)
        self.query_weights = query_weights
        self.key_weights = key_weights
        self.scale = np.asarray(scale, dtype=float)
        self.head_weights = np.asarray(head_weights, dtype=float)
        self.head_bias = np.asarray(head_bias, dtype=float)
        self.dtype = np.dtype(dtype)
        self.log_sample_weight = np.asarray(log_sample_weight, dtype=float)
        self._lowest_log_sample_weight = float(self.log_sample_weight.min(initial=0.0))
        self._floor = exp_floor(self.dtype)
        self._bind(np.asarray(keys, dtype=float))

    @property
    def n_heads(self):
        return len(self.scale)

    @property
    def n_keys(self):
        return len(self.log_sample_weight)

    @property
    def nonpositive(self):
        """Whether the logits are never positive (radial similarities)."""
        return self.similarity in RADIAL

    def project(self, X, h, side="query"):
        """The scaled projections ``q`` (or ``k``) of head ``h`` for inputs ``X``, float64."""
        U = (np.asarray(X, dtype=float) - self.center) / self.input_scale
        weights = self.query_weights if side == "query" else self.key_weights
        P, _ = project(U, None if weights is None else weights[h], self.similarity)
        if self.scale[h] != 1.0:
            P = P * np.sqrt(self.scale[h])
        return P

    def _bind(self, X):
        """Per head, what every query block meets: the keys and their biases."""
        self._keys = []
        self._keys_aug = []
        self._keys_sq = []
        self._key_radius = []
        for h in range(self.n_heads):
            K = self.project(X, h, "key")
            sq = np.einsum("ij,ij->i", K, K)
            self._keys.append(K)
            self._keys_sq.append(sq)
            self._key_radius.append(np.sqrt(sq.max(initial=0.0)))
            if self.similarity in ("dot", "cosine", "gaussian"):
                # [q, −½‖q‖², 1] · [k, 1, −½‖k‖² + log s]: the logits in one product.
                bias = key_bias(K, self.similarity) + self.log_sample_weight
                aug = np.hstack([K, np.ones((len(K), 1)), bias[:, None]])
                self._keys_aug.append(np.ascontiguousarray(aug, dtype=self.dtype))
            else:
                self._keys_aug.append(None)

    def select(self, heads):
        """A copy with only ``heads`` (their mixture weights kept as they are)."""
        heads = np.asarray(heads)
        out = object.__new__(SoftmaxHeads)
        out.__dict__.update(self.__dict__)
        for name in ("query_weights", "key_weights"):
            value = getattr(self, name)
            setattr(out, name, None if value is None else value[heads])
        out.scale = self.scale[heads]
        out.head_weights = self.head_weights[heads]
        for name in ("_keys", "_keys_aug", "_keys_sq", "_key_radius"):
            setattr(out, name, [getattr(self, name)[h] for h in heads])
        return out

    def with_mixture(self, head_weights, head_bias):
        """A copy with another mixture of the same heads."""
        out = object.__new__(SoftmaxHeads)
        out.__dict__.update(self.__dict__)
        out.head_weights = np.asarray(head_weights, dtype=float)
        out.head_bias = np.asarray(head_bias, dtype=float)
        return out

    # ------------------------------------------------------------------ logits

    def queries(self, X, h):
        """What :meth:`logits` takes: head ``h``'s queries, prepared, in ``dtype``."""
        Q = self.project(X, h, "query")
        if self._keys_aug[h] is None:
            return Q.astype(self.dtype, copy=False)
        if self.similarity == "gaussian":
            half_sq = -0.5 * np.einsum("ij,ij->i", Q, Q)
        else:
            half_sq = np.zeros(len(Q))
        return np.hstack([Q, half_sq[:, None], np.ones((len(Q), 1))]).astype(
            self.dtype, copy=False
        )

    def may_underflow(self, queries, h):
        """Whether a logit of these prepared queries can fall below the ``exp`` floor.

        For the Gaussian similarity −½‖q − k‖² ≥ −½(‖q‖ + max‖k‖)², so most blocks of
        queries inside the data cannot, and the flooring pass is skipped for them.
        """
        if self._keys_aug[h] is None:
            return True
        q_norm = np.sqrt(-2.0 * float(queries[:, -2].min(initial=0.0)))
        lowest = -0.5 * (q_norm + self._key_radius[h]) ** 2
        return lowest + self._lowest_log_sample_weight < self._floor

    def logits(self, queries, h, keys=slice(None), floor=False, out=None):
        """Logits ``ℓ(q, k_i) + log s_i`` of prepared ``queries`` against ``keys`` (a slice).

        With ``floor`` (for never-positive logits that :meth:`may_underflow`), logits below
        the ``exp`` floor are raised to it: numpy's ``exp`` is slow where it underflows.
        ``out``: a buffer of the block's shape and ``dtype`` to write to.
        """
        if self._keys_aug[h] is not None:
            logits = np.matmul(queries, self._keys_aug[h][keys].T, out=out)
        else:
            r2 = squared_distances(queries, self._keys[h][keys], K_sq=self._keys_sq[h][keys])
            logits = log_kernel(r2, self.similarity).astype(self.dtype, copy=False)
            logits += self.log_sample_weight[keys].astype(self.dtype)
            if out is not None:
                out[...] = logits
                logits = out
        if floor:
            np.maximum(logits, self._floor, out=logits)
        return logits

    def far_logits(self, X, h):
        """Logits up to a per-query constant, in float64, for queries whose kernel underflowed.

        The radial logits without the query's own −½‖q‖²: that term is the same for every
        key, so it cancels in the weights, but for a query far from the data it swamps the
        differences between keys (or overflows). Without it the nearest key wins. Outside a
        compact support the log-kernel is −10⁶ r², hence the factor 2·10⁶ there. A query
        beyond about 1e150 (in kernel units) is scaled down with its logits, so qᵀk cannot
        overflow; its weights are one-hot on the nearest key either way.
        """
        Q = self.project(X, h, "query")
        K = self._keys[h]
        if self.similarity in ("dot", "cosine"):
            return Q @ K.T + self.log_sample_weight
        shrink = np.maximum(np.abs(Q).max(axis=1, initial=0.0) / 1e150, 1.0)[:, None]
        logits = (Q / shrink) @ K.T
        logits -= 0.5 * self._keys_sq[h] / shrink
        if self.similarity != "gaussian":
            # Shift before scaling, so that the nearest key's logit is 0, not an overflow.
            logits -= logits.max(axis=1, keepdims=True)
            with np.errstate(over="ignore"):
                logits *= 2.0 * OUTSIDE_SLOPE
        logits += self.log_sample_weight
        return logits

    def keys(self, h):
        """Head ``h``'s projected keys (float64)."""
        return self._keys[h]
