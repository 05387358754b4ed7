r"""Nyström features: the Gaussian kernel through its values at landmarks taken from the data.

With landmarks :math:`l_1, \dots, l_m` and :math:`a(u) = [\exp(-\|u - l_j\|^2/2)]_j`,

.. math::

    \kappa(q, k) \approx a(q)^\top G\, a(k), \qquad G = K_{mm}^{+}, \quad
    (K_{mm})_{jl} = \exp(-\|l_j - l_l\|^2/2),

the Nyström approximation (Williams & Seeger, 2001): the kernel projected onto the span of
the landmarks' kernel functions. It is exact when :math:`q` or :math:`k` is a landmark, and
good wherever the data sit close to landmarks in kernel units. Random features spread their
r features over all of :math:`\mathbb R^d` and need :math:`\|q\|, \|k\|` small; landmarks are
put where the data are, so r of them resolve a kernel whose bandwidth is small next to the
spread of the data (Xiong et al., 2021, use the same idea for softmax attention).
"""

import numbers

import numpy as np
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from kernattn._core.sums import shift_of
from kernattn.feature_maps._base import FeatureMap
from kernattn.kernels import squared_distances

LANDMARKS = ("kmeans", "random")
# Queries farther than this from every landmark (in kernel units, where the kernel at the
# nearest landmark is below exp(-18) ≈ 1.5e-8) are not covered: their estimate would be a
# signed blend of the sums at one landmark, not a local average.
COVER_RADIUS = 6.0


class NystroemFeatures(FeatureMap):
    r"""Nyström features of the Gaussian kernel :math:`\exp(-\|q - k\|^2/2)`.

    The base features are the kernel's values at m landmarks,
    :math:`a(u)_j = \exp(-\|u - l_j\|^2/2)`, and the estimate is

    .. math::

        \kappa(q, k) \approx a(q)^\top G\, a(k), \qquad G = K_{mm}^{+},

    with :math:`K_{mm}` the landmarks' kernel matrix (Williams & Seeger, 2001). As a feature
    map, :math:`\phi(u) = G^{1/2} a(u)`, so :math:`\phi(q)^\top \phi(k)` is the same
    estimate; linear attention instead sums the base features over the keys and applies
    :math:`G` once to the sums (:meth:`inner`), so each key and query costs O(m d), as for
    random features.

    The landmarks come from the keys given to ``fit``: k-means centers (the default, which
    spreads them over the data, weighted by ``sample_weight``) or a random subset of the
    distinct keys. Eigenvalues of the landmarks' kernel matrix below ``rcond`` times the
    largest are dropped, which keeps :math:`G` bounded when landmarks nearly coincide in
    kernel units (a bandwidth large next to their spacing).

    A query farther than ``COVER_RADIUS`` = 6 (kernel units) from every landmark is not
    :meth:`covered`: the estimate there is an extrapolation, and estimators compute it
    exactly.

    The estimate is deterministic once the landmarks are chosen, and signed: :math:`G` has
    entries of both signs, so the estimate, the implied attention weights and a
    linear-attention denominator can be negative.

    Parameters
    ----------
    n_components : int, default=256
        m, the number of landmarks (fewer when the keys have fewer distinct rows).
    landmarks : {"kmeans", "random"} or array_like of shape (m, d), default="kmeans"
        How the landmarks are chosen among the keys, or the landmarks themselves (then the
        keys give only the input dimension).
    rcond : float, default=1e-10
        Relative cut-off for the eigenvalues of the landmarks' kernel matrix.

    Attributes
    ----------
    landmarks_ : ndarray of shape (``n_components_``, ``n_features_in_``)
        The landmarks :math:`l_j`.
    inner_matrix_ : ndarray of shape (``n_components_``, ``n_components_``)
        :math:`G = K_{mm}^{+}`.
    rank_ : int
        Eigenvalues kept in the pseudo-inverse.
    n_components_ : int
        m, the number of landmarks.
    n_features_in_ : int
        d.

    See Also
    --------
    sklearn.kernel_approximation.Nystroem : the same approximation for kernel methods.

    References
    ----------
    .. [1] C. K. I. Williams, M. Seeger, "Using the Nyström method to speed up kernel
       machines", NeurIPS 2001.
    .. [2] Y. Xiong et al., "Nyströmformer: a Nyström-based algorithm for approximating
       self-attention", AAAI 2021.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> keys = rng.standard_normal((500, 2))
    >>> phi = NystroemFeatures(n_components=100).fit(keys, random_state=0)
    >>> q, k = keys[:1], keys[1:2]
    >>> estimate = (phi.transform(q) @ phi.transform(k).T).item()
    >>> exact = np.exp(-0.5 * np.sum((q - k) ** 2))
    >>> bool(abs(estimate - exact) < 1e-3)
    True
    """

    approximates = "gaussian"
    signed = True
    random = False
    log_domain = True

    def __init__(self, n_components=256, landmarks="kmeans", rcond=1e-10):
        self.n_components = n_components
        self.landmarks = landmarks
        self.rcond = rcond

    def _fit(self, keys, queries, sample_weight, random_state):
        m = self._check_n_components()
        if not (isinstance(self.rcond, numbers.Real) and 0 <= self.rcond < 1):
            raise ValueError(f"rcond must be a number in [0, 1); got {self.rcond!r}")
        d = keys.shape[1]
        if isinstance(self.landmarks, str):
            if self.landmarks not in LANDMARKS:
                raise ValueError(
                    f"landmarks must be one of {LANDMARKS} or an array of shape (m, {d}); got "
                    f"{self.landmarks!r}"
                )
            if not len(keys):
                raise ValueError(
                    "NystroemFeatures chooses its landmarks among the keys: call fit(keys=U) "
                    "with U of shape (n, d), n >= 1, or give the landmarks; got 0 keys"
                )
            landmarks = self._choose(keys, m, random_state, sample_weight)
        else:
            landmarks = np.asarray(self.landmarks, dtype=float)
            if landmarks.ndim != 2 or landmarks.shape[1] != d:
                raise ValueError(
                    f"landmarks must be an array of shape (n, {d}), as wide as the keys; got "
                    f"shape {landmarks.shape}"
                )
            if not len(landmarks):
                raise ValueError("landmarks must hold at least one row")
            if not np.all(np.isfinite(landmarks)):
                raise ValueError("the landmarks must be finite")
        # Landmarks beyond the float range (a bandwidth near 1e-300) have infinite
        # distances: their kernel is 0 (and 1 with themselves).
        with np.errstate(over="ignore", invalid="ignore"):
            gram = np.exp(-0.5 * squared_distances(landmarks, landmarks))
        gram = np.nan_to_num(gram, nan=0.0)
        np.fill_diagonal(gram, 1.0)
        eigenvalues, vectors = np.linalg.eigh(gram)
        keep = eigenvalues > self.rcond * eigenvalues[-1]
        vectors, eigenvalues = vectors[:, keep], eigenvalues[keep]
        self.landmarks_ = landmarks
        self.inner_matrix_ = (vectors / eigenvalues) @ vectors.T
        self._sqrt_inner = (vectors / np.sqrt(eigenvalues)) @ vectors.T
        self._half_sq_landmarks = 0.5 * np.einsum("ij,ij->i", landmarks, landmarks)
        self.rank_ = int(keep.sum())
        self.n_components_ = len(landmarks)

    def _choose(self, keys, m, rng, sample_weight):
        """``m`` landmarks among ``keys`` (all the distinct keys if there are no more)."""
        distinct = np.unique(keys, axis=0)
        if len(distinct) <= m:
            return distinct
        if self.landmarks == "random":
            return distinct[np.sort(rng.choice(len(distinct), m, replace=False))]
        kmeans = KMeans(n_clusters=m, n_init=1, random_state=rng.randint(2**31 - 1))
        # A subsample of keys: OpenMP threads would wait on each other more than they
        # compute (much more on a busy machine).
        with threadpool_limits(limits=1, user_api="openmp"):
            return kmeans.fit(keys, sample_weight=sample_weight).cluster_centers_

    def covered(self, U):
        """Which rows of ``U`` lie within ``COVER_RADIUS`` (6) of some landmark.

        Elsewhere every base feature is below about 1.5e-8 of its peak and the estimate is
        an extrapolation; estimators compute those queries exactly.
        """
        nearest = squared_distances(self._check_input(U), self.landmarks_).min(axis=1)
        return nearest <= COVER_RADIUS**2

    def log_transform(self, U):
        r"""``log a(U)``, the log of the base features :math:`\exp(-\|u - l_j\|^2/2)`."""
        U = self._check_input(U)
        logs = U @ self.landmarks_.T
        logs -= self._half_sq_landmarks
        logs -= 0.5 * np.einsum("ij,ij->i", U, U)[:, None]
        return logs

    def shifted_log_transform(self, U):
        """``log a(U)`` minus its row maximum (the query-only term is never formed)."""
        logs = self._check_input(U) @ self.landmarks_.T
        logs -= self._half_sq_landmarks
        logs -= shift_of(logs, axis=1)
        return logs

    def transform(self, U):
        r"""φ(U) = :math:`G^{1/2} a(U)`, shape (n, m)."""
        return np.exp(self.log_transform(U)) @ self._sqrt_inner

    def inner(self, sums):
        """``G @ sums``: sums of base features over the keys, as the query features meet them."""
        self._check_fitted()
        return self.inner_matrix_ @ sums
