r"""Random features: positive (FAVOR+ and its generalisations) and trigonometric.

Both draw frequencies :math:`\omega_j \sim N(0, I_d)` (:func:`gaussian_rows`) and estimate a
kernel by a mean over them: positive features estimate the softmax kernel
:math:`\exp(q^\top k)`, trigonometric ones the Gaussian kernel :math:`\exp(-\|q - k\|^2/2)`.
"""

import numbers

import numpy as np
from sklearn.utils import check_random_state

from kernattn._core.sums import shift_of
from kernattn.feature_maps._base import FeatureMap


def gaussian_rows(n_rows, d, orthogonal, random_state):
    r"""``n_rows`` random frequencies in :math:`\mathbb R^d`, each marginally :math:`N(0, I)`.

    With ``orthogonal=True`` the rows come in blocks of ``d`` mutually orthogonal directions
    (a Haar-random orthogonal matrix) scaled by independent :math:`\chi_d` norms, the norm
    distribution of a standard normal vector (Yu et al., 2016). Each row is still
    :math:`N(0, I)`, so estimates stay unbiased, but the rows of a block are no longer
    independent, which lowers their variance.

    Parameters
    ----------
    n_rows, d : int
    orthogonal : bool
    random_state : int, RandomState instance or None

    Returns
    -------
    omega : ndarray of shape (n_rows, d)

    Examples
    --------
    >>> omega = gaussian_rows(3, 3, orthogonal=True, random_state=0)
    >>> gram = omega @ omega.T
    >>> bool(np.allclose(gram, np.diag(np.diag(gram))))
    True
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

    Parameters
    ----------
    mean_sq_sum : float
        The mean of :math:`\|q + k\|^2`, at least 0.
    d : int
        The input dimension.

    Returns
    -------
    A : float

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


def _mean_sq_sum(keys, queries, sample_weight):
    """The mean of ‖q + k‖² over all (query, key) pairs, from per-side means."""
    # Queries of the same rows as the keys (the training set seen from both sides) share
    # their weights; other queries count equally.
    same_rows = queries is None or len(queries) == len(keys)
    query_weight = sample_weight if same_rows else None
    queries = keys if queries is None else queries
    no_weight = sample_weight is not None and not sample_weight.sum() > 0
    if not len(keys) or not len(queries) or no_weight:
        raise ValueError(
            "A='optimal' needs mean_sq_sum, the mean of ‖q + k‖² over (query, key) pairs: fit "
            "it on at least one key and one query, with sample_weight not all zero"
        )
    # mean‖q + k‖² = mean‖q‖² + mean‖k‖² + 2 mean(q)·mean(k) for independent q and k.
    mean_sq = [
        np.average(np.sum(U**2, axis=1), weights=w)
        for U, w in ((queries, query_weight), (keys, sample_weight))
    ]
    cross = np.average(queries, axis=0, weights=query_weight) @ np.average(
        keys, axis=0, weights=sample_weight
    )
    return sum(mean_sq) + 2 * cross


class PositiveRandomFeatures(FeatureMap):
    r"""Positive random features (FAVOR+), unbiased for the softmax kernel :math:`\exp(q^\top k)`.

    .. math::

        \phi(u) = \frac{1}{\sqrt r} \exp\!\left(\Omega u - \tfrac12 \|u\|^2\right), \qquad
        \mathbb E\left[\phi(q)^\top \phi(k)\right] = \exp(q^\top k),

    since :math:`\mathbb E[\exp(\omega^\top x)] = \exp(\|x\|^2/2)` for
    :math:`\omega \sim N(0, I)` (Choromanski et al., 2021). Every feature is positive, so
    the linear-attention denominator is positive. ``hyperbolic=True`` uses the pairs
    :math:`\exp(\pm\omega^\top u)` (an antithetic estimate of
    :math:`\cosh(\omega^\top(q + k))`, lower variance, still positive).

    The estimate is a mean of log-normal terms with relative variance
    :math:`(\exp(\|q + k\|^2) - 1)/r`: accurate only for inputs of small norm.

    **Accuracy in Nadaraya–Watson.** In kernel units (inputs divided by the bandwidth)
    :math:`\|q + k\|^2` grows with the spread of the data over the bandwidth, so these
    features are accurate only at bandwidths that are not small next to that spread. On the
    8-feature task of ``examples/benchmarks/bench_linear.py`` at its leave-one-out bandwidths
    (0.16–0.35 on the relevant features), with r = 256 and n = 50 000, linear attention with
    them has about 15 times the exact smoother's test MSE (12 times with ``A="optimal"``);
    Nyström features with an exact near field (the default of
    :class:`~kernattn.LinearAttentionRegressor`) are within 1 %.

    **Generalised features.** With ``A < 0`` (Likhosherstov et al., 2022) each feature is
    :math:`(1 - 4A)^{d/4} \exp(A\|\omega\|^2 + B\omega^\top u - \|u\|^2/2)/\sqrt r` with
    :math:`B = \sqrt{1 - 4A}`: still positive and unbiased for :math:`\exp(q^\top k)`, but
    frequencies of large norm are damped, and the relative second moment drops from
    :math:`\exp(\|q + k\|^2)` to :math:`((1 - 4A)^2/(1 - 8A))^{d/2}
    \exp(\|q + k\|^2/(1 - 8A))` — by many orders of magnitude for inputs of large norm.
    ``A="optimal"`` takes :func:`optimal_positive_parameter` of the mean of
    :math:`\|q + k\|^2` over the queries and keys given to ``fit``.

    Parameters
    ----------
    n_components : int, default=256
        r, the number of features (with ``hyperbolic=True``, pairs ±ω; an odd r keeps
        one feature of the last pair).
    orthogonal : bool, default=True
        Draw orthogonal blocks of frequencies with chi-distributed norms
        (:func:`gaussian_rows`).
    hyperbolic : bool, default=False
        Use the antithetic pairs :math:`\exp(\pm\omega^\top u)`.
    A : float or "optimal", default=0.0
        Below 1/8; 0 is FAVOR+.

    Attributes
    ----------
    omega_ : ndarray of shape (``n_components_``, ``n_features_in_``)
        The frequencies :math:`\Omega`, ``[Ω; −Ω]`` when hyperbolic.
    A_ : float
        The parameter used.
    scaled_omega_ : ndarray of shape (``n_components_``, ``n_features_in_``)
        :math:`B\Omega`.
    log_offset_ : ndarray of shape (``n_components_``,)
        The per-feature constant of the log features,
        :math:`A\|\omega_j\|^2 + \tfrac d4 \log(1 - 4A) - \tfrac12 \log r`.
    n_components_ : int
        r.
    n_features_in_ : int
        d.

    See Also
    --------
    TrigonometricRandomFeatures : random features of the Gaussian kernel.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking attention with Performers", ICLR 2021.
    .. [2] V. Likhosherstov et al., "Chefs' random tables: non-trigonometric random
       features", NeurIPS 2022.

    Examples
    --------
    >>> phi = PositiveRandomFeatures(n_components=20000).fit(np.zeros((1, 2)), random_state=0)
    >>> q, k = np.array([[0.3, -0.2]]), np.array([[0.1, 0.4]])
    >>> estimate = (phi.transform(q) @ phi.transform(k).T).item()
    >>> abs(estimate / np.exp(q @ k.T).item() - 1) < 0.02
    True
    """

    approximates = "softmax"
    log_domain = True

    def __init__(self, n_components=256, orthogonal=True, hyperbolic=False, A=0.0):
        self.n_components = n_components
        self.orthogonal = orthogonal
        self.hyperbolic = hyperbolic
        self.A = A

    def _fit(self, keys, queries, sample_weight, random_state):
        d = keys.shape[1]
        r = self._check_n_components()
        if isinstance(self.A, str) and self.A == "optimal":
            A = optimal_positive_parameter(_mean_sq_sum(keys, queries, sample_weight), d)
        elif isinstance(self.A, numbers.Real) and not isinstance(self.A, bool) and self.A < 0.125:
            A = float(self.A)
        else:
            raise ValueError(f"A must be a float below 1/8 or 'optimal'; got {self.A!r}")
        if self.hyperbolic:
            # Pairs ±ω; an odd r keeps one feature of the last pair. Every feature is
            # unbiased on its own (ω and −ω are equally likely), so any r keeps the mean.
            omega = gaussian_rows((r + 1) // 2, d, self.orthogonal, random_state)
            self.omega_ = np.vstack([omega, -omega])
            if r % 2:
                self.omega_ = np.delete(self.omega_, len(omega) - 1, axis=0)
        else:
            self.omega_ = gaussian_rows(r, d, self.orthogonal, random_state)
        self.A_ = A
        # log φ(u) = (Bω)ᵀu − ½‖u‖² + offset, with a per-feature offset.
        self.scaled_omega_ = np.sqrt(1.0 - 4.0 * A) * self.omega_
        self.log_offset_ = (
            A * np.sum(self.omega_**2, axis=1) + 0.25 * d * np.log1p(-4.0 * A) - 0.5 * np.log(r)
        )
        self.n_components_ = r

    def log_transform(self, U):
        r"""``log φ(U)`` = :math:`B\Omega u - \|u\|^2/2` + a per-feature offset, shape (n, r)."""
        U = self._check_input(U)
        half_sq = 0.5 * np.einsum("ij,ij->i", U, U)
        return U @ self.scaled_omega_.T - half_sq[:, None] + self.log_offset_

    def shifted_log_transform(self, U):
        """``log φ(U)`` minus its row maximum (every row's largest entry is 0).

        The term that depends only on the row cancels in the shift and is never formed, so
        the result stays finite for inputs whose squared norm would overflow.
        """
        logits = self._check_input(U) @ self.scaled_omega_.T + self.log_offset_
        logits -= shift_of(logits, axis=1)
        return logits

    def transform(self, U):
        r"""φ(U), shape (n, r).

        The factor :math:`e^{-\|u\|^2/2}` underflows to 0 for inputs of norm above about
        38 (float64), and then every feature of the row is 0: for inputs of large norm use
        :meth:`log_transform`, with the queries' and keys' constants taken out as
        :func:`kernattn.attention.linear_attention` describes.
        """
        return np.exp(self.log_transform(U))


class TrigonometricRandomFeatures(FeatureMap):
    r"""Random Fourier features, unbiased for the Gaussian kernel :math:`\exp(-\|q-k\|^2/2)`.

    .. math::

        \phi(u) = \sqrt{2/r}\,\left[\cos(\Omega u), \sin(\Omega u)\right], \qquad
        \phi(q)^\top\phi(k) = \frac{2}{r}\sum_{j=1}^{r/2} \cos\!\left(\omega_j^\top (q-k)\right),

    whose mean is the characteristic function of :math:`N(0, I)` at :math:`q - k`
    (Rahimi & Recht, 2007). The error is bounded, :math:`O(r^{-1/2})`, but the features are
    signed: the estimate can be negative, and so can a linear-attention denominator.

    **Accuracy in Nadaraya–Watson.** The absolute error :math:`O(r^{-1/2})` is the same for
    every pair, while at a small bandwidth (in kernel units, a large spread of the data) the
    kernel values that matter are far smaller: the denominator :math:`\phi(q)^\top z` is
    then within noise of 0 for most queries, which
    :class:`~kernattn.LinearAttentionRegressor` computes exactly, against every key (it warns
    with a ``NotLinearTimeWarning`` when they are over 10 %). Use them at bandwidths that are
    not small next to the spread of the data.

    Parameters
    ----------
    n_components : int, default=256
        r: r // 2 frequencies, each giving a [cos, sin] pair, and for an odd r one more
        frequency with a random phase b giving :math:`\cos(\omega^\top u + b)`.
    orthogonal : bool, default=True
        Draw orthogonal blocks of frequencies with chi-distributed norms
        (:func:`gaussian_rows`).

    Attributes
    ----------
    omega_ : ndarray of shape (``n_components_ // 2``, ``n_features_in_``)
        The frequencies.
    n_components_ : int
        r.
    n_features_in_ : int
        d.

    See Also
    --------
    PositiveRandomFeatures : positive random features of the softmax kernel.
    sklearn.kernel_approximation.RBFSampler : the same idea with a random phase.

    References
    ----------
    .. [1] A. Rahimi, B. Recht, "Random features for large-scale kernel machines",
       NeurIPS 2007.

    Examples
    --------
    >>> phi = TrigonometricRandomFeatures(n_components=2).fit(np.zeros((1, 3)), random_state=0)
    >>> u = np.array([[0.5, -1.0, 2.0]])
    >>> print(float((phi.transform(u) @ phi.transform(u).T).item()))
    1.0
    """

    approximates = "gaussian"
    signed = True

    def __init__(self, n_components=256, orthogonal=True):
        self.n_components = n_components
        self.orthogonal = orthogonal

    def _fit(self, keys, queries, sample_weight, random_state):
        r = self._check_n_components()
        # r // 2 frequencies give [cos, sin] pairs; an odd r adds one frequency with a random
        # phase b: E[2 cos(ωᵀq + b) cos(ωᵀk + b)] is the kernel, so it carries one share of r.
        self.omega_ = gaussian_rows(r // 2 + r % 2, keys.shape[1], self.orthogonal, random_state)
        self.phase_ = random_state.uniform(0.0, 2.0 * np.pi) if r % 2 else None
        self.n_components_ = r

    def transform(self, U):
        """φ(U), shape (n, r)."""
        angles = self._check_input(U) @ self.omega_.T
        pairs = self.n_components_ // 2
        columns = [np.cos(angles[:, :pairs]), np.sin(angles[:, :pairs])]
        if self.phase_ is not None:
            columns.append(np.cos(angles[:, pairs:] + self.phase_))
        return np.hstack(columns) / np.sqrt(self.n_components_ / 2)
