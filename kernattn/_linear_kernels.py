r"""How ``LinearAttentionRegressor`` gets its kernel from (the first chunk of) the data.

Every kernel is described by the same fitted attributes: a centre, per-head query and key
projections, temperatures, a similarity, head weights and a bias, and one fitted feature map
per head. The Gaussian kernel with bandwidth :math:`h` is one head with projection
:math:`\mathrm{diag}(1/h)`; an ``AttentionRegressor``'s heads are read from its fitted
attributes (its input standardisation folded into the projections); a learned projection
starts from the Gaussian one and is trained by :mod:`kernattn._linear_projection`.
"""

import inspect

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from kernattn._linear_projection import learn_projection
from kernattn._linear_sums import LinearSumsMixin
from kernattn.bandwidth import loo_bandwidth, rule_of_thumb_bandwidth
from kernattn.feature_maps import make_feature_map
from kernattn.smoother import KernelSmoother

SIMILARITIES = ("dot", "cosine", "gaussian")
#: The fitted attributes of an AttentionRegressor that define its kernel.
ATTENTION_CONTRACT = (
    "query_weights_",
    "key_weights_",
    "temperature_",
    "head_weights_",
    "head_bias_",
)


class LinearKernelMixin(LinearSumsMixin):
    """Sets up the kernel's fitted attributes (see the module docstring)."""

    def _feature_map_template(self):
        if isinstance(self.feature_map, str):
            return make_feature_map(self.feature_map, self.n_features, self.orthogonal)
        return clone(self.feature_map, safe=False)

    def _setup_kernel(self, X, Y, sample_weight):
        """Everything the kernel needs from the data, from (the first chunk of) the data."""
        rng = check_random_state(self.random_state)
        d = X.shape[1]
        if self.centre is None:
            centre = np.average(X, axis=0, weights=sample_weight)
        else:
            centre = np.asarray(self.centre, dtype=float)
            if centre.shape != (d,) or not np.all(np.isfinite(centre)):
                raise ValueError(
                    f"centre must be None or {d} finite numbers (one per feature); got "
                    f"shape {centre.shape}"
                )
        self.centre_ = centre
        if isinstance(self.kernel, str) and self.kernel == "gaussian":
            self._setup_gaussian(X, Y, sample_weight, rng)
        else:
            self._setup_attention(X, Y, sample_weight, rng)
        template = self._feature_map_template()
        p = self.query_projection_.shape[2]
        self.feature_maps_ = []
        for h in range(len(self.head_weights_)):
            feature_map = clone(template, safe=False)
            if isinstance(getattr(feature_map, "A", None), str):
                # The mean of ‖q + k‖² over all pairs of training queries and keys.
                Q, K = self._project(X, h, "query"), self._project(X, h, "key")
                mean_sq = [np.average(np.sum(U**2, axis=1), weights=sample_weight) for U in (Q, K)]
                cross = np.average(Q, axis=0, weights=sample_weight) @ np.average(
                    K, axis=0, weights=sample_weight
                )
                feature_map.fit(p, rng, mean_sq_sum=sum(mean_sq) + 2 * cross)
            elif "keys" in inspect.signature(feature_map.fit).parameters:
                # A map that chooses landmarks among the keys (Nyström) sees a subsample.
                rows = self._subsample(len(X), rng)
                keys = self._project(X[rows], h, "key")
                if "sample_weight" in inspect.signature(feature_map.fit).parameters:
                    feature_map.fit(p, rng, keys=keys, sample_weight=sample_weight[rows])
                else:
                    feature_map.fit(p, rng, keys=keys)
            else:
                feature_map.fit(p, rng)
            self.feature_maps_.append(feature_map)
        if self.learn_projection:
            self._learn_projection(X, Y, sample_weight, rng)

    def _subsample(self, n, rng):
        if n <= self.n_subsample:
            return np.arange(n)
        return np.sort(rng.choice(n, self.n_subsample, replace=False))

    def _setup_gaussian(self, X, Y, sample_weight, rng):
        smoother = KernelSmoother(bandwidth=self.bandwidth)
        if isinstance(self.bandwidth, str) and self.bandwidth == "loo":
            rows = self._subsample(len(X), rng)
            h, self.loo_error_, _ = loo_bandwidth(X[rows], Y[rows], sample_weight[rows])
            # Scott's rate: the optimal bandwidth shrinks like n^(-1/(d+4)).
            h = h * (len(rows) / len(X)) ** (1.0 / (X.shape[1] + 4))
        elif isinstance(self.bandwidth, str):
            h = rule_of_thumb_bandwidth(X, sample_weight, self.bandwidth)
        else:
            h, _ = smoother._resolve_bandwidth(X, Y, sample_weight)
        self.bandwidth_ = h
        projection = np.diag(1.0 / h)[None]
        self.query_projection_ = projection
        self.key_projection_ = projection.copy()
        self.key_shift_ = np.zeros((1, X.shape[1]))
        self.temperature_ = np.ones(1)
        self.head_weights_ = np.ones(1)
        self.head_bias_ = np.zeros(Y.shape[1])
        self.similarity_ = "gaussian"

    def _setup_attention(self, X, Y, sample_weight, rng):
        model = self.kernel
        if isinstance(model, str):
            from kernattn.learned import AttentionRegressor

            model = AttentionRegressor()
        if not all(hasattr(model, a) for a in ATTENTION_CONTRACT):
            model = clone(model)
            if "random_state" in model.get_params():
                model.set_params(random_state=rng.randint(2**31 - 1))
            rows = self._subsample(len(X), rng)
            y_sub = Y[rows, 0] if Y.shape[1] == 1 else Y[rows]
            model.fit(X[rows], y_sub, sample_weight=sample_weight[rows])
        self.attention_model_ = model
        similarity = getattr(model, "similarity", "dot")
        if similarity not in SIMILARITIES:
            raise ValueError(
                f"the attention model's similarity must be one of {SIMILARITIES}; got "
                f"{similarity!r}"
            )
        d = X.shape[1]
        x_mean = np.asarray(getattr(model, "x_mean_", np.zeros(d)), dtype=float)
        x_scale = np.asarray(getattr(model, "x_scale_", np.ones(d)), dtype=float)
        Wq = np.asarray(model.query_weights_, dtype=float)
        Wk = np.asarray(model.key_weights_, dtype=float)
        if Wq.ndim != 3 or Wq.shape[1] != d or Wk.shape != Wq.shape:
            raise ValueError(
                f"the attention model's query_weights_ and key_weights_ must have shape "
                f"(n_heads, {d}, head_dim); got {Wq.shape} and {Wk.shape}"
            )
        self.head_bias_ = np.asarray(model.head_bias_, dtype=float).reshape(-1)
        if self.head_bias_.shape != (Y.shape[1],):
            raise ValueError(
                f"the attention model predicts {self.head_bias_.size} outputs; y has {Y.shape[1]}"
            )
        # z = (x − x_mean)/x_scale, q = z W: fold the standardisation into the projections.
        self.centre_ = x_mean
        self.query_projection_ = Wq / x_scale[None, :, None]
        self.key_projection_ = Wk / x_scale[None, :, None]
        self.temperature_ = np.asarray(model.temperature_, dtype=float).reshape(-1)
        self.head_weights_ = np.asarray(model.head_weights_, dtype=float).reshape(-1)
        self.similarity_ = similarity
        self.key_shift_ = np.zeros((Wq.shape[0], Wq.shape[2]))
        if similarity == "gaussian":
            # -½‖q − k‖² is unchanged by one shift of both: centre the keys, so the positive
            # features see small norms.
            for h in range(len(self.key_shift_)):
                keys = self._project(X, h, "key")
                self.key_shift_[h] = np.average(keys, axis=0, weights=sample_weight)

    def _learn_projection(self, X, Y, sample_weight, rng):
        rows = self._subsample(len(X), rng)
        feature_map = self.feature_maps_[0]
        projection, self.loo_error_ = learn_projection(
            X[rows] - self.centre_,
            Y[rows],
            sample_weight[rows],
            feature_map.scaled_omega_,
            self.query_projection_[0],
            log_offset=feature_map.log_offset_,
        )
        self.query_projection_ = projection[None]
        self.key_projection_ = projection[None].copy()

    # ------------------------------------------------------------------ fitting
