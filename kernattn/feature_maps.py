r"""Explicit feature maps for linear attention: :math:`\kappa(q, k) \approx \phi(q)^\top \phi(k)`.

With a feature map the Nadaraya–Watson estimate factorises,

.. math::

    \hat y(q) = \frac{\phi(q)^\top S}{\phi(q)^\top z}, \qquad
    S = \sum_i \phi(k_i)\, y_i^\top, \quad z = \sum_i \phi(k_i),

so the sums over the keys are taken once (see :func:`kernattn.attention.linear_attention`).

- :class:`PositiveRandomFeatures`: :math:`\phi(u) = \exp(\Omega u - \|u\|^2/2)/\sqrt r`,
  unbiased for the softmax kernel :math:`\exp(q^\top k)` (``hyperbolic=True``: the pairs
  :math:`e^{\pm\Omega u}`, same kernel, lower variance; ``A < 0``: generalised features that
  damp large frequencies, far lower variance for inputs of large norm);
- :class:`TrigonometricRandomFeatures`:
  :math:`\phi(u) = [\cos \Omega u, \sin \Omega u]/\sqrt{r/2}`,
  unbiased for the Gaussian kernel :math:`\exp(-\|q - k\|^2/2)`;
- :class:`NystroemFeatures`: the Gaussian kernel's values at m landmarks taken from the data,
  :math:`a(u)_j = \exp(-\|u - l_j\|^2/2)`, combined through the pseudo-inverse of the
  landmarks' kernel matrix (deterministic once the landmarks are chosen; accurate where the
  bandwidth is small next to the spread of the data, where random features are not);
- :class:`EluFeatureMap` (:math:`\mathrm{elu}(u) + 1`) and :class:`ReluFeatureMap`
  (:math:`\max(u, 0)`): deterministic maps that define their own kernel.

The rows :math:`\omega_j` of :math:`\Omega` are standard normal; with ``orthogonal=True``
they come in blocks of mutually orthogonal rows whose norms are drawn from the chi
distribution with :math:`d` degrees of freedom, so each row is still marginally
:math:`N(0, I)` (the estimates stay unbiased) but the rows of a block are no longer
independent, which lowers the variance.

**Variance.** The positive estimate of :math:`\exp(q^\top k)` is a mean of log-normal terms
:math:`\exp(\omega^\top(q + k) - \|q + k\|^2/2)\,\exp(q^\top k)` whose relative variance is
:math:`(\exp(\|q + k\|^2) - 1)/r`: it is accurate only for inputs of small norm. Callers
centre and scale the inputs first (``LinearAttentionRegressor`` does). The trigonometric
estimate has bounded absolute error :math:`O(r^{-1/2})` but can be negative.

References
----------
.. [1] A. Rahimi, B. Recht, "Random features for large-scale kernel machines", NeurIPS 2007.
.. [2] F. X. Yu et al., "Orthogonal random features", NeurIPS 2016.
.. [3] A. Katharopoulos et al., "Transformers are RNNs: fast autoregressive transformers with
   linear attention", ICML 2020.
.. [4] K. Choromanski et al., "Rethinking attention with Performers", ICLR 2021.
"""

import numbers

import numpy as np
from sklearn.utils import check_random_state

from kernattn._deterministic_features import EluFeatureMap, ReluFeatureMap
from kernattn._feature_base import _as_inputs, _check_dim, _check_n_features, _FeatureMap
from kernattn._nystroem import NystroemFeatures
from kernattn.attention import softmax_attention

__all__ = [
    "PositiveRandomFeatures",
    "TrigonometricRandomFeatures",
    "EluFeatureMap",
    "ReluFeatureMap",
    "NystroemFeatures",
    "make_feature_map",
    "optimal_positive_parameter",
    "kernel_approximation_error",
]

FEATURE_MAPS = ("positive", "hyperbolic", "optimal", "trig", "nystroem", "elu", "relu")


def gaussian_rows(n_rows, d, orthogonal, random_state):
    """``n_rows`` random frequencies in R^d, each marginally N(0, I).

    With ``orthogonal=True`` the rows come in blocks of ``d`` mutually orthogonal directions
    (a Haar-random orthogonal matrix) scaled by independent chi(d) norms, the norm
    distribution of a standard normal vector.
    """
    rng = check_random_state(random_state)
    if not orthogonal:
        return rng.standard_normal((n_rows, d))
    blocks = []
    for _ in range(-(-n_rows // d)):
        q, r = np.linalg.qr(rng.standard_normal((d, d)))
        # The sign fix makes q Haar distributed (QR alone is biased towards R's convention).
        q *= np.sign(np.diag(r))
        norms = np.sqrt(rng.chisquare(d, size=d))
        blocks.append(q.T * norms[:, None])
    return np.vstack(blocks)[:n_rows]


def optimal_positive_parameter(mean_sq_sum, d):
    r"""The variance-optimal :math:`A` of generalised positive features for a given data scale.

    With :math:`t = 1 - 8A`, the relative second moment of the estimate of
    :math:`\exp(q^\top k)` is :math:`((1 + t)^2 / 4t)^{d/2} \exp(\rho / t)` for
    :math:`\rho = \|q + k\|^2`; it is smallest at

    .. math::

        t^* = \frac{d/2 + \rho + \sqrt{(d/2 + \rho)^2 + 2 d \rho}}{d},

    so :math:`A^* = (1 - t^*)/8 \le 0` (:math:`A^* = 0`, plain FAVOR+, only for
    :math:`\rho = 0`). ``mean_sq_sum`` is :math:`\rho` averaged over the (query, key) pairs
    (Likhosherstov et al., 2022).

    Examples
    --------
    >>> print(optimal_positive_parameter(0.0, 4))
    0.0
    >>> bool(optimal_positive_parameter(20.0, 8) < 0)
    True
    """
    rho = float(mean_sq_sum)
    if not (np.isfinite(rho) and rho >= 0):
        raise ValueError(f"mean_sq_sum must be a finite number >= 0; got {mean_sq_sum!r}")
    half = d / 2 + rho
    t = (half + np.sqrt(half**2 + 2 * d * rho)) / d
    return float((1.0 - t) / 8.0)


class PositiveRandomFeatures(_FeatureMap):
    r"""Positive random features (FAVOR+), unbiased for the softmax kernel :math:`\exp(q^\top k)`.

    .. math::

        \phi(u) = \frac{1}{\sqrt r} \exp\!\left(\Omega u - \tfrac12 \|u\|^2\right), \qquad
        \mathbb E\left[\phi(q)^\top \phi(k)\right] = \exp(q^\top k),

    since :math:`\mathbb E[\exp(\omega^\top x)] = \exp(\|x\|^2/2)` for
    :math:`\omega \sim N(0, I)`. Every feature is positive, so the linear-attention
    denominator is positive. ``hyperbolic=True`` uses the pairs
    :math:`\exp(\pm\omega^\top u)` (an antithetic estimate of
    :math:`\cosh(\omega^\top(q + k))`, lower variance, still positive).

    **Generalised features.** With ``A < 0`` (Likhosherstov et al., 2022) each feature is
    :math:`(1 - 4A)^{d/4} \exp(A\|\omega\|^2 + B\omega^\top u - \|u\|^2/2)/\sqrt r` with
    :math:`B = \sqrt{1 - 4A}`: still positive and unbiased for :math:`\exp(q^\top k)`, but
    frequencies of large norm are damped, and the relative second moment drops from
    :math:`\exp(\|q + k\|^2)` to :math:`((1 - 4A)^2/(1 - 8A))^{d/2}
    \exp(\|q + k\|^2/(1 - 8A))` — by many orders of magnitude for inputs of large norm.
    ``A="optimal"`` takes :func:`optimal_positive_parameter` of the ``mean_sq_sum`` given to
    ``fit``.

    Parameters
    ----------
    n_features : int, default=256
        r, the number of features (even when ``hyperbolic=True``).
    orthogonal : bool, default=False
        Draw orthogonal blocks of frequencies with chi-distributed norms.
    hyperbolic : bool, default=False
    A : float or "optimal", default=0.0
        Below 1/8; 0 is FAVOR+.

    Attributes
    ----------
    omega_ : ndarray of shape (n_features_out_, d)
        The frequencies, ``[Ω; −Ω]`` when hyperbolic.
    A_ : float
        The parameter used.
    n_features_out_ : int

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking attention with Performers", ICLR 2021.
    .. [2] V. Likhosherstov et al., "Chefs' random tables: non-trigonometric random
       features", NeurIPS 2022.

    Examples
    --------
    >>> phi = PositiveRandomFeatures(n_features=20000, orthogonal=True).fit(2, random_state=0)
    >>> q, k = np.array([[0.3, -0.2]]), np.array([[0.1, 0.4]])
    >>> estimate = (phi.transform(q) @ phi.transform(k).T).item()
    >>> abs(estimate / np.exp(q @ k.T).item() - 1) < 0.02
    True
    """

    approximates = "softmax"

    def __init__(self, n_features=256, orthogonal=False, hyperbolic=False, A=0.0):
        self.n_features = n_features
        self.orthogonal = orthogonal
        self.hyperbolic = hyperbolic
        self.A = A

    def _params(self):
        return {
            "n_features": self.n_features,
            "orthogonal": self.orthogonal,
            "hyperbolic": self.hyperbolic,
            "A": self.A,
        }

    def fit(self, d, random_state=None, mean_sq_sum=None):
        """Draw the frequencies for inputs of dimension ``d``; returns self.

        ``mean_sq_sum``, the mean of ``‖q + k‖²`` over the pairs to be compared, is needed
        (only) for ``A="optimal"``.
        """
        d = _check_dim(d)
        r = _check_n_features(self.n_features, even=bool(self.hyperbolic))
        if isinstance(self.A, str) and self.A == "optimal":
            if mean_sq_sum is None:
                raise ValueError("A='optimal' needs mean_sq_sum, the mean of ‖q + k‖², in fit")
            A = optimal_positive_parameter(mean_sq_sum, d)
        elif isinstance(self.A, numbers.Real) and not isinstance(self.A, bool) and self.A < 0.125:
            A = float(self.A)
        else:
            raise ValueError(f"A must be a float below 1/8 or 'optimal'; got {self.A!r}")
        if self.hyperbolic:
            omega = gaussian_rows(r // 2, d, self.orthogonal, random_state)
            self.omega_ = np.vstack([omega, -omega])
        else:
            self.omega_ = gaussian_rows(r, d, self.orthogonal, random_state)
        self.A_ = A
        self.n_features_in_ = d
        self.n_features_out_ = r
        # log φ(u) = (Bω)ᵀu − ½‖u‖² + offset, with a per-feature offset.
        self.scaled_omega_ = np.sqrt(1.0 - 4.0 * A) * self.omega_
        self.log_offset_ = (
            A * np.sum(self.omega_**2, axis=1) + 0.25 * d * np.log1p(-4.0 * A) - 0.5 * np.log(r)
        )
        return self

    def log_transform(self, U):
        r"""``log φ(U)`` = :math:`B\Omega u - \|u\|^2/2` + a per-feature offset, shape (n, r)."""
        self._check_fitted()
        U = _as_inputs(U, self.n_features_in_)
        half_sq = 0.5 * np.einsum("ij,ij->i", U, U)
        return U @ self.scaled_omega_.T - half_sq[:, None] + self.log_offset_

    def shifted_log_transform(self, U):
        """``log φ(U)`` minus its row maximum (every row's largest entry is 0).

        The terms that depend only on the row cancel in the shift and are never formed, so
        the result stays finite for inputs whose squared norm would overflow. A ratio of
        linear-attention sums is unchanged by a per-query factor, so this is what queries use.
        """
        self._check_fitted()
        logits = _as_inputs(U, self.n_features_in_) @ self.scaled_omega_.T + self.log_offset_
        logits -= logits.max(axis=1, keepdims=True)
        return logits

    def transform(self, U):
        """φ(U), shape (n, r). For large inputs use :meth:`log_transform`."""
        return np.exp(self.log_transform(U))


class TrigonometricRandomFeatures(_FeatureMap):
    r"""Random Fourier features, unbiased for the Gaussian kernel :math:`\exp(-\|q-k\|^2/2)`.

    .. math::

        \phi(u) = \sqrt{2/r}\,\left[\cos(\Omega u), \sin(\Omega u)\right], \qquad
        \phi(q)^\top\phi(k) = \frac{2}{r}\sum_{j=1}^{r/2} \cos\!\left(\omega_j^\top (q-k)\right),

    whose mean is the characteristic function of :math:`N(0, I)` at :math:`q - k`. The
    features are signed: the estimate can be negative, and so can a linear-attention
    denominator (estimators detect it and compute those rows exactly).

    Parameters
    ----------
    n_features : int, default=256
        r, even: r/2 frequencies, each giving a [cos, sin] pair.
    orthogonal : bool, default=False

    Attributes
    ----------
    omega_ : ndarray of shape (n_features_out_ // 2, d)
    n_features_out_ : int

    Examples
    --------
    >>> phi = TrigonometricRandomFeatures(n_features=2).fit(3, random_state=0)
    >>> u = np.array([[0.5, -1.0, 2.0]])
    >>> print(float((phi.transform(u) @ phi.transform(u).T).item()))
    1.0
    """

    approximates = "gaussian"
    signed = True

    def __init__(self, n_features=256, orthogonal=False):
        self.n_features = n_features
        self.orthogonal = orthogonal

    def _params(self):
        return {"n_features": self.n_features, "orthogonal": self.orthogonal}

    def fit(self, d, random_state=None):
        """Draw the frequencies for inputs of dimension ``d``; returns self."""
        d = _check_dim(d)
        r = _check_n_features(self.n_features, even=True)
        self.omega_ = gaussian_rows(r // 2, d, self.orthogonal, random_state)
        self.n_features_in_ = d
        self.n_features_out_ = r
        return self

    def transform(self, U):
        """φ(U), shape (n, r)."""
        self._check_fitted()
        angles = _as_inputs(U, self.n_features_in_) @ self.omega_.T
        return np.hstack([np.cos(angles), np.sin(angles)]) / np.sqrt(len(self.omega_))


def make_feature_map(feature_map="positive", n_features=256, orthogonal=False):
    """An unfitted feature map from its name.

    Parameters
    ----------
    feature_map : {"positive", "hyperbolic", "optimal", "trig", "nystroem", "elu", "relu"}
        "optimal" is positive features with ``A="optimal"`` (fit needs ``mean_sq_sum``);
        "nystroem" is :class:`NystroemFeatures` (fit needs sample ``keys``).
    n_features : int
        r, for the random maps and the Nyström map (elu and relu have r = d).
    orthogonal : bool
        For the random maps.
    """
    if feature_map == "positive":
        return PositiveRandomFeatures(n_features, orthogonal=orthogonal)
    if feature_map == "hyperbolic":
        return PositiveRandomFeatures(n_features, orthogonal=orthogonal, hyperbolic=True)
    if feature_map == "optimal":
        return PositiveRandomFeatures(n_features, orthogonal=orthogonal, A="optimal")
    if feature_map == "trig":
        return TrigonometricRandomFeatures(n_features, orthogonal=orthogonal)
    if feature_map == "nystroem":
        return NystroemFeatures(n_features)
    if feature_map == "elu":
        return EluFeatureMap()
    if feature_map == "relu":
        return ReluFeatureMap()
    raise ValueError(
        f"feature_map must be one of {', '.join(map(repr, FEATURE_MAPS))} or a feature-map "
        f"object with fit(d, random_state) and transform(U); got {feature_map!r}"
    )


def kernel_approximation_error(
    Q, K, V=None, *, feature_map="positive", n_features=256, orthogonal=False, random_state=None
):
    r"""How well ``φ(q)ᵀφ(k)`` reproduces its kernel, and linear attention softmax attention.

    The exact kernel is the one the map estimates: :math:`\exp(q^\top k)` for positive
    features, :math:`\exp(-\|q - k\|^2/2)` for trigonometric ones, and for a deterministic
    map (elu, relu) the softmax kernel :math:`\exp(q^\top k)` it replaces. Softmax attention
    is taken with that kernel (scale 1).

    Parameters
    ----------
    Q : array_like of shape (n_queries, d)
    K : array_like of shape (n_keys, d)
    V : array_like of shape (n_keys,) or (n_keys, d_v), optional
        Values for the attention comparison.
    feature_map : str or feature-map object, default="positive"
        A name as in :func:`make_feature_map`, or an object (fitted or not; an unfitted one
        is fitted here with ``random_state``).
    n_features, orthogonal : int, bool
        For a named random map.
    random_state : int, RandomState or None

    Returns
    -------
    errors : dict
        ``kernel_error``: :math:`\|\hat K - K\|_F / \|K\|_F` over all (query, key) pairs;
        ``kernel_rmse``: the root-mean-square of :math:`\hat K - K`; and with ``V`` given,
        ``output_rmse``: the root-mean-square difference of the two attention outputs over
        the queries whose linear-attention denominator is positive, and
        ``n_nonpositive``: how many queries had a denominator :math:`\le 0` (left out).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> Q, K = 0.3 * rng.standard_normal((5, 4)), 0.3 * rng.standard_normal((50, 4))
    >>> err = kernel_approximation_error(Q, K, K[:, 0], n_features=4096, random_state=0)
    >>> bool(err["kernel_error"] < 0.05), bool(err["output_rmse"] < 0.05)
    (True, True)
    """
    Q = np.atleast_2d(np.asarray(Q, dtype=float))
    K = np.atleast_2d(np.asarray(K, dtype=float))
    if Q.shape[1] != K.shape[1]:
        raise ValueError(
            f"Q and K must have the same number of columns; got {Q.shape[1]} and {K.shape[1]}"
        )
    phi = (
        make_feature_map(feature_map, n_features, orthogonal)
        if isinstance(feature_map, str)
        else feature_map
    )
    if not hasattr(phi, "n_features_out_"):
        if getattr(phi, "A", None) == "optimal":
            # The mean of ‖q + k‖² over all pairs, from the means and mean squared norms.
            rho = (
                np.mean(np.sum(Q**2, axis=1))
                + np.mean(np.sum(K**2, axis=1))
                + 2 * Q.mean(axis=0) @ K.mean(axis=0)
            )
            phi.fit(Q.shape[1], random_state, mean_sq_sum=rho)
        elif isinstance(phi, NystroemFeatures):
            phi.fit(Q.shape[1], random_state, keys=K)
        else:
            phi.fit(Q.shape[1], random_state)
    logits = Q @ K.T
    key_bias = None
    if phi.approximates == "gaussian":
        key_bias = -0.5 * np.einsum("ij,ij->i", K, K)
        logits += key_bias - 0.5 * np.einsum("ij,ij->i", Q, Q)[:, None]
    exact = np.exp(logits)
    phi_Q, phi_K = phi.transform(Q), phi.transform(K)
    diff = phi_Q @ phi_K.T - exact
    errors = {
        "kernel_error": float(np.linalg.norm(diff) / np.linalg.norm(exact)),
        "kernel_rmse": float(np.sqrt(np.mean(diff**2))),
    }
    if V is not None:
        V2 = np.asarray(V, dtype=float).reshape(len(K), -1)
        reference = softmax_attention(Q, K, V2, scale=1.0, key_bias=key_bias)
        denominator = phi_Q @ phi_K.sum(axis=0)
        good = denominator > 0
        linear = (phi_Q[good] @ (phi_K.T @ V2)) / denominator[good, None]
        errors["output_rmse"] = (
            float(np.sqrt(np.mean((linear - reference[good]) ** 2))) if good.any() else np.inf
        )
        errors["n_nonpositive"] = int((~good).sum())
    return errors
