"""Deterministic feature maps: elu + 1 and relu, kernels of their own (nothing is drawn)."""

import numpy as np

from kernattn._feature_base import _as_inputs, _check_dim, _FeatureMap


class EluFeatureMap(_FeatureMap):
    r"""The deterministic map :math:`\phi(u) = \mathrm{elu}(u) + 1` of linear transformers.

    :math:`\mathrm{elu}(u) + 1` is :math:`u + 1` for :math:`u > 0` and :math:`e^u` otherwise:
    positive, so :math:`\phi(q)^\top\phi(k) > 0` is a valid kernel on its own, not an
    estimate of another one (Katharopoulos et al., 2020). Nothing is drawn; r = d.

    Examples
    --------
    >>> EluFeatureMap().fit(2).transform([[1.0, -1.0]]).round(4)
    array([[2.    , 0.3679]])
    """

    random = False

    def fit(self, d, random_state=None):
        """Record the input dimension (nothing is random); returns self."""
        self.n_features_in_ = self.n_features_out_ = _check_dim(d)
        return self

    def log_transform(self, U):
        """``log φ(U)``: ``u`` below 0, ``log(1 + u)`` above."""
        self._check_fitted()
        U = _as_inputs(U, self.n_features_in_)
        return np.where(U > 0, np.log1p(np.maximum(U, 0.0)), U)

    def shifted_log_transform(self, U):
        """``log φ(U)`` minus its row maximum."""
        logits = self.log_transform(U)
        logits -= logits.max(axis=1, keepdims=True)
        return logits

    def transform(self, U):
        """φ(U), shape (n, d)."""
        self._check_fitted()
        U = _as_inputs(U, self.n_features_in_)
        return np.where(U > 0, U + 1.0, np.exp(np.minimum(U, 0.0)))


class ReluFeatureMap(_FeatureMap):
    r"""The deterministic map :math:`\phi(u) = \max(u, 0)`.

    Non-negative but not positive: a query with no positive coordinate has
    :math:`\phi(q) = 0` and a zero linear-attention denominator (estimators compute such rows
    exactly). Nothing is drawn; r = d.

    Examples
    --------
    >>> ReluFeatureMap().fit(2).transform([[1.5, -1.0]])
    array([[1.5, 0. ]])
    """

    random = False

    def fit(self, d, random_state=None):
        """Record the input dimension (nothing is random); returns self."""
        self.n_features_in_ = self.n_features_out_ = _check_dim(d)
        return self

    def transform(self, U):
        """φ(U), shape (n, d)."""
        self._check_fitted()
        return np.maximum(_as_inputs(U, self.n_features_in_), 0.0)
