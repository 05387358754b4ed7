"""What a fitted learned estimator tells about its attention heads: the attributes read
from its kernel (both learned estimators), and the analysis of the regressor's heads one by
one (the spread of their logits, the estimator without some of them)."""

import copy

import numpy as np
from sklearn.utils.validation import check_is_fitted

from kernattn._core.namespaces import in_caller_library
from kernattn.learned._heads import logit_variance, refit_mixture


def _kernel_attribute(name, field, doc):
    """The fitted attribute ``name``: the kernel's ``field``, handed out by the estimator."""

    def get(self):
        return self._fitted_array(getattr(self._fitted_kernel(name), field))

    return property(get, doc=doc)


class FittedHeadsMixin:
    """``query_projection_``, ``key_projection_``, ``scale_``, ``head_weights_``,
    ``center_`` and ``input_scale_`` of a fitted kernel of heads
    (:class:`~kernattn._engine.heads.SoftmaxHeads`).

    The estimator says where its kernel is, ``_fitted_kernel(name)`` (raising for an
    attribute ``name`` asked before the fit), and how an array is handed out,
    ``_fitted_array(array)`` (a read-only view or a copy).
    """

    def _fitted_kernel(self, name):
        raise NotImplementedError

    def _fitted_array(self, array):
        raise NotImplementedError

    query_projection_ = _kernel_attribute(
        "query_projection_",
        "query_weights",
        ":math:`W_q^h` of every head, (n_heads, n_features, head_dim).",
    )
    key_projection_ = _kernel_attribute(
        "key_projection_",
        "key_weights",
        ":math:`W_k^h` of every head, (n_heads, n_features, head_dim).",
    )
    scale_ = _kernel_attribute(
        "scale_", "scale", "The multiplier :math:`s_h` of every head's similarity."
    )
    head_weights_ = _kernel_attribute(
        "head_weights_",
        "head_weights",
        "The weight :math:`a_h` of every head's estimate in the mixture.",
    )
    center_ = _kernel_attribute(
        "center_", "center", "The center :math:`c` of the standardization of the inputs."
    )
    input_scale_ = _kernel_attribute(
        "input_scale_",
        "input_scale",
        "The scale :math:`\\sigma` of the standardization of the inputs.",
    )


class HeadAnalysisMixin:
    """``logit_variance`` and ``prune_heads`` of a fitted
    :class:`~kernattn.AttentionRegressor` (on the engine's training set and kernel)."""

    @in_caller_library
    def logit_variance(self, X):
        """Per head: the mean over the queries of the logits' variance across the keys.

        Sample-weighted over the keys (the ``log s_i`` term is not part of the logit
        here). Around 1 the softmax spreads its weight; much larger, it is close to
        one-hot and its gradient vanishes.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.

        Returns
        -------
        variance : ndarray of shape (n_heads,)
        """
        X = self._validate_queries(X)
        sample_weight = self.sample_weight_[self._active]
        return logit_variance(self.kernel_, X, sample_weight, n_jobs=self.n_jobs)

    def prune_heads(self, heads, refit_mixture=True):
        """A copy that keeps only ``heads``, to measure what the other heads contribute.

        Parameters
        ----------
        heads : array_like of int
            Indices of the heads to keep.
        refit_mixture : bool, default=True
            Re-estimate ``head_weights_`` and ``head_bias_`` of the kept heads by weighted
            non-negative least squares on their leave-one-out estimates over the training
            set (stacked regression [1]_; the projections are not retrained; with
            ``degree=1`` or tilted weights too, the estimates are the heads' kernel
            averages). Unconstrained
            weights would exploit the anti-correlation of a leave-one-out estimate with its
            own target, and fit the training set only. Otherwise keep their weights and
            replace each dropped head by the training mean (as ``predict(X, heads=...)``
            does).

        Returns
        -------
        pruned : AttentionRegressor
            With ``n_heads = len(heads)``.

        References
        ----------
        .. [1] L. Breiman, "Stacked regressions", Machine Learning 24 (1996).
        """
        check_is_fitted(self)
        keep = self._check_heads(heads)
        kernel = self.kernel_.select(keep)
        if refit_mixture:
            kernel = kernel.with_mixture(*self._refit_mixture(kernel))
        pruned = copy.deepcopy(self)
        pruned.kernel_ = kernel
        pruned.n_heads = len(keep)
        if not isinstance(self.init, str) and np.ndim(self.init) == 3:
            pruned.init = np.asarray(self.init)[keep]
        return pruned

    def _refit_mixture(self, kernel):
        """The heads' mixture refitted to their leave-one-out estimates (in the engine's
        units, :func:`~kernattn.learned._heads.refit_mixture`)."""
        return refit_mixture(
            kernel,
            kernel.warped(self.X_fit_[self._active]),
            self._values / self._value_scale,
            self.sample_weight_[self._active],
            self._value_scale,
            convex=self.head_mixture == "convex",
            n_jobs=self.n_jobs,
        )
