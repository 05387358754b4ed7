r"""Fits of :class:`~kernattn.LinearAttentionRegressor` that keep no keys in memory.

The key sums of linear attention are sums over rows, so the training set can come in parts:
chunks added one call at a time (``partial_fit``), chunks streamed in two passes
(:func:`~kernattn.fit_chunks`), or the partitions of a dask collection, whose keys stay where
they are (:mod:`kernattn.distributed`). This mixin holds those public ways of fitting; the
mathematics of the two passes (statistics and a sample, then the sums, merged at their
shifts) is :mod:`kernattn.linear._passes`.
"""

import warnings

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from kernattn._core.namespaces import from_caller
from kernattn._core.numerics import power_of_two_scale, weighted_mean
from kernattn._engine.regressor import fit_transaction
from kernattn._engine.summary import RowSummary, check_summary, sample_seed, summarize
from kernattn.linear._conformal_parts import residuals_on_parts, weights_on_parts
from kernattn.linear._feature_kernel import FeatureKernel
from kernattn.linear._near_field import NearFieldKernel
from kernattn.linear._passes import (
    MAX_CELLS,
    cell_kernel,
    feature_sums,
    gaussian_center_bandwidth,
    merge_feature_sums,
    near_field_in_parts,
    ordered_sample,
    sample_prefix,
    value_units,
)


class InPartsFitMixin:
    """``partial_fit`` and the fits on training rows in parts (chunks, dask partitions)."""

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, sample_weight=None):
        """Add a chunk of training data to the key sums S, S₂, z.

        The first call (on an unfitted estimator) also fixes what the kernel needs from the
        data — the center, the bandwidth, the attention model, the features (Nyström
        landmarks too), the target offset — from that chunk, unless given as parameters.
        With ``center``, ``bandwidth`` and ``random_state`` given (and, for Nyström
        features, the landmarks), any split into chunks gives the same sums as one call on
        the concatenation (up to rounding). That is the far field alone: ``fit`` on the
        concatenation predicts the same only with ``n_near_keys=0`` and only where the
        features serve the query, since ``fit`` keeps the training keys, computes a near
        field exactly and computes exactly the queries whose denominator is unreliable.
        Later calls (also after ``fit``) only add to the sums; the training keys are not
        kept, so ``attention_weights`` is unavailable and queries whose denominator is
        unreliable get the weighted training mean. Conformal intervals need held-out rows:
        :meth:`calibrate` on rows never streamed, then ``conformal_interval(X,
        method="split")``; every ``partial_fit`` drops the calibration.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
            A chunk of training inputs (the keys).
        y : array_like of shape (n_samples,) or (n_samples, n_outputs)
            Their targets, shaped like the first chunk's.
        sample_weight : array_like of shape (n_samples,), optional
            Non-negative, at least one positive.

        Returns
        -------
        self : LinearAttentionRegressor
            The updated estimator.
        """
        first = not hasattr(self, "kernel_")
        (X, y, sample_weight), _ = from_caller(X, y, sample_weight)
        with fit_transaction(self):
            if first:
                self._check_params()
            X, y, sample_weight = self._validate_training_data(X, y, sample_weight, reset=first)
            Y = y.reshape(len(y), -1)
            active = sample_weight > 0
            X, Y, sample_weight = X[active], Y[active], sample_weight[active]
            if first:
                self._target_shape = y.shape[1:]
                # As the engine does for fit: in units that cannot overflow (exact).
                self._y_offset = weighted_mean(Y, sample_weight)
                self._value_scale = power_of_two_scale(Y - self._y_offset, axis=0)
                kernel = self._make_kernel(X, Y, sample_weight)
            elif y.shape[1:] != self._target_shape:
                raise ValueError(
                    f"y has shape {y.shape[1:]} per sample; earlier chunks had "
                    f"{self._target_shape}"
                )
            elif not self.kernel_.n_components:
                # A fit that computed every weight exactly took no feature sums: they are
                # taken now, from its training set, before the chunk is added.
                kernel = self._far_of_training_set()
            else:
                kernel = self.kernel_.without_keys()
            self._keep_no_keys(kernel.accumulate(X, Y - self._y_offset, sample_weight))
        return self

    def _conformal_source(self, X):
        """As the engine's; for a fit whose training rows stay in the partitions of a
        collection, computed where they are (:mod:`kernattn.linear._conformal_parts`): the
        leave-one-out residuals pair of partitions by pair, the exact kernel's sums merged
        at their shifts, and the queries' weights on every partition."""
        kept = self.__dict__.get("X_fit_")
        if kept is None or isinstance(kept, np.ndarray):
            return super()._conformal_source(X)
        check_is_fitted(self)
        if "_residuals_in_parts" not in self.__dict__:
            # Computed once per fit, as in memory.
            self._residuals_in_parts = residuals_on_parts(self)
        ranked, sample_weight, values = self._residuals_in_parts
        return weights_on_parts(self, X), ranked, sample_weight, values

    def _check_targets_kept(self, conformal=False):
        """As the engine's, and a fit whose training rows stay in the partitions of a
        collection (a dask fit) says that ``predict_cdf`` and ``predict_quantiles`` are
        computed from rows in memory."""
        kept = self.__dict__.get("X_fit_")
        if kept is not None and not isinstance(kept, np.ndarray):
            raise RuntimeError(
                "the conditional distribution is computed from the training rows in memory, "
                "and this model was fitted on the partitions of a dask collection, whose "
                "rows stay where they are; fit on the computed arrays (X.compute(), "
                "y.compute()) to use predict_cdf and predict_quantiles"
            )
        super()._check_targets_kept(conformal)

    def _keep_no_keys(self, kernel):
        """Fitted with ``kernel`` (its sums taken) and no training keys kept: no training
        set, no values to attend to, no near field, no calibration of an earlier fit."""
        for name in (
            "X_fit_",
            "y_fit_",
            "sample_weight_",
            "_active",
            "_value_columns_built",
            "_target_order",
            "_sorted_targets",
            "_residuals_built",
            "_y_bandwidth_built",
            "_residuals_in_parts",
            "_calibration",
        ):
            self.__dict__.pop(name, None)
        if not isinstance(kernel, NearFieldKernel):
            # Attributes of a near field, which a fit without keys does not have.
            for name in ("weight_error_", "n_near_keys_"):
                self.__dict__.pop(name, None)
        self.exact_weights_ = False
        self._log_sample_weight = np.zeros(0)
        self._values = np.zeros((0, kernel.n_outputs))
        self.kernel_ = kernel

    def _fit_rows(self, rows):
        """The fit on training rows in parts: chunks (:func:`fit_chunks`) or the partitions
        of a dask collection, in two passes (:mod:`kernattn.linear._passes`).

        The first pass takes the statistics and a uniform sample of the rows of positive
        weight (:mod:`kernattn._engine.summary`), from which the kernel is made as in memory on a
        subsample; the second sums every part's features, merged up a tree in the order of
        the parts. Rows that stay where they are (a cluster's partitions) also get the near
        field: its cells are centered on sampled rows, its per-cell sums are taken with the
        totals, and the share of keys it computes exactly is chosen on the sample
        (:meth:`_near_share_on_sample`); at prediction every partition computes its near
        keys where it is. Chunks keep no keys: the Nyström features serve alone.
        """
        seed = sample_seed(self.random_state)
        near_field = self._near_field() and rows.keeps_rows
        # The near field's centers are drawn with the sample: more rows of it, whose first
        # n_subsample (the smallest sampling keys) are the sample of the kernel all the same.
        n_sample = max(self.n_subsample, MAX_CELLS) if near_field else self.n_subsample
        summary = rows.reduce(summarize, RowSummary.merge, seed, n_sample)
        check_summary(summary)
        self.__dict__.pop("feature_names_in_", None)
        if rows.feature_names is not None:
            self.feature_names_in_ = rows.feature_names
        self.n_features_in_ = rows.n_features
        dtype = np.float32 if rows.dtype == np.float32 else np.float64
        kernel = self._kernel_from_summary(
            sample_prefix(summary, self.n_subsample), rows.target_shape, dtype, near_field
        )
        near = cell_kernel(kernel, summary) if near_field else None
        if near is None:
            sums = rows.reduce(feature_sums, merge_feature_sums, kernel, summary.y_mean)
            kernel.key_sums, kernel.key_log_scale, kernel.key_radius, kernel.target_sums = sums
            self._keep_no_keys(kernel)
        else:
            self._fit_near_field_in_parts(rows, near, summary, seed)
        if rows.keeps_rows:
            # The training set stays where it is: the exact rows of predict are computed
            # there.
            self.X_fit_, self.y_fit_, self.sample_weight_ = rows.arrays()

    def _fit_near_field_in_parts(self, rows, near, summary, seed):
        """The near field's sums taken part by part, its share of keys chosen on the
        sample (:func:`~kernattn.linear._passes.near_field_in_parts`)."""
        near, weight_error, met, feature_map = near_field_in_parts(
            rows,
            near,
            summary,
            seed,
            n_near=self._n_near,
            tol=self.tol,
            n_subsample=self.n_subsample,
            choose_rank=self.n_components == "auto" and isinstance(self.feature_map, str),
        )
        if feature_map is not None:
            self.feature_maps_ = [feature_map]
            self.n_components_ = feature_map.n_components_
        if not met:
            warnings.warn(
                f"the weight error measured at fit on {len(summary.sample[2])} sampled "
                f"rows, {weight_error:.3g}, is above tol={self.tol:g} with the most near "
                "keys that keep prediction linear; raise n_components or tol, or give "
                "n_near_keys",
                UserWarning,
                stacklevel=5,
            )
        self._keep_no_keys(near)
        self.n_near_keys_ = near.mean_near_keys
        if weight_error is not None:
            self.weight_error_ = weight_error

    def _kernel_from_summary(self, summary, target_shape, dtype, near_field):
        """The kernel (empty sums) from the first pass: the target offset and units, the
        center and bandwidth from the full-data statistics (a rule or a search on the
        sample, rescaled to n by Scott's rate), the rest as in memory on the sample; sets
        the fitted attributes that describe it."""
        self._dtype = np.dtype(dtype)
        self._target_shape = tuple(target_shape)
        self._y_offset, self._value_scale = value_units(summary)
        sample = ordered_sample(summary)
        center, bandwidth, loo_error = None, None, None
        if isinstance(self.kernel, str) and self.kernel == "gaussian":
            center, bandwidth, loo_error = gaussian_center_bandwidth(
                summary, sample, self.center, self.bandwidth, n_jobs=self.n_jobs
            )
        kernel = self._make_kernel(*sample, center=center, bandwidth=bandwidth)
        kernel.weight_scale = float(summary.max_weight)
        if loo_error is not None:
            self.loo_error_ = loo_error
        if self._near_field() and not near_field:
            # The near field computes each query's nearest keys exactly from keys held in
            # memory; over chunks, as after partial_fit, the Nyström far field serves alone.
            warnings.warn(
                "fitted in chunks, LinearAttentionRegressor has no near field: the Nyström "
                "features alone (n_near_keys=0) approximate the kernel, which is coarser at "
                "small bandwidths; fit in memory or on a dask collection for the near field, "
                "or pass n_near_keys=0 to silence this",
                UserWarning,
                stacklevel=5,
            )
        return kernel

    def _far_of_training_set(self):
        """The far field's kernel (features fitted, sums taken) of a fit that computed every
        weight exactly, from its kept training set and heads."""
        exact = self.kernel_
        rows = self._active
        X, w = self.X_fit_[rows], self.sample_weight_[rows]
        rng = check_random_state(self.random_state)
        feature_maps = self._recipe().fit_feature_maps(exact.heads, exact.key_shift, X, w, rng)
        kernel = FeatureKernel(
            exact.heads,
            feature_maps,
            exact.key_shift,
            exact.head_bias,
            exact.weight_scale,
            value_scale=exact.value_scale,
        )
        self.feature_maps_ = feature_maps
        self.n_components_ = kernel.n_components
        return kernel.accumulate(X, self._values, w)
