"""The implied weights of :class:`~kernattn.LinearAttentionRegressor`, against its kept
training keys: the features' weights, the rows they cannot serve from the exact kernel
(:func:`~kernattn.linear._feature_kernel.served_weights`)."""

from sklearn.utils.validation import check_is_fitted

from kernattn._core.namespaces import in_caller_library
from kernattn.linear._feature_kernel import served_weights


class AttentionWeightsMixin:
    """``attention_weights`` of a linear-attention estimator (keys kept by ``fit``)."""

    def _check_keys_kept(self):
        if self.kernel_.exact_heads is None:
            raise RuntimeError(
                "attention weights need the training keys, and partial_fit keeps only the "
                "sums S and z; fit on the whole training set to get the weights"
            )

    @in_caller_library
    def attention_weights(self, X, head=None):
        r"""The implied weights :math:`\phi(q)^\top s_i \phi(k_i) / \phi(q)^\top z`.

        Row ``i`` is the (possibly signed) distribution the estimate averages the training
        targets with: ``predict(X) == attention_weights(X) @ y_fit_`` (plus ``head_bias_``
        for a mixture of heads). Rows computed exactly (see the class docstring) have the
        exact kernel's weights. Needs the training keys, which ``fit`` keeps and
        ``partial_fit`` does not.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        head : int, optional
            That head's weights (rows sum to 1). ``None``: ``Σ_h head_weights_[h] w_h``.

        Returns
        -------
        weights : ndarray of shape (n_queries, n_train)
            Rows with zero sample weight get weight 0.
        """
        check_is_fitted(self)
        self._check_keys_kept()
        return super().attention_weights(X, head=head)

    def _head_weights(self, X, h):
        self._check_keys_kept()
        if self._all_weights_exact():
            return self.kernel_.exact_heads.weights(X, h)
        return served_weights(self.kernel_, X, h)
