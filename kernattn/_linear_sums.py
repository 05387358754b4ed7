r"""The feature sums of linear attention: accumulating them, and predicting from them.

For head :math:`h` with projected queries :math:`q` and keys :math:`k` the kernel is the
softmax kernel :math:`\exp(q^\top k + b_k)` (query-only factors dropped), with key bias
:math:`b_k = -\|k\|^2/2` for the Gaussian similarity and 0 otherwise. A feature map estimates
its own base kernel, so the key features carry the rest as a weight:

- positive features estimate :math:`\exp(q^\top k)`: key weight :math:`s_k e^{b_k}`;
- trigonometric features estimate :math:`\exp(q^\top k - \|q\|^2/2 - \|k\|^2/2)`: key
  weight :math:`s_k e^{b_k + \|k\|^2/2}`;
- deterministic maps (elu, relu) replace the kernel: key weight :math:`s_k`.

**Stabilisation.** Positive maps are handled as log-features. A query's log-features have
their row maximum subtracted: a per-query factor cancels between numerator and denominator.
Every key's log-features (or log-weights) have one global constant :math:`c` subtracted,
which cancels too; with ``partial_fit`` it is the running maximum, and the sums are rescaled
by :math:`e^{c_{\mathrm{old}} - c_{\mathrm{new}}}` when it grows. A per-key constant would not
cancel (it would reweight the keys), so there is none.

**Landmark features.** A map whose estimate is :math:`a(q)^\top G\, a(k)` (Nyström) has
its base features :math:`a` summed over the keys, and :math:`G` applied once to the sums
(its ``inner`` method) before the query features meet them.

**Unreliable denominators.** A denominator :math:`\phi(q)^\top z` that is not above
``_RELATIVE_TINY`` times :math:`|\phi(q)|^\top |z|` (cancellation among signed features, or
a negative sum), that underflows, that is for a query the map does not cover (its
``covered`` method: a Nyström query far from every landmark), or — for signed *random*
features — that is within
``_SIGNED_Z`` standard errors of 0 (the r terms :math:`\phi_j(q) z_j` are random draws whose
mean is the denominator, so their spread estimates its error) is not trusted: the query is
computed exactly with the kernel :math:`\exp(q^\top k + b_k + \log s_k)` and the stored
training keys.
"""

import warnings

import numpy as np

from kernattn._base import NadarayaWatsonRegressor
from kernattn._blocks import query_block_size
from kernattn.attention import softmax_attention

# Denominators below this fraction of Σ_j |φ_j(q) z_j| are dominated by cancellation.
_RELATIVE_TINY = 1e-6
# Signed features: denominators within this many standard errors of 0 are not trusted.
_SIGNED_Z = 3.0
# Denominators below this (with the row maximum of the query features at 1) have underflowed.
_ABSOLUTE_TINY = 1e-280
# A block of (rows × r) feature entries this large stays within a few MiB.
_BLOCK_ENTRIES = 2**19


class LinearSumsMixin(NadarayaWatsonRegressor):
    """Feature sums per head and the predictions made from them (see the module docstring)."""

    # ---------------------------------------------------------------- features

    def _blocks(self, n):
        width = max(self.feature_maps_[0].n_features_out_, 1)
        step = min(
            query_block_size(n, width, n_arrays=3, cache=False), max(_BLOCK_ENTRIES // width, 1)
        )
        for start in range(0, n, step):
            yield slice(start, min(start + step, n))

    def _project(self, X, h, side):
        projection = self.query_projection_ if side == "query" else self.key_projection_
        U = (X - self.centre_) @ projection[h]
        if self.similarity_ == "cosine":
            norms = np.linalg.norm(U, axis=1, keepdims=True)
            U = U / np.where(norms > 0, norms, 1.0)
        U = U / np.sqrt(self.temperature_[h])
        if hasattr(self, "key_shift_"):
            U = U - self.key_shift_[h]
        return U

    def _key_bias(self, K):
        if self.similarity_ == "gaussian":
            return -0.5 * np.einsum("ij,ij->i", K, K)
        return np.zeros(len(K))

    def _key_features(self, h, X, log_sw):
        """Key features divided by ``exp(m)``, and ``m`` (this chunk's maximum log-scale)."""
        feature_map = self.feature_maps_[h]
        K = self._project(X, h, "key")
        log_weight = log_sw.copy()
        if feature_map.approximates == "softmax":
            log_weight += self._key_bias(K)
        elif feature_map.approximates == "gaussian":
            log_weight += self._key_bias(K) + 0.5 * np.einsum("ij,ij->i", K, K)
        if hasattr(feature_map, "log_transform"):
            logs = feature_map.log_transform(K)
            logs += log_weight[:, None]
            top = logs.max()
            logs -= top
            return np.exp(logs, out=logs), top
        top = log_weight.max()
        return feature_map.transform(K) * np.exp(log_weight - top)[:, None], top

    def _query_features(self, h, X):
        """Query features and which queries the map covers (``covered``; all, by default)."""
        feature_map = self.feature_maps_[h]
        Q = self._project(X, h, "query")
        covered = feature_map.covered(Q) if hasattr(feature_map, "covered") else True
        if hasattr(feature_map, "shifted_log_transform"):
            logs = feature_map.shifted_log_transform(Q)
            return np.exp(logs, out=logs), covered
        return feature_map.transform(Q), covered

    def _inner_sums(self, h):
        """Head ``h``'s key sums as its query features meet them (``G`` applied, if any)."""
        inner = getattr(self.feature_maps_[h], "inner", None)
        return self._key_sums[h] if inner is None else inner(self._key_sums[h])

    # ------------------------------------------------------------ accumulating

    def _start_sums(self, n_outputs, target_shape):
        n_heads = len(self.head_weights_)
        r = self.feature_maps_[0].n_features_out_
        # Columns [values, values², 1]: S, S₂ and z in one matrix per head.
        self._key_sums = np.zeros((n_heads, r, 2 * n_outputs + 1))
        self._key_log_scale = np.full(n_heads, -np.inf)
        self._target_sums = np.zeros((3, n_outputs))
        self._n_outputs = n_outputs
        self._target_shape = tuple(target_shape)

    def _accumulate(self, X, V, sample_weight):
        """Add keys ``X`` with centred values ``V`` and positive weights to the sums."""
        if not len(X):
            return
        log_sw = np.log(sample_weight)
        moments = np.hstack([V, V**2, np.ones((len(V), 1))])
        sums = self._key_sums.copy()
        scales = self._key_log_scale.copy()
        for h in range(len(sums)):
            for rows in self._blocks(len(X)):
                features, top = self._key_features(h, X[rows], log_sw[rows])
                if top > scales[h]:
                    if np.isfinite(scales[h]):
                        sums[h] *= np.exp(scales[h] - top)
                    scales[h] = top
                sums[h] += np.exp(top - scales[h]) * (features.T @ moments[rows])
        self._key_sums, self._key_log_scale = sums, scales
        self._target_sums = self._target_sums + np.stack(
            [sample_weight @ V, sample_weight @ V**2, np.full(V.shape[1], sample_weight.sum())]
        )

    # --------------------------------------------------------------- predicting

    def _head_moments(self, h, X):
        """Per-query [E v, E v², den] under head ``h`` and the unreliable rows' mask."""
        features, covered = self._query_features(h, X)
        key_sums = self._inner_sums(h)
        sums = features @ key_sums
        denominator = sums[:, -1]
        bound = np.abs(features) @ np.abs(key_sums[:, -1])
        reliable = (denominator > _RELATIVE_TINY * bound) & (denominator > _ABSOLUTE_TINY)
        reliable &= covered
        reliable &= np.all(np.isfinite(sums), axis=1)
        feature_map = self.feature_maps_[h]
        if getattr(feature_map, "signed", False) and getattr(feature_map, "random", True):
            # den = Σ_j T_j over r random terms T_j = φ_j(q) z_j: its standard error is
            # √(Σ T_j² − den²/r). A denominator within a few standard errors of 0 is noise.
            r = features.shape[1]
            squares = features**2 @ key_sums[:, -1] ** 2
            error = np.sqrt(np.maximum(squares - denominator**2 / r, 0.0))
            reliable &= denominator > _SIGNED_Z * error
        t = self._n_outputs
        moments = np.zeros((len(X), 2 * t))
        moments[reliable] = sums[reliable, :-1] / denominator[reliable, None]
        bad = ~reliable
        if np.any(bad):
            moments[bad] = self._exact_moments(h, X[bad])
        return moments, bad

    def _training_keys(self):
        if not self._keys_kept:
            return None
        X = self.X_fit_[self._active]
        log_sw = np.log(self.sample_weight_[self._active])
        return X, log_sw

    def _exact_moments(self, h, X):
        """[E v, E v²] under the exact kernel; the training mean without stored keys."""
        t = self._n_outputs
        keys = self._training_keys()
        if keys is None:
            totals = self._target_sums
            return np.tile(np.concatenate([totals[0], totals[1]]) / totals[2, 0], (len(X), 1))
        X_train, log_sw = keys
        K = self._project(X_train, h, "key")
        Q = self._project(X, h, "query")
        values = np.hstack([self._values, self._values**2])
        out = softmax_attention(Q, K, values, scale=1.0, key_bias=self._key_bias(K) + log_sw)
        return out.reshape(len(X), 2 * t)

    def _predict_moments(self, X, return_std):
        """Estimate (centred units), variance and number of exactly computed queries."""
        t = self._n_outputs
        weights = self.head_weights_
        mean = np.zeros((len(X), t))
        second = np.zeros((len(X), t))
        per_head = []
        exact = np.zeros(len(X), dtype=bool)
        for h in range(len(weights)):
            moments, bad = self._head_moments(h, X)
            exact |= bad
            mean += weights[h] * moments[:, :t]
            per_head.append(moments)
        # Heads average centred values: put back the offset each head's output carries.
        mean += (weights.sum() - 1.0) * self._y_offset + self.head_bias_
        if not return_std:
            return mean, None, int(exact.sum())
        # The spread of the targets around the estimate under the mixture of the heads'
        # weights, with mixture proportions |head_weights_| / Σ |head_weights_|.
        mix = np.abs(weights) / np.abs(weights).sum()
        for h, moments in enumerate(per_head):
            second += mix[h] * (moments[:, t:] - 2.0 * mean * moments[:, :t])
        variance = np.maximum(second + mean**2, 0.0)
        return mean, variance, int(exact.sum())

    @staticmethod
    def _warn_exact(n_exact, n_queries, keys_kept):
        if not n_exact:
            return
        how = (
            "computed exactly"
            if keys_kept
            else "given the training mean (partial_fit keeps no keys to compute them exactly)"
        )
        warnings.warn(
            f"{n_exact} of {n_queries} queries had a linear-attention denominator that is not "
            f"safely positive (negative, cancelling or underflowing feature sums, or a query "
            f"far from every Nyström landmark); they were {how}",
            UserWarning,
            stacklevel=3,
        )

    def _predict_block(self, X, return_std):
        mean, variance, n_exact = self._predict_moments(X, return_std)
        self._warn_exact(n_exact, len(X), self._keys_kept)
        return mean, variance

    def predict(self, X, return_std=False):
        """Linear-attention estimate at each query (see the class docstring).

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
        return_std : bool
            Also return the weighted spread of the training targets around the estimate,
            ``sqrt(Σ_i w_i(x) (y_i − ŷ(x))²)`` from the third sum
            :math:`S_2 = \\sum_i s_i \\phi(k_i) y_i^2`, clipped at 0 (signed features can make
            the implied weights negative).

        Returns
        -------
        y_pred : ndarray of shape (n_queries,) or (n_queries, n_outputs)
        y_std : ndarray of the same shape
            Only when ``return_std=True``.
        """
        X = self._validate_queries(X)
        t = self._n_outputs
        mean = np.empty((len(X), t))
        variance = np.empty((len(X), t)) if return_std else None
        n_exact = 0
        for rows in self._blocks(len(X)):
            block_mean, block_var, block_exact = self._predict_moments(X[rows], return_std)
            mean[rows] = block_mean
            n_exact += block_exact
            if return_std:
                variance[rows] = block_var
        self._warn_exact(n_exact, len(X), self._keys_kept)
        return self._finish_prediction(mean, variance)

    def _block_weights(self, X):
        X_train, log_sw = self._training_keys()
        total = np.zeros((len(X), len(X_train)))
        for h, head_weight in enumerate(self.head_weights_):
            features, _ = self._query_features(h, X)
            keys = np.empty((len(X_train), features.shape[1]))
            for rows in self._blocks(len(X_train)):
                block, top = self._key_features(h, X_train[rows], log_sw[rows])
                keys[rows] = block * np.exp(top - self._key_log_scale[h])
            inner = getattr(self.feature_maps_[h], "inner", None)
            weights = features @ (keys.T if inner is None else inner(keys.T))
            _, bad = self._head_moments(h, X)
            good = ~bad
            weights[good] /= (features[good] @ self._inner_sums(h)[:, -1])[:, None]
            if np.any(bad):
                K = self._project(X_train, h, "key")
                Q = self._project(X[bad], h, "query")
                _, weights[bad] = softmax_attention(
                    Q,
                    K,
                    np.zeros(len(K)),
                    scale=1.0,
                    key_bias=self._key_bias(K) + log_sw,
                    return_weights=True,
                )
            total += head_weight * weights
        return total
