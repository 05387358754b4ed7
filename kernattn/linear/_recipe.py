r"""How :class:`~kernattn.LinearAttentionRegressor` makes its kernel from data: the softmax
heads being approximated (the Gaussian smoother's, with its center and bandwidth; an
``AttentionRegressor``'s learned heads; a Gaussian head whose input map is learned through
the features) and one fitted feature map per head.

A :class:`KernelRecipe` holds the estimator's settings, plain; :meth:`KernelRecipe.make`
takes (the first chunk of, or a sample of) the data and returns the kernel with empty sums
and the fitted attributes that describe it, which the estimator sets.
"""

import warnings
from dataclasses import dataclass, fields

import numpy as np
from sklearn import config_context
from sklearn.base import clone
from sklearn.utils import check_random_state

from kernattn._core.numerics import weighted_mean
from kernattn._core.warning_types import BandwidthWarning
from kernattn._engine.heads import unbound_heads
from kernattn.bandwidth import resolve_bandwidth, select_bandwidth
from kernattn.bandwidth._rules import check_bandwidth
from kernattn.bandwidth._search import edge_message
from kernattn.feature_maps import NystroemFeatures, PositiveRandomFeatures, check_feature_map
from kernattn.learned import AttentionRegressor
from kernattn.linear._feature_kernel import FeatureKernel
from kernattn.linear._projection import learn_projection

#: Similarities whose kernel is a softmax kernel exp(qᵀk + b_k) that features can estimate.
FEATURE_SIMILARITIES = ("dot", "cosine", "gaussian")
#: Features of a named map when ``n_components="auto"`` does not choose from the data.
DEFAULT_COMPONENTS = 256


#: The fitted attributes :meth:`KernelRecipe.make` describes a kernel with (some only for
#: some kernels: an estimator drops them all before setting the new ones).
def recipe_of(settings):
    """The :class:`KernelRecipe` of an object holding the settings under their names (an
    estimator's parameters)."""
    return KernelRecipe(**{f.name: getattr(settings, f.name) for f in fields(KernelRecipe)})


DESCRIBED = (
    "bandwidth_",
    "loo_error_",
    "irrelevant_features_",
    "attention_model_",
    "center_",
    "input_scale_",
    "query_projection_",
    "key_projection_",
    "key_shift_",
    "scale_",
    "head_weights_",
    "head_bias_",
    "similarity_",
    "feature_maps_",
    "n_components_",
)


@dataclass(frozen=True, kw_only=True)
class KernelRecipe:
    """The settings of a linear-attention kernel (those of
    :class:`~kernattn.LinearAttentionRegressor` of the same names) and how to make it."""

    feature_map: object
    n_components: object
    orthogonal: bool
    bandwidth: object
    center: object
    kernel: object
    learn_projection: bool
    n_subsample: int
    random_state: object
    n_jobs: object

    def template(self, n=None, rank=None):
        """The feature map (unfitted) of ``rank`` features, or of :meth:`rank`'s."""
        template = check_feature_map(
            self.feature_map,
            n_components=self.rank(n) if rank is None else rank,
            orthogonal=self.orthogonal,
        )
        return template

    def splits(self, n_near_keys):
        """Whether the kernel splits each query's keys into an exact near field and a
        Nyström far field (Nyström features, the Gaussian kernel, no learned projection,
        ``n_near_keys`` not 0)."""
        template = self.template()
        return (
            n_near_keys != 0
            and isinstance(template, NystroemFeatures)
            and isinstance(self.kernel, str)
            and self.kernel == "gaussian"
            and not self.learn_projection
        )

    def check_settings(self, n_near_keys):
        """Refuse settings that do not go together: a near field (``n_near_keys`` above 0)
        needs Nyström features and the Gaussian kernel; a learned projection the Gaussian
        kernel and positive random features."""
        gaussian = isinstance(self.kernel, str) and self.kernel == "gaussian"
        if n_near_keys not in (0, "auto"):
            if not isinstance(self.template(), NystroemFeatures):
                raise ValueError(
                    "n_near_keys > 0 needs Nyström features (feature_map='nystroem', whose "
                    f"landmarks are the cells of the near field); got feature_map="
                    f"{self.feature_map!r}. Use n_near_keys=0 or 'auto' with other maps"
                )
            if not gaussian:
                raise ValueError(
                    f"n_near_keys > 0 needs kernel='gaussian'; got kernel={self.kernel!r}"
                )
        if self.learn_projection:
            if not gaussian:
                raise ValueError(
                    f"learn_projection=True needs kernel='gaussian'; got kernel={self.kernel!r}"
                )
            if not isinstance(self.template(), PositiveRandomFeatures):
                raise ValueError(
                    "learn_projection=True needs positive random features (feature_map="
                    "'positive', 'hyperbolic', 'optimal' or a PositiveRandomFeatures); got "
                    f"feature_map={self.feature_map!r}"
                )

    def rank(self, n):
        """r: ``n_components``, or for "auto" about ``KEYS_PER_CELL`` keys per landmark of a
        near field (``DEFAULT_COMPONENTS`` for the other maps, or before n is known)."""
        if self.n_components != "auto":
            return self.n_components
        if n is None or not (isinstance(self.feature_map, str) and self.feature_map == "nystroem"):
            return DEFAULT_COMPONENTS
        return min(DEFAULT_COMPONENTS, n)

    def subsample(self, n, rng, size=None):
        """At most ``size`` (``n_subsample``) sorted row indices, drawn only when there are
        more rows."""
        size = self.n_subsample if size is None else size
        if n <= size:
            return np.arange(n)
        return np.sort(rng.choice(n, size, replace=False))

    def make(
        self,
        X,
        Y,
        sample_weight,
        y_offset,
        value_scale,
        rank=None,
        fit_maps=True,
        center=None,
        bandwidth=None,
    ):
        """The kernel from (the first chunk of) the data, with empty sums, and the fitted
        attributes that describe it (a dict; ``rank`` features instead of
        ``n_components``'s; without ``fit_maps``, no feature map: every weight is computed
        exactly; ``center`` and ``bandwidth``: those of the Gaussian kernel, found
        elsewhere). ``y_offset`` and ``value_scale`` are the estimator's target units."""
        described = {}
        rng = check_random_state(self.random_state)
        if isinstance(self.kernel, str) and self.kernel == "gaussian":
            heads = self._gaussian_heads(X, Y, sample_weight, rng, described, center, bandwidth)
            head_bias = np.zeros(Y.shape[1])
            key_shift = np.zeros((1, X.shape[1]))
        else:
            heads, head_bias = self._attention_heads(X, Y, sample_weight, rng, described)
            key_shift = self._key_shift(heads, X, sample_weight)
        feature_maps = (
            self.fit_feature_maps(heads, key_shift, X, sample_weight, rng, rank)
            if fit_maps
            else []
        )
        if self.learn_projection:
            heads = self._learned_heads(
                heads, feature_maps[0], X, Y, sample_weight, rng, described
            )
        identity = np.eye(X.shape[1])[None]
        described.update(
            center_=heads.center,
            input_scale_=heads.input_scale,
            query_projection_=identity if heads.query_weights is None else heads.query_weights,
            key_projection_=identity.copy() if heads.key_weights is None else heads.key_weights,
            key_shift_=key_shift,
            scale_=heads.scale,
            head_weights_=heads.head_weights,
            head_bias_=head_bias,
            similarity_=heads.similarity,
            feature_maps_=feature_maps,
            n_components_=max(
                (feature_map.n_components_ for feature_map in feature_maps), default=0
            ),
        )
        # The engine mixes centered estimates: Σ_h a_h (ŷ_h − ȳ) + b' = Σ_h a_h ŷ_h + b − ȳ.
        centered_bias = head_bias + (heads.head_weights.sum() - 1.0) * y_offset
        kernel = FeatureKernel(
            heads,
            feature_maps,
            key_shift,
            centered_bias,
            sample_weight.max(),
            value_scale=value_scale,
        )
        return kernel, described

    def _center(self, X, sample_weight):
        d = X.shape[1]
        if self.center is None:
            return weighted_mean(X, sample_weight)
        center = np.asarray(self.center, dtype=float)
        if center.shape != (d,) or not np.all(np.isfinite(center)):
            raise ValueError(
                f"center must be None or {d} finite numbers (one per feature); got shape "
                f"{center.shape}"
            )
        return center

    def _bandwidth(self, X, Y, sample_weight, rng, described):
        """The bandwidth and the leave-one-out error (``None`` unless ``"loo"``).

        As in :class:`~kernattn.KernelSmoother`, a leave-one-out bandwidth on the upper edge
        of its search range marks an irrelevant feature (``irrelevant_features_``) and one
        on the lower edge is warned about, with the subsample the search used.
        """
        loo = isinstance(self.bandwidth, str) and self.bandwidth == "loo"
        if not loo:
            return resolve_bandwidth(self.bandwidth, X, Y, sample_weight, n_jobs=self.n_jobs)
        rows = self.subsample(len(X), rng)
        selection = select_bandwidth(
            X[rows], Y[rows], sample_weight[rows], criterion="loo", n_jobs=self.n_jobs
        )
        h = selection.bandwidth
        rescaled = len(rows) < len(X)
        if rescaled:
            # Scott's rate: the optimal bandwidth shrinks like n^(-1/(d+4)).
            h = h * (len(rows) / len(X)) ** (1.0 / (X.shape[1] + 4))
        described["irrelevant_features_"] = selection.upper_edge
        if np.any(selection.lower_edge):
            where = (
                f" (searched on {len(rows)} of the {len(X)} rows, then rescaled by Scott's factor)"
                if rescaled
                else ""
            )
            message = edge_message("loo", np.flatnonzero(selection.lower_edge).tolist(), "lower")
            warnings.warn(
                f"LinearAttentionRegressor(bandwidth='loo'): {message}{where}",
                BandwidthWarning,
                stacklevel=5,
            )
        return h, selection.value

    def _gaussian_heads(self, X, Y, sample_weight, rng, described, center=None, bandwidth=None):
        """One head: −½‖(x − x')/h‖², as ``KernelSmoother`` with bandwidth h (``center``,
        ``bandwidth``: given instead of found from the data)."""
        center = self._center(X, sample_weight) if center is None else np.asarray(center, float)
        if bandwidth is None:
            h, loo_error = self._bandwidth(X, Y, sample_weight, rng, described)
        else:
            h, loo_error = check_bandwidth(bandwidth, X.shape[1]), None
        described["bandwidth_"] = h
        if loo_error is not None:
            described["loo_error_"] = loo_error
        return unbound_heads("gaussian", center, h)

    def _attention_heads(self, X, Y, sample_weight, rng, described):
        """The heads of an ``AttentionRegressor`` (fitted here on a subsample if needed),
        and its head bias in target units."""
        # The features estimate the softmax of the heads' logits on the inputs; a warp of
        # the inputs, local lines or tilted weights act on top of it and would be dropped.
        # "auto" (the default attention model's) means none of them here.
        plain = {"warp": 0, "degree": 0, "tilt": False}
        if isinstance(self.kernel, str):
            model = AttentionRegressor(tilt=False, warp=0)
        else:
            model = self.kernel
        fitted = hasattr(model, "kernel_")
        beyond = []
        for name, value in plain.items():
            used = getattr(model, name + "_" if fitted and name != "degree" else name, value)
            if used != "auto" and used != value:
                beyond.append(f"{name}={used!r}")
        if beyond:
            raise ValueError(
                "the attention model's prediction must be the softmax average of its heads "
                f"for features to estimate it; got {', '.join(beyond)} (a warp of the inputs, "
                "local lines or tilted weights act on top of the softmax). Use an "
                "AttentionRegressor without them."
            )
        if not fitted:
            model = clone(model).set_params(
                **{
                    name: value
                    for name, value in plain.items()
                    if model.get_params()[name] == "auto"
                }
            )
            if "random_state" in model.get_params(deep=False):
                model.set_params(random_state=rng.randint(2**31 - 1))
            rows = self.subsample(len(X), rng)
            y_sub = Y[rows, 0] if Y.shape[1] == 1 else Y[rows]
            # Validate the model's own parameters even inside this estimator's fit.
            with config_context(skip_parameter_validation=False):
                model.fit(X[rows], y_sub, sample_weight=sample_weight[rows])
        described["attention_model_"] = model
        fitted = model.kernel_
        if fitted.similarity not in FEATURE_SIMILARITIES:
            raise ValueError(
                "the attention model's similarity must be one of "
                f"{FEATURE_SIMILARITIES} (a softmax "
                f"kernel the features can estimate); got {fitted.similarity!r}"
            )
        d = X.shape[1]
        if np.shape(fitted.center) != (d,):
            raise ValueError(
                f"the attention model was fitted on {np.size(fitted.center)} features; X has {d}"
            )
        head_bias = np.asarray(model.head_bias_, dtype=float).reshape(-1)
        if head_bias.shape != (Y.shape[1],):
            raise ValueError(
                f"the attention model predicts {head_bias.size} outputs; y has {Y.shape[1]}"
            )
        heads = unbound_heads(
            fitted.similarity,
            fitted.center,
            fitted.input_scale,
            fitted.query_weights,
            fitted.key_weights,
            fitted.scale,
            fitted.head_weights,
        )
        return heads, head_bias

    @staticmethod
    def _key_shift(heads, X, sample_weight):
        """Per head, the weighted mean of the projected keys for a Gaussian similarity
        (−½‖q − k‖² is unchanged by one shift of both, and the features are most accurate
        for centered inputs); 0 for the others."""
        head_dim = heads.project(X[:1], 0, "key").shape[1]
        key_shift = np.zeros((heads.n_heads, head_dim))
        if heads.similarity == "gaussian":
            for h in range(heads.n_heads):
                keys = heads.project(X, h, "key")
                key_shift[h] = weighted_mean(keys, sample_weight)
        return key_shift

    def fit_feature_maps(self, heads, key_shift, X, sample_weight, rng, rank=None):
        """One fitted copy of the feature map per head, on the head's projected inputs
        (``rank`` features instead of ``n_components``'s)."""
        template = self.template(len(X), rank)
        feature_maps = []
        for h in range(heads.n_heads):
            feature_map = clone(template)
            if template.random:
                # Random maps take the dimension from the keys (A="optimal": also the mean
                # of ‖q + k‖² over all pairs); the queries only when they differ.
                keys = heads.project(X, h, "key") - key_shift[h]
                queries = heads.project(X, h, "query") - key_shift[h]
                feature_map.fit(
                    keys,
                    queries=None if np.array_equal(queries, keys) else queries,
                    sample_weight=sample_weight,
                    random_state=rng,
                )
            else:
                # A map fitted to the data (Nyström's landmarks) sees a subsample of keys.
                rows = self.subsample(len(X), rng)
                keys = heads.project(X[rows], h, "key") - key_shift[h]
                feature_map.fit(keys, sample_weight=sample_weight[rows], random_state=rng)
            feature_maps.append(feature_map)
        return feature_maps

    def _learned_heads(self, heads, feature_map, X, Y, sample_weight, rng, described):
        """The Gaussian head with its input map ``P`` trained through ``feature_map``."""
        rows = self.subsample(len(X), rng)
        center = heads.center
        initial = np.diag(1.0 / heads.input_scale)
        projection, described["loo_error_"] = learn_projection(
            X[rows] - center,
            Y[rows],
            sample_weight[rows],
            feature_map.scaled_omega_,
            initial,
            log_offset=feature_map.log_offset_,
        )
        W = projection[None]
        return unbound_heads("gaussian", center, np.ones(len(center)), W, W.copy())
