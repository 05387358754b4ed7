"""Deterministic feature maps, elu + 1 and relu: kernels of their own (nothing is drawn)."""

import numpy as np

from kernattn.feature_maps._base import FeatureMap


class EluFeatureMap(FeatureMap):
    r"""The deterministic map :math:`\phi(u) = \mathrm{elu}(u) + 1` of linear transformers.

    :math:`\mathrm{elu}(u) + 1` is :math:`u + 1` for :math:`u > 0` and :math:`e^u` otherwise:
    positive, so :math:`\phi(q)^\top\phi(k) > 0` is a valid kernel on its own, not an
    estimate of another one (Katharopoulos et al., 2020). Nothing is drawn; r = d.

    Attributes
    ----------
    n_components_ : int
        r = d.
    n_features_in_ : int
        d.

    References
    ----------
    .. [1] A. Katharopoulos et al., "Transformers are RNNs: fast autoregressive transformers
       with linear attention", ICML 2020.

    Examples
    --------
    >>> EluFeatureMap().fit(np.zeros((1, 2))).transform([[1.0, -1.0]]).round(4)
    array([[2.    , 0.3679]])
    """

    random = False
    log_domain = True

    def _fit(self, keys, queries, sample_weight, random_state):
        self.n_components_ = keys.shape[1]

    def log_transform(self, U):
        """``log φ(U)``: ``u`` below 0, ``log(1 + u)`` above."""
        U = self._check_input(U)
        return np.where(U > 0, np.log1p(np.maximum(U, 0.0)), U)

    def transform(self, U):
        """φ(U), shape (n, d).

        :math:`e^u` underflows to 0 below about −745 (float64): a row whose coordinates
        are all below that has features that are all 0. For such inputs use
        :meth:`log_transform` (see :func:`kernattn.attention.linear_attention`).
        """
        U = self._check_input(U)
        return np.where(U > 0, U + 1.0, np.exp(np.minimum(U, 0.0)))


class ReluFeatureMap(FeatureMap):
    r"""The deterministic map :math:`\phi(u) = \max(u, 0)`.

    Non-negative but not positive: a query with no positive coordinate has
    :math:`\phi(q) = 0` and a zero linear-attention denominator (estimators compute such rows
    exactly), and there is no log domain. Nothing is drawn; r = d.

    Attributes
    ----------
    n_components_ : int
        r = d.
    n_features_in_ : int
        d.

    Examples
    --------
    >>> ReluFeatureMap().fit(np.zeros((1, 2))).transform([[1.5, -1.0]])
    array([[1.5, 0. ]])
    """

    random = False

    def _fit(self, keys, queries, sample_weight, random_state):
        self.n_components_ = keys.shape[1]

    def transform(self, U):
        """φ(U), shape (n, d)."""
        return np.maximum(self._check_input(U), 0.0)
