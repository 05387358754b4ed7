r"""The feature-map protocol: :class:`FeatureMap`, the base class of every map.

A feature map is fitted once, on the (projected) keys, and then turns inputs :math:`U` of
shape (n, d) into features of shape (n, r) whose inner products give a kernel,
:math:`\kappa(q, k) \approx \phi(q)^\top \phi(k)`. Every map is fitted the same way,
``fit(keys, *, queries=None, sample_weight=None, random_state=None)``: a map that does not
look at the data takes only the input dimension ``d = keys.shape[1]`` from the keys.
"""

import abc
import numbers

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from kernattn._core.sums import shift_of


class FeatureMap(BaseEstimator, abc.ABC):
    r"""Base class of the feature maps: ``fit`` on the keys, then ``transform`` inputs.

    A feature map :math:`\phi : \mathbb R^d \to \mathbb R^r` stands for a kernel through
    :math:`\kappa(q, k) \approx \phi(q)^\top \phi(k)`, so that the Nadaraya–Watson estimate
    :math:`\phi(q)^\top \sum_i \phi(k_i) y_i^\top / \phi(q)^\top \sum_i \phi(k_i)` needs the
    sums over the keys only once. The class attributes say what kind of map it is, so that
    callers never test for methods or signatures:

    - ``approximates``: ``"softmax"`` when :math:`\mathbb E[\phi(q)^\top\phi(k)] =
      \exp(q^\top k)`, ``"gaussian"`` for :math:`\exp(-\|q - k\|^2/2)`, or ``None`` when the
      map defines a kernel of its own;
    - ``signed``: features, hence estimates and denominators, can be negative;
    - ``random``: the features are random draws, so the r terms of a denominator
      :math:`\phi(q)^\top z` are samples whose spread estimates its error;
    - ``log_domain``: :meth:`log_transform` is implemented (the map is positive and can be
      evaluated in log space, where large inputs do not overflow).

    Some maps estimate :math:`a(q)^\top G\, a(k)` for base features :math:`a` and a fixed
    matrix :math:`G` (the Nyström map); :meth:`log_transform` then gives :math:`\log a`,
    and :meth:`inner` applies :math:`G` to sums of base features over the keys. For the
    other maps :math:`\phi = a` and :math:`G = I`.

    A subclass sets the class attributes, implements :meth:`transform` and a private
    ``_fit(keys, queries, sample_weight, random_state)`` that receives validated arrays and a
    ``numpy.random.RandomState`` and sets ``n_components_`` and the map's own fitted
    attributes; :meth:`fit` does the rest.

    Attributes
    ----------
    n_components_ : int
        r, the number of output features.
    n_features_in_ : int
        d, the input dimension.

    See Also
    --------
    kernattn.feature_maps.check_feature_map : validate a ``feature_map`` parameter.

    Examples
    --------
    The identity map, whose kernel is the dot product :math:`q^\top k`:

    >>> class IdentityFeatures(FeatureMap):
    ...     random = False
    ...     signed = True
    ...     def _fit(self, keys, queries, sample_weight, random_state):
    ...         self.n_components_ = keys.shape[1]
    ...     def transform(self, U):
    ...         return self._check_input(U)
    >>> phi = IdentityFeatures().fit(np.zeros((1, 2)))
    >>> phi.n_components_, phi.n_features_in_
    (2, 2)
    >>> phi.transform([[1.0, -2.0]]) @ phi.transform([[3.0, 1.0]]).T
    array([[1.]])
    """

    #: The kernel the features estimate in mean: "softmax" (exp(qᵀk)), "gaussian"
    #: (exp(-‖q-k‖²/2)), or None when the map defines its own kernel.
    approximates = None
    #: Whether features can be negative (then so can a linear-attention denominator).
    signed = False
    #: Whether the features are random draws (the terms of a denominator are samples).
    random = True
    #: Whether log_transform is implemented.
    log_domain = False

    def fit(self, keys, *, queries=None, sample_weight=None, random_state=None):
        """Fit the map to the keys (or only to their dimension); returns self.

        Parameters
        ----------
        keys : array_like of shape (n, d)
            Training keys (projected, as the map will see them), or a sample of them. A map
            that does not depend on the data uses only their width d; n may then be 0.
        queries : array_like of shape (m, d), default=None
            The queries the map will be used on; ``None`` means the keys. Only the
            generalised positive map with ``A="optimal"`` uses them.
        sample_weight : array_like of shape (n,), default=None
            Non-negative weights of the keys (and of the queries when they are the same rows:
            ``queries`` None or as many as the keys).
        random_state : int, RandomState instance or None, default=None
            Seeds the draws (through :func:`sklearn.utils.check_random_state`). A
            ``RandomState`` instance is used as is and advanced by the draws, so fitting
            several maps from one instance gives a reproducible sequence.

        Returns
        -------
        self : FeatureMap
            The fitted map, with ``n_components_`` and ``n_features_in_`` set.
        """
        keys = self._check_fit_array(keys, "keys")
        d = keys.shape[1]
        if queries is not None:
            queries = self._check_fit_array(queries, "queries", d)
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, dtype=float)
            if (
                sample_weight.shape != (len(keys),)
                or not np.all(np.isfinite(sample_weight))
                or np.any(sample_weight < 0)
            ):
                raise ValueError(
                    f"sample_weight must be None or an array of shape ({len(keys)},) of finite "
                    f"non-negative numbers, one per key; got shape {sample_weight.shape}"
                )
        self._fit(keys, queries, sample_weight, check_random_state(random_state))
        self.n_features_in_ = d
        return self

    def _fit(self, keys, queries, sample_weight, random_state):
        raise NotImplementedError(
            f"{type(self).__name__} must implement _fit(keys, queries, sample_weight, "
            "random_state) or override fit"
        )

    @abc.abstractmethod
    def transform(self, U):
        """The features φ(U), of shape (n, ``n_components_``)."""

    def log_transform(self, U):
        """The log of the base features a(U), of shape (n, ``n_components_``).

        Implemented by the maps whose ``log_domain`` is True.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no log_transform (its log_domain is False)"
        )

    def shifted_log_transform(self, U):
        """:meth:`log_transform` minus each row's maximum (every row's largest entry is 0).

        A ratio of linear-attention sums is unchanged by a factor that depends only on the
        query, so queries can use these instead of the log features.
        """
        logs = self.log_transform(U)
        # A row whose features are all 0 (log -inf) is shifted by 0, not to NaN.
        logs -= shift_of(logs, axis=1)
        return logs

    def inner(self, sums):
        """``G @ sums`` for an estimate ``a(q)ᵀ G a(k)``: ``sums`` itself here (G = I)."""
        return sums

    def covered(self, U):
        """Which rows of ``U`` the map resolves: all of them here, shape (n,) bool."""
        return np.ones(len(self._check_input(U)), dtype=bool)

    # ------------------------------------------------------------ for subclasses

    def _check_fitted(self):
        """Raise sklearn's ``NotFittedError``, naming the class, before ``fit``."""
        check_is_fitted(
            self,
            "n_components_",
            msg="This %(name)s instance is not fitted yet: call fit(keys) before using it.",
        )

    def _check_input(self, U):
        """``U`` as a float array of shape (n, n_features_in_), once the map is fitted."""
        self._check_fitted()
        U = np.asarray(U, dtype=float)
        d = self.n_features_in_
        if U.ndim != 2 or U.shape[1] != d:
            raise ValueError(
                f"{type(self).__name__} was fitted on inputs of shape (n, {d}); got an "
                f"array of shape {U.shape}"
            )
        return U

    @staticmethod
    def _check_fit_array(array, name, d=None):
        array = np.asarray(array, dtype=float)
        if d is None and (array.ndim != 2 or array.shape[1] < 1):
            raise ValueError(
                f"{name} must be a 2-D array of shape (n, d) with input dimension d >= 1; "
                f"got shape {array.shape}"
            )
        if d is not None and (array.ndim != 2 or array.shape[1] != d):
            raise ValueError(
                f"{name} must be an array of shape (n, {d}), as wide as the keys; got shape "
                f"{array.shape}"
            )
        if not np.all(np.isfinite(array)):
            raise ValueError(f"the {name} given to fit must be finite (no NaN or infinity)")
        return array

    def _check_n_components(self, even=False):
        """``self.n_components`` as an int, or a ValueError naming it."""
        n = self.n_components
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < (2 if even else 1):
            kind = "a positive even integer" if even else "a positive integer"
            raise ValueError(f"n_components must be {kind}; got {n!r}")
        if even and n % 2:
            raise ValueError(f"n_components must be a positive even integer; got {n!r}")
        return int(n)
