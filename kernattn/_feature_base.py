r"""What every feature map shares: ``fit`` then ``transform``, input checks, a readable repr.

A feature map turns inputs ``U`` of shape (n, d) into features of shape (n, r) with
:math:`\kappa(q, k) \approx \phi(q)^\top \phi(k)`. Maps that can be evaluated in log space
also have ``log_transform`` (the log of their *base* features :math:`a(u)`) and
``shifted_log_transform`` (the same minus each row's maximum). For most maps
:math:`\phi = a`; a map whose estimate is :math:`a(q)^\top G\, a(k)` for a fixed matrix
:math:`G` (the Nyström map) says so through :meth:`_FeatureMap.inner`, so that sums of base
features can be taken over the keys and met by the query features through :math:`G`.
"""

import numbers

import numpy as np


def _check_n_features(n_features, even=False):
    if (
        isinstance(n_features, bool)
        or not isinstance(n_features, numbers.Integral)
        or n_features < (2 if even else 1)
        or (even and n_features % 2)
    ):
        kind = "a positive even integer" if even else "a positive integer"
        raise ValueError(f"n_features must be {kind}; got {n_features!r}")
    return int(n_features)


def _check_dim(d):
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1:
        raise ValueError(f"the input dimension d must be a positive integer; got {d!r}")
    return int(d)


def _as_inputs(U, d):
    U = np.asarray(U, dtype=float)
    if U.ndim != 2 or U.shape[1] != d:
        raise ValueError(f"expected an array of shape (n, {d}); got shape {U.shape}")
    return U


class _FeatureMap:
    """Shared bookkeeping: ``fit(d, random_state)`` then ``transform(U)``."""

    #: The kernel the features estimate in mean ("softmax" for exp(qᵀk), "gaussian" for
    #: exp(-‖q-k‖²/2)), or None when the map defines its own kernel.
    approximates = None
    #: Whether features can be negative (then so can a linear-attention denominator).
    signed = False
    #: Whether the features are random draws, so that the r terms of a denominator
    #: φ(q)ᵀz are samples whose spread estimates its error.
    random = True

    def _check_fitted(self):
        if not hasattr(self, "n_features_out_"):
            raise ValueError(
                f"this {type(self).__name__} is not fitted; call fit(d, random_state) first"
            )

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({params})"

    def _params(self):
        return {}

    def inner(self, sums):
        """``G @ sums`` for the inner product ``G`` of the base features: the identity here."""
        return sums
