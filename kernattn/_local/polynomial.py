r"""Local polynomials of any degree from kernel moment sums, held back where the local design
cannot support them.

At a query :math:`q` with normalized kernel weights :math:`w_j` on keys :math:`k_j` (inputs
centered and divided by the bandwidth), the local polynomial of degree :math:`p` is the
weighted least-squares fit of the targets on the monomials of the keys of total degree at
most :math:`p`, evaluated at the query (Fan and Gijbels 1996, §3.1). Its value does not
depend on the basis the monomials are written in, so it is written in the best conditioned
one: the monomials :math:`\psi(z)` of :math:`z = (k - m)/s`, about the *local* weighted mean
:math:`m = \sum_j w_j k_j` and divided by the local standard deviations :math:`s`, with their
weighted means :math:`\bar\psi` removed from all but the constant. The constant then
decouples from the :math:`P'` others, and with :math:`\psi_j = \psi(z_j) - \bar\psi`,

.. math::

    \hat y(q) = \bar y + \tilde c^\top g, \qquad
    l_j(q) = w_j\,(1 + \tilde\psi_j^\top g), \qquad g = (R + \lambda I)^{-1} v,

where :math:`\bar y = \sum_j w_j y_j` is the local-constant (Nadaraya–Watson) estimate,
:math:`G = \sum_j w_j \psi_j \psi_j^\top` the weighted covariance of the monomials,
:math:`D = \operatorname{diag} G`, :math:`R = D^{-1/2} G D^{-1/2}` its correlation form,
:math:`\tilde\psi_j = D^{-1/2}\psi_j`, :math:`\tilde c = \sum_j w_j \tilde\psi_j y_j` and
:math:`v = D^{-1/2}(\psi(z_q) - \bar\psi)` the query's standardized monomials. With
:math:`\lambda = 0` this is exactly the local polynomial (for :math:`p = 1`,
:math:`\bar y + C_{xy}^\top C^{-1}(q - m)`, the formula of :mod:`kernattn._local.linear_fit`).
The equivalent weights sum to 1 and reproduce the estimate, :math:`\hat y = \sum_j l_j y_j`.

**Why about the local mean.** About the query, :math:`\psi(k - q)`, the Gram matrix of a
query far from its neighbours is dominated by :math:`|q - m|^{2p}`: nearly rank one, its
condition number growing like :math:`(|q - m|/s)^{2p}`. About the local mean and
standardized, it is the correlation matrix of the local design, whose conditioning reflects
the design only; the query enters through :math:`v` alone. The sums themselves are of the
monomials of the keys about the training center (:func:`polynomial_columns`: fixed
columns, one matrix product per block of queries, as the engine takes every kernel sum);
:func:`local_design` carries them to the local mean by the binomial theorem,
:math:`\psi(z) = T(m, s)\,\phi(k)`. That step cancels, with a rounding error of about
:math:`\epsilon\,(|m|/s)^{2p}` relative; so each monomial's variance gets the floor
``RIDGE`` times its raw second moment, as the local line always had, a monomial whose
local variance is not well above that floor drops out (coefficient 0), and so does a
direction of :math:`R` whose eigenvalue is not (a local design that is collinear there).
:math:`R` is solved by the local fits' one solve (:mod:`kernattn._local.cholesky`, the
binned tier's too) wherever every direction is kept for certain and the fit is not held
back; the other queries take :math:`R`'s eigen-decomposition, which drops directions and
gives the held-back ridge below.

**Held back: the finite-sample variance.** The estimate is linear in the targets, so with
independent noise of variance :math:`\sigma^2` its conditional variance is
:math:`\sigma^2 V`, :math:`V = \sum_j l_j^2`. For the local constant :math:`V = \sum_j
w_j^2 \le 1`: never noisier than one observation. For a local polynomial :math:`V` is
unbounded where the local design is sparse or the query lies outside it (Seifert and Gasser
1996); with equal weights :math:`V = (1 + L)\sum_j w_j^2` with :math:`L = v^\top R^{-1} v`
the query's leverage, its squared Mahalanobis distance from the weighted keys in the space
of the monomials. A query is **held back** when its unregularized polynomial would have
:math:`V > \kappa` (``VARIANCE_BOUND``, 4: a standard deviation above twice that of one
observation). Its ridge :math:`\lambda > 0` is then the smallest with
:math:`V_\lambda = \kappa`: the non-constant coefficients are shrunk toward 0, the estimate
toward the local constant, in the manner of Seifert and Gasser's ridging. So everywhere

.. math::

    \hat y(q) = \sum_j l_j y_j, \quad \sum_j l_j = 1, \quad \sum_j l_j^2 \le \kappa,
    \qquad |\hat y(q) - \bar y| \le \sqrt{L_\lambda}\;\sigma_w(q),

with :math:`L_\lambda = v^\top (R + \lambda I)^{-1} R (R + \lambda I)^{-1} v` and
:math:`\sigma_w(q)` the kernel-weighted standard deviation of the targets (Cauchy–Schwarz):
the estimate lies on the ridge path between the plain local polynomial and the local
constant, a bounded extrapolation, never an unbounded one. A query is held back too when it
lies more than one local standard deviation away along a direction the local design does
not resolve (a dropped monomial or eigen-direction: the fit is constant along it there).

Why this bound. *In sample*, a query whose own key carries the largest weight (a training
point under a radial kernel) has :math:`V \le \max_j w_j / w_i \cdot l_i \le 1`, because
the weighted hat value :math:`l_i` is at most 1: training points are never held back, not
even the high-leverage points of a global least-squares fit (a huge bandwidth). A query at
the edge of dense data has :math:`V` well below 1. A query far outside its data sees a
Gaussian kernel's tail: its weights rest on a few nearest keys (few effective points), and
its leverage grows like the fourth power of its distance in bandwidths: it is held back.
The rule is invariant to shifts and to the units of the inputs and of the bandwidth
(:math:`w`, :math:`R` and :math:`v` are), and needs, besides the moment sums, the same sums
with squared weights (:math:`\sum_j w_j^2 \phi(k_j)` up to degree :math:`2p`), from which
:math:`V_\lambda = a_0 + 2 u^\top g + g^\top M g` follows for every :math:`\lambda`.

*In a bandwidth search.* The criteria are those of the held-back estimator, which keeps
them finite at every bandwidth; below the spacing of the inputs, where most leave-one-out
queries are held back, the fit nearly interpolates its training targets and a criterion's
minimum there can undercut the supported one by chance. The search therefore keeps
:math:`\mathrm{tr}(S)` at most half the rows (:func:`kernattn.bandwidth.select_bandwidth`).

References
----------
.. [1] J. Fan, I. Gijbels, "Local Polynomial Modelling and Its Applications", Chapman & Hall
   (1996), §3.1–3.2.
.. [2] B. Seifert, T. Gasser, "Finite-sample variance of local polynomials: analysis and
   solutions", J. Amer. Statist. Assoc. 91 (1996), 267–275.
"""

import functools
import itertools
from math import comb
from numbers import Integral
from typing import NamedTuple

import numpy as np

# The warning of held-back queries, defined with kernattn's other warnings.
from kernattn._core.warning_types import LocalDesignWarning  # noqa: F401
from kernattn._local.cholesky import (
    batch_entries,
    cholesky_factor,
    cholesky_solve,
    inverse_trace,
)

#: The rounding floor, relative to each monomial's weighted raw second moment about the
#: training center: well above the rounding error of a variance computed from moment sums
#: (about 1e-16 of that moment per term, times the binomial coefficients of the centering, at
#: most 4^p), far below any variance that carries information. The local line's value.
RIDGE = 1e-12
#: A monomial, or a direction of the standardized design, whose local variance is not above
#: this multiple of the floor carries no information: it drops out.
RESOLUTION = 1e3
#: The floor of the squared weights' moments (relative to each monomial's raw second moment
#: under the squared weights): V_λ multiplies them by |g|², which is large exactly where
#: they lose their digits (a design resting on keys of tiny weight far from the training
#: center), so their floor is 10⁶ times their rounding error, not 10⁴ as ``RIDGE``: V_λ is
#: then an upper bound of the exact value whose own rounding moves a held-back estimate by
#: about 1e-6 of its shrinkage, smoothly in the weights.
SQUARED_FLOOR = 1e-10
#: κ: a query is held back when its local polynomial's conditional variance would exceed κ
#: times the noise variance of one observation (the local constant's is at most 1).
VARIANCE_BOUND = 4.0
#: The most unknowns of a local design that the one solve (:mod:`kernattn._local.cholesky`)
#: factors: (P')³/6 vectorized operations, 7 770 at 36 unknowns (a local quadratic in seven
#: features); larger designs (a local quadratic in 30 features has 495) take LAPACK's
#: batched eigen-decomposition, as held-back rows do.
FACTORED_UNKNOWNS = 36
#: Spacing, in the keys' units (bandwidths), of the points a local polynomial of degree 1
#: to 3 takes its monomials about (:func:`anchor_points`).
ANCHOR_SPACING = {1: 1024.0, 2: 16.0, 3: 4.0}
#: The highest degree, by the number of features (the sums go to twice the degree:
#: C(d + 2p, d) columns per key).
MAX_DEGREE_1D = 3
MAX_DEGREE = 2


def check_degree(degree, n_features):
    """``degree`` as an int, or a ``ValueError`` naming what the number of features allows."""
    top = MAX_DEGREE_1D if n_features <= 1 else MAX_DEGREE
    if (
        isinstance(degree, bool | np.bool_)
        or not isinstance(degree, Integral)
        or not (0 <= degree <= top)
    ):
        raise ValueError(
            f"degree must be an int from 0 to {top} with {n_features} feature"
            f"{'' if n_features == 1 else 's'} (local polynomials go to degree "
            f"{MAX_DEGREE_1D} in one feature, {MAX_DEGREE} in several); got {degree!r}"
        )
    return int(degree)


def monomial_exponents(n_features, degree):
    r"""The exponents :math:`\alpha` of the monomials :math:`k^\alpha` of total degree at most
    ``degree``, shape (P, n_features), :math:`P = \binom{d + p}{d}`.

    Graded: the constant first, then each degree in turn, and within a degree the order of
    :func:`itertools.combinations_with_replacement` of the features — for degree 2 the
    upper triangle ``(a, b), a ≤ b`` row by row, the order of
    :func:`kernattn._local.linear_fit.key_columns`.
    """
    rows = [
        np.bincount(np.asarray(combination, dtype=int), minlength=n_features)
        for total in range(degree + 1)
        for combination in itertools.combinations_with_replacement(range(n_features), total)
    ]
    return np.array(rows, dtype=int).reshape(len(rows), n_features)


def monomials(u, exponents):
    """``u^α`` for every row of ``u`` (n, d) and every exponent (P, d): shape (n, P). Each
    feature's powers are taken once, by repeated products, and each monomial is the product
    of its features' powers in the order of the features."""
    out = np.empty((len(u), len(exponents)))
    with np.errstate(over="ignore", invalid="ignore"):
        powers = []
        for f in range(u.shape[1]):
            column = np.ascontiguousarray(u[:, f], dtype=float)
            of_feature = [None, column]
            for _ in range(2, int(exponents[:, f].max(initial=0)) + 1):
                of_feature.append(of_feature[-1] * column)
            powers.append(of_feature)
        for j, exponent in enumerate(exponents):
            factors = [powers[f][k] for f, k in enumerate(exponent) if k]
            if not factors:
                out[:, j] = 1.0
            elif len(factors) == 1:
                out[:, j] = factors[0]
            else:
                np.multiply(factors[0], factors[1], out=out[:, j])
                for factor in factors[2:]:
                    out[:, j] *= factor
    return out


def anchor_points(Q, degree):
    r"""The point each query takes the monomials of the keys about, or ``None`` where every
    query takes the training center (the origin of the keys).

    The sums are of the monomials of the keys about one point; carried to a query's local
    mean :math:`m` (about that point) by the binomial theorem they keep about
    :math:`\epsilon\,(|m|/s)^{2p}` of their value, and the floor that guards against that
    rounding (``RIDGE``) grows as fast: a local cubic 25 bandwidths from the point, at the
    edge of dense data (local spread :math:`s \approx 0.6`), lost its cubic term to it, and
    a local line 100 000 bandwidths from it was 0.15 off. So a query at least
    ``ANCHOR_SPACING[p]`` from the origin along some axis takes a point of a lattice of
    that spacing (1 024 bandwidths for the line, 16 for the quadratic, 4 for the cubic),
    the nearest toward the origin along each axis. Within that spacing of its point, the
    directions the floor drops stay 125 (line), 130 (quadratic) and 50 (cubic) times
    weaker than the weakest direction of the local polynomial at the edge (or corner) of
    dense data. The monomials of the keys are computed once per point and block of
    queries (``n`` rows of a few columns, beside the block's kernel values), and the
    estimator orders its queries by point. Queries near the origin keep it, and the
    lattice does not depend on where the queries are, so a query moves to another point
    only across a lattice line, where the two fits agree to rounding.

    Parameters
    ----------
    Q : ndarray of shape (b, d)
        The queries, in the keys' coordinates (units of the bandwidth).
    degree : int

    Returns
    -------
    ndarray of shape (b, d), or None

    Examples
    --------
    >>> anchor_points(np.array([[3.5], [9.0], [-4.5]]), 3)
    array([[ 0.],
           [ 8.],
           [-4.]])
    >>> anchor_points(np.array([[9.0]]), 1) is None
    True
    >>> anchor_points(np.array([[5000.0]]), 1)
    array([[4096.]])
    """
    if degree < 1 or not len(Q):
        return None
    spacing = ANCHOR_SPACING[min(int(degree), 3)]
    with np.errstate(over="ignore", invalid="ignore"):
        lattice = np.trunc(Q / spacing) * spacing
    lattice = np.where(np.isfinite(lattice) & (np.abs(lattice) < 1e300), lattice, 0.0)
    return lattice if np.any(lattice) else None


def anchor_groups(Q, degree):
    """The queries ``Q`` grouped by their :func:`anchor_points`: a list of ``(point, rows)``,
    ``rows`` a slice of all of them where they share one point (the training center, 0,
    where none leaves it), else the indices of each point's queries.

    Examples
    --------
    >>> anchor_groups(np.array([[0.5], [1.0]]), 3)
    [(array([0.]), slice(None, None, None))]
    >>> [(float(p[0]), rows.tolist()) for p, rows in anchor_groups(np.array([[9.0], [0.5]]), 3)]
    [(0.0, [1]), (8.0, [0])]
    """
    anchors = anchor_points(Q, degree)
    if anchors is None:
        return [(np.zeros(Q.shape[1]), slice(None))]
    points, which = np.unique(anchors, axis=0, return_inverse=True)
    if len(points) == 1:
        return [(points[0], slice(None))]
    which = which.reshape(-1)
    return [(point, np.flatnonzero(which == g)) for g, point in enumerate(points)]


def anchor_order(Q, degree):
    """An order of the queries ``Q`` that puts together those of one point of
    :func:`anchor_points` (so that a block of them meets few points), or ``None`` where
    every query takes the training center."""
    anchors = anchor_points(Q, degree)
    return None if anchors is None else np.lexsort(anchors.T[::-1])


def n_design_columns(n_features, degree):
    """The key columns of a local polynomial of ``degree``: its non-constant monomials of
    total degree at most ``2 * degree``."""
    return comb(n_features + 2 * degree, n_features) - 1


def design_columns(keys, degree):
    """The non-constant monomials of the keys of total degree at most ``2 * degree``, in the
    order of :func:`monomial_exponents` (for ``degree=1``
    :func:`kernattn._local.linear_fit.key_columns`)."""
    return monomials(keys, monomial_exponents(keys.shape[1], 2 * degree))[:, 1:]


def polynomial_columns(moments, values, keys, degree):
    r"""What kernel weights are summed against for a local polynomial of ``degree``.

    The engine's value moments ``[v, v², 1]`` (``moments``), then :func:`design_columns`
    (the Gram matrix needs the monomials up to degree :math:`2p`), then the values times the
    non-constant monomials of degree at most :math:`p` (output-major), all in float64: the
    local covariances are differences of these sums. For ``degree=1`` these are the value
    moments, :func:`kernattn._local.linear_fit.key_columns` and
    :func:`~kernattn._local.linear_fit.value_key_columns`. Keys beyond the float
    range give infinite columns; those queries get the local constant.

    The rule that holds queries back also needs :func:`design_columns` summed with the
    *squared* kernel weights (see :func:`polynomial_estimate`).

    Parameters
    ----------
    moments : ndarray of shape (n, 2t + 1)
    values : ndarray of shape (n, t)
    keys : ndarray of shape (n, d)
        The keys about the training center, in bandwidth units.
    degree : int

    Returns
    -------
    columns : ndarray of shape (n, 2t + 1 + n_design_columns(d, degree) + t (P - 1))
    """
    design = design_columns(keys, degree)
    fit = design[:, : len(monomial_exponents(keys.shape[1], degree)) - 1]
    with np.errstate(over="ignore", invalid="ignore"):
        products = (values[:, :, None] * fit[:, None, :]).reshape(len(keys), -1)
    return np.hstack([moments.astype(np.float64), design, products])


class LocalDesign(NamedTuple):
    """The local design of a block of ``b`` queries, in the standardized basis.

    ``P`` monomials of degree at most ``p`` (the constant first), ``P' = P - 1``.
    """

    #: (b, d): m, the local weighted mean of the keys (0 in features without spread).
    mean: np.ndarray
    #: (b, d): s, the local standard deviations (1 in features without spread).
    spread: np.ndarray

    #: (b, P, P): raw monomials of the keys to those of z = (k − m)/s, ψ(z) = T φ(k).
    transform: np.ndarray
    #: (b, P'): the weighted means ψ̄ of the non-constant ones.
    psi_bar: np.ndarray
    #: (b, P'): √D, the standardization (1 where a monomial dropped out).
    root: np.ndarray
    #: (b, P'): the query's standardized monomials v (0 where dropped).
    query: np.ndarray
    #: (b, P'): g = (R + λI)⁻¹ v on the resolved directions.
    coefficients: np.ndarray
    #: (P', P', b): the lower Cholesky factor of R (:mod:`kernattn._local.cholesky`);
    #: (0, 0, b) where no row is factored.
    cholesky: np.ndarray
    #: (b,) bool: the rows solved with it (every direction kept, no ridge); the others use
    #: R's eigen-decomposition.
    factored: np.ndarray
    #: (b, P', P'): the eigenvectors of R (columns; the identity on factored rows).
    eigenvectors: np.ndarray
    #: (b, P'): R's eigenvalues e (1 on the directions not kept and on factored rows).
    eigenvalues: np.ndarray
    #: (b, P') bool: the eigen-directions the design resolves (kept).
    kept: np.ndarray
    #: (b, P') bool: the monomials the local design resolves.
    resolved: np.ndarray
    #: (b,): λ, the ridge beyond the rounding floor (0 unless held back for variance).
    ridge: np.ndarray
    #: (b,): the query's leverage L_0 = vᵀR⁻¹v on the resolved directions.
    leverage: np.ndarray
    #: (b,): V_0 = Σ_j l_j², the variance factor of the unregularized fit.
    variance: np.ndarray
    #: (b,) bool: the queries held back.
    held_back: np.ndarray
    #: (b,) bool: rows whose sums are finite (the others get the local constant).
    finite: np.ndarray


class _Layout(NamedTuple):
    """Where each moment a local design needs sits among the monomials of degree ≤ 2p."""

    exponents: np.ndarray  # (P, d), degree ≤ p
    first: np.ndarray  # (d,): k_f
    second: np.ndarray  # (d,): k_f²
    gram: np.ndarray  # (P, P): k^(α_a + α_c)
    doubled: np.ndarray  # (P - 1,): k^(2 α_a), a ≥ 1
    binomial: tuple  # _binomial_pairs(exponents)


@functools.lru_cache(maxsize=32)
def _layout(n_features, degree):
    """The :class:`_Layout` of a local polynomial (built once per dimension and degree)."""
    exponents = monomial_exponents(n_features, degree)
    index = {
        tuple(e): i for i, e in enumerate(monomial_exponents(n_features, 2 * degree).tolist())
    }
    unit = np.eye(n_features, dtype=int)
    return _Layout(
        exponents=exponents,
        first=np.array([index[tuple(row)] for row in unit.tolist()]),
        second=np.array([index[tuple(row)] for row in (2 * unit).tolist()]),
        gram=np.array([[index[tuple((a + c).tolist())] for c in exponents] for a in exponents]),
        doubled=np.array([index[tuple((2 * a).tolist())] for a in exponents[1:]], dtype=int),
        binomial=_binomial_pairs(exponents),
    )


def _binomial_pairs(exponents):
    """For every pair (a, b) with β_b ≤ α_a: the indices, Π_f C(α_f, β_f) and α − β."""
    below = np.all(exponents[None, :, :] <= exponents[:, None, :], axis=2)
    rows, cols = np.nonzero(below)
    coefficient = np.array(
        [
            np.prod(
                [comb(int(a), int(b)) for a, b in zip(exponents[r], exponents[c], strict=True)]
            )
            for r, c in zip(rows, cols, strict=True)
        ],
        dtype=float,
    ).reshape(len(rows))
    return rows, cols, coefficient, exponents[rows] - exponents[cols]


def _constant_design(a0):
    """The local design of degree 0: the local constant (``a0``: Σ_j w_j², its variance)."""
    b = len(a0)
    empty = np.zeros((b, 0))
    return LocalDesign(
        mean=empty,
        spread=empty,
        transform=np.ones((b, 1, 1)),
        psi_bar=empty,
        root=empty,
        query=empty,
        coefficients=empty,
        cholesky=np.zeros((0, 0, b)),
        factored=np.ones(b, dtype=bool),
        eigenvectors=np.zeros((b, 0, 0)),
        eigenvalues=empty,
        kept=np.zeros((b, 0), dtype=bool),
        resolved=np.zeros((b, 0), dtype=bool),
        ridge=np.zeros(b),
        leverage=np.zeros(b),
        variance=a0,
        held_back=np.zeros(b, dtype=bool),
        finite=np.ones(b, dtype=bool),
    )


def _local_basis(raw, finite, layout):
    r"""The local mean ``m`` and spreads ``s`` of the keys (0 and 1 in features without
    spread), those features, the transform ``T`` of the raw monomials to those of
    :math:`z = (k - m)/s` and each monomial's scale :math:`s^\alpha` (b, P), from the raw
    moments ``[1, design moments]`` of a block."""
    exponents = layout.exponents
    P = len(exponents)
    m = raw[:, layout.first]
    raw_second = raw[:, layout.second]
    feature_variance = raw_second - m**2 + RIDGE * raw_second
    feature_active = (feature_variance > 0) & finite[:, None]
    s = np.sqrt(np.where(feature_active, feature_variance, 1.0))
    m = np.where(feature_active, m, 0.0)
    # ψ(z) = T φ(k): Π_f (k_f − m_f)^α_f / s_f^α_f expanded by the binomial theorem.
    rows, cols, coefficient, delta = layout.binomial
    scale = np.prod(s[:, None, :] ** exponents[None, :, :], axis=2)
    transform = np.zeros((len(raw), P, P))
    transform[:, rows, cols] = (
        coefficient * np.prod((-m)[:, None, :] ** delta[None], axis=2) / scale[:, rows]
    )
    return m, s, feature_active, transform, scale


def correlation_form(C, root, kept, diagonal=None):
    r"""Covariances ``C`` (b, P, P) standardized, :math:`R = D^{-1/2} C D^{-1/2}` with
    :math:`D^{1/2}` = ``root`` (b, P), ``diagonal`` (b, P) then added to the diagonal, on
    the ``kept`` (b, P) rows and columns, and the identity elsewhere (the directions that
    drop out): the form in which both a local polynomial's design (:func:`local_design`)
    and a local line's covariance (:func:`kernattn._local.linear_fit.solve_covariance`)
    are solved."""
    P = C.shape[-1]
    R = C / (root[:, :, None] * root[:, None, :])
    if diagonal is not None:
        R[:, np.arange(P), np.arange(P)] += diagonal
    R = np.where(kept[:, :, None] & kept[:, None, :], R, 0.0)
    R[:, np.arange(P), np.arange(P)] = np.where(kept, np.diagonal(R, axis1=1, axis2=2), 1.0)
    return R


def local_design(design_moments, squared_moments, Q, degree, variance_bound=VARIANCE_BOUND):
    r"""The standardized local design of a block of queries, and each query's ridge.

    Parameters
    ----------
    design_moments : ndarray of shape (b, n_design_columns(d, degree))
        :math:`\sum_j w_j \phi_\gamma(k_j)` for the columns of :func:`design_columns`,
        normalized weights (summing to 1).
    squared_moments : ndarray of shape (b, 1 + n_design_columns(d, degree))
        :math:`\sum_j w_j^2 [1, \phi_\gamma(k_j)]`, the same normalized weights squared.
    Q : ndarray of shape (b, d)
        The queries, in the keys' coordinates.
    degree : int
    variance_bound : float, default=VARIANCE_BOUND
        :math:`\kappa > 1`.

    Returns
    -------
    LocalDesign
    """
    b, d = Q.shape
    if degree == 0:
        return _constant_design(np.asarray(squared_moments, dtype=float)[:, 0])
    layout = _layout(d, degree)
    exponents = layout.exponents
    P = len(exponents)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        raw = np.hstack([np.ones((b, 1)), design_moments])
        finite = (
            np.all(np.isfinite(raw), axis=1)
            & np.all(np.isfinite(squared_moments), axis=1)
            & np.all(np.isfinite(Q), axis=1)
        )
        raw = np.where(finite[:, None], raw, 0.0)
        squared = np.where(finite[:, None], squared_moments, 0.0)
        m, s, feature_active, transform, scale = _local_basis(raw, finite, layout)
        # Σ w φφᵀ and Σ w² φφᵀ: entry (a, c) is the moment of α_a + α_c.
        gram = layout.gram
        centered = transform @ raw[:, gram] @ transform.transpose(0, 2, 1)
        centered_sq = transform @ squared[:, gram] @ transform.transpose(0, 2, 1)
        psi_bar = centered[:, 1:, 0]
        G = centered[:, 1:, 1:] - psi_bar[:, :, None] * psi_bar[:, None, :]
        floor = RIDGE * raw[:, layout.doubled] / scale[:, 1:] ** 2
        spread = np.diagonal(G, axis1=1, axis2=2)
        involved = exponents[1:] > 0
        resolved = (spread > RESOLUTION * floor) & ~np.any(
            involved[None] & ~feature_active[:, None, :], axis=2
        )
        total = np.maximum(spread, 0.0) + floor
        root = np.sqrt(np.where(total > 0, total, 1.0))
        offsets = (monomials((Q - m) / s, exponents)[:, 1:] - psi_bar) / root
        offsets = np.where(finite[:, None], offsets, 0.0)
        R = correlation_form(G + floor[:, :, None] * np.eye(P - 1), root, resolved)
        v = np.where(resolved, offsets, 0.0)
        # Σ w² ψ̃ and Σ w² ψ̃ψ̃ᵀ, centered on ψ̄ (of the weights, not of their squares).
        a0 = squared[:, 0]
        r = centered_sq[:, 1:, 0]
        # A rounding floor on the squared weights' moments (SQUARED_FLOOR): where the local
        # design rests on keys of tiny weight far from the training center (|m|/s large),
        # these differences keep no digit, and V_λ, which multiplies them by |g|², would be
        # noise; with the floor it bounds the exact value from above, and a query whose fit
        # leans on such keys is held back, smoothly in the bandwidth.
        squared_floor = SQUARED_FLOOR * squared[:, layout.doubled] / scale[:, 1:] ** 2
        M = (
            centered_sq[:, 1:, 1:]
            - r[:, :, None] * psi_bar[:, None, :]
            - psi_bar[:, :, None] * r[:, None, :]
            + a0[:, None, None] * psi_bar[:, :, None] * psi_bar[:, None, :]
            + squared_floor[:, :, None] * np.eye(P - 1)
        ) / (root[:, :, None] * root[:, None, :])
        u = (r - a0[:, None] * psi_bar) / root
        u = np.where(resolved, u, 0.0)
        M = np.where(resolved[:, :, None] & resolved[:, None, :], M, 0.0)
    # A direction whose eigenvalue is not well above the floor (in R's units) carries no
    # information: the fit is constant along it.
    relative_floor = np.where(resolved, floor / np.where(total > 0, total, 1.0), 0.0)
    threshold = RESOLUTION * relative_floor.max(axis=1, initial=0.0)
    unresolved_offset = np.sum(np.where(resolved, 0.0, offsets) ** 2, axis=1)
    # The one solve (kernattn._local.cholesky) serves every query whose design keeps all its
    # directions for certain (the smallest eigenvalue of R is at least 1/tr R⁻¹) and whose
    # fit the variance rule leaves as it is; the others take R's eigen-decomposition, which
    # drops the directions the design does not resolve and finds the held-back ridge.
    # Beyond FACTORED_UNKNOWNS unknowns every row takes the eigen-decomposition: the one
    # solve's (P')³/6 vectorized operations would cost more than LAPACK's batched eigh.
    if P - 1 <= FACTORED_UNKNOWNS:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            L = cholesky_factor(*batch_entries(R))
            coefficients = np.moveaxis(cholesky_solve(L, np.moveaxis(v, 0, -1)), -1, 0)
            variance = _variance_factor(a0, u, M, coefficients, 1.0, np.zeros(b))
            factored = (
                finite & (2.0 * threshold * inverse_trace(L) < 1.0) & (variance <= variance_bound)
            )
            leverage = np.einsum("bi,bi->b", v, coefficients)
        cholesky = np.zeros((P - 1, P - 1, b))
        for i in range(P - 1):
            for j in range(i + 1):
                cholesky[i, j] = L[i][j]
    else:
        coefficients = np.zeros((b, P - 1))
        variance, leverage = np.zeros(b), np.zeros(b)
        factored = np.zeros(b, dtype=bool)
        cholesky = np.zeros((0, 0, b))  # read only for factored rows (solve_local)
    eigenvectors = np.broadcast_to(np.eye(P - 1), (b, P - 1, P - 1)).copy()
    e = np.ones((b, P - 1))
    kept = np.ones((b, P - 1), dtype=bool)
    ridge = np.zeros(b)
    rest = np.flatnonzero(~factored)
    if len(rest):
        eigen = _eigen_design(
            R[rest],
            v[rest],
            u[rest],
            M[rest],
            a0[rest],
            threshold[rest],
            finite[rest],
            variance_bound,
        )
        (
            eigenvectors[rest],
            e[rest],
            kept[rest],
            coefficients[rest],
            leverage[rest],
            variance[rest],
            ridge[rest],
            dropped,
        ) = eigen
        unresolved_offset[rest] += dropped
    held_back = (variance > variance_bound) | (unresolved_offset > 1.0) | ~finite
    return LocalDesign(
        mean=m,
        spread=s,
        transform=transform,
        psi_bar=np.where(resolved, psi_bar, 0.0),
        root=root,
        query=v,
        coefficients=np.where(resolved, coefficients, 0.0),
        cholesky=cholesky,
        factored=factored,
        eigenvectors=eigenvectors,
        eigenvalues=e,
        kept=kept,
        resolved=resolved,
        ridge=ridge,
        leverage=np.where(finite, leverage, np.inf),
        variance=np.where(finite, variance, np.inf),
        held_back=held_back,
        finite=finite,
    )


def _eigen_design(R, v, u, M, a0, threshold, finite, variance_bound):
    """:func:`local_design`'s solve in the eigenbasis of ``R`` for the rows the one solve
    does not serve: the eigenvectors, eigenvalues (1 where dropped), the directions kept,
    the coefficients g, the leverage, the variance factor V_0, the held-back ridge and the
    query's squared offset along the dropped directions."""
    b = len(R)
    eigenvalues, eigenvectors = np.linalg.eigh(R)
    kept = eigenvalues > threshold[:, None]
    a = np.einsum("bki,bk->bi", eigenvectors, v)
    dropped = np.sum(np.where(kept, 0.0, a) ** 2, axis=1)
    a = np.where(kept, a, 0.0)
    e = np.where(kept, eigenvalues, 1.0)
    u_hat = np.einsum("bki,bk->bi", eigenvectors, u)
    M_hat = eigenvectors.transpose(0, 2, 1) @ M @ eigenvectors
    leverage = np.sum(a**2 / e, axis=1)
    variance = _variance_factor(a0, u_hat, M_hat, a, e, np.zeros(b))
    ridge = np.zeros(b)
    wide = np.flatnonzero((variance > variance_bound) & finite)
    if len(wide):
        ridge[wide] = _ridge_for_variance(
            a0[wide], u_hat[wide], M_hat[wide], a[wide], e[wide], variance_bound
        )
    coefficients = np.einsum("bik,bk->bi", eigenvectors, a / (e + ridge[:, None]))
    return eigenvectors, e, kept, coefficients, leverage, variance, ridge, dropped


def _variance_factor(a0, u, M, a, e, ridge):
    r""":math:`V_\lambda = a_0 + 2 u^\top g + g^\top M g`, :math:`g = a/(e + \lambda)` (all in
    the eigenbasis of :math:`R`), per row."""
    g = a / (e + ridge[:, None])
    return (
        a0
        + 2.0 * np.einsum("bi,bi->b", u, g)
        + np.einsum("bi,bi->b", (M @ g[:, :, None])[:, :, 0], g)
    )


def _ridge_for_variance(a0, u, M, a, e, bound, n_grid=96, n_steps=40):
    r"""The smallest :math:`\lambda > 0` with :math:`V_\lambda =` ``bound``, per row (each
    row has :math:`V_0 >` ``bound``; ``bound`` a scalar or one per row).

    :math:`V_\lambda \to a_0 = \sum_j w_j^2 \le 1 < \kappa` as :math:`\lambda \to \infty`
    (with unit sample weights; where :math:`a_0 \ge \kappa` the ridge is infinite),
    and :math:`|V_\lambda - a_0| \le 2\|u\| x + \|M\| x^2` with :math:`x = \|a\|/\lambda`,
    which gives a :math:`\lambda_{\max}` where the bound holds. :math:`V_\lambda` need not
    be monotone, so a geometric grid down from :math:`\lambda_{\max}` (factors of 2, all
    evaluated at once) finds the first grid point from below where :math:`V \le \kappa`;
    the crossing inside its cell is then found by Newton's method on :math:`\log\lambda`,
    kept inside the cell (a step that leaves it bisects), to a relative :math:`10^{-13}`.
    """
    bound = np.broadcast_to(np.asarray(bound, dtype=float), a0.shape)
    size = np.sqrt(np.sum(a**2, axis=1))
    u_norm = np.sqrt(np.sum(u**2, axis=1))
    m_norm = np.sqrt(np.sum(M**2, axis=(1, 2)))
    room = bound - a0
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(
            m_norm > 0,
            (np.sqrt(u_norm**2 + m_norm * room) - u_norm) / np.where(m_norm > 0, m_norm, 1.0),
            room / (2.0 * np.where(u_norm > 0, u_norm, 1.0)),
        )
        top = np.maximum(size / x, np.max(e, axis=1)) * 2.0
    grid = top[:, None] * 2.0 ** -np.arange(n_grid)[None, :]  # decreasing
    g = a[:, None, :] / (e[:, None, :] + grid[:, :, None])
    on_grid = (
        a0[:, None]
        + 2.0 * np.einsum("bki,bi->bk", g, u)
        + np.einsum("bki,bki->bk", g, np.matmul(g, M))
    )
    inside = on_grid <= bound[:, None]
    # Scanning up from the smallest λ, the first grid point with V ≤ κ: the largest index
    # inside (the top one always is); below it V > κ (or λ = 0, where V_0 > κ).
    k = n_grid - 1 - np.argmax(inside[:, ::-1], axis=1)
    rows = np.arange(len(grid))
    hi = grid[rows, k]
    lo = np.where(k + 1 < n_grid, grid[rows, np.minimum(k + 1, n_grid - 1)], 0.0)
    ridge = hi.copy()
    for _ in range(n_steps):
        value, slope = _variance_and_slope(a0, u, M, a, e, ridge)
        excess = value - bound
        good = excess <= 0
        hi = np.where(good, np.minimum(hi, ridge), hi)
        lo = np.where(good, lo, np.maximum(lo, ridge))
        converged = (np.abs(excess) <= 1e-13 * bound) | (hi - lo <= 1e-13 * hi)
        if np.all(converged):
            break
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # Newton on log λ: d V / d log λ = λ dV/dλ.
            step = ridge * np.exp(-excess / (ridge * slope))
        middle = np.where(lo > 0, np.sqrt(lo * hi), 0.5 * hi)
        step = np.where((step > lo) & (step < hi) & np.isfinite(step), step, middle)
        ridge = np.where(converged, ridge, step)
    # Where Newton has not landed on the crossing, the bracket's side inside the bound.
    value, _ = _variance_and_slope(a0, u, M, a, e, ridge)
    ridge = np.where(value <= bound * (1 + 1e-12), ridge, hi)
    # Sample weights below 1 (precision weights: rows worth less than one observation) can
    # put even the local constant's variance factor a₀ = Σ_j w_j²/s_j above the bound: no
    # ridge meets it, and the fit is the local constant (an infinite ridge), not NaN.
    return np.where(room > 0, ridge, np.inf)


def _variance_and_slope(a0, u, M, a, e, ridge):
    r""":math:`V_\lambda` and :math:`dV_\lambda/d\lambda` per row (``M`` symmetric)."""
    regularized = e + ridge[:, None]
    g = a / regularized
    Mg = (M @ g[:, :, None])[:, :, 0]
    dg = -g / regularized
    value = a0 + 2.0 * np.einsum("bi,bi->b", u, g) + np.einsum("bi,bi->b", g, Mg)
    slope = 2.0 * np.einsum("bi,bi->b", u, dg) + 2.0 * np.einsum("bi,bi->b", Mg, dg)
    return value, slope


def _split_sums(sums, t, d, degree):
    """The normalized pieces of a block's kernel sums (layout of :func:`polynomial_columns`)."""
    n_design = n_design_columns(d, degree)
    S0 = sums[:, 2 * t]
    ybar = sums[:, :t] / S0[:, None]
    second_values = sums[:, t : 2 * t] / S0[:, None]
    start = 2 * t + 1
    design = sums[:, start : start + n_design] / S0[:, None]
    products = sums[:, start + n_design :].reshape(len(sums), t, -1) / S0[:, None, None]
    return S0, ybar, second_values, design, products


class LocalPolynomialFit(NamedTuple):
    """The local polynomial at a block of queries (see :func:`polynomial_estimate`)."""

    #: (b, t): the estimate.
    mean: np.ndarray
    #: (b, t): the local constant Σ_j w_j v_j.
    ybar: np.ndarray
    #: (b, t): Σ_j w_j v_j².
    second_values: np.ndarray
    #: (b,) bool: the queries held back.
    held_back: np.ndarray
    #: (b,): 1 + vᵀg, so that S_ii = w_ii (1 + vᵀg) at a training query (see below).
    self_factor: np.ndarray
    #: (b,): Σ_j l_j², the variance factor of the estimate (at most VARIANCE_BOUND).
    variance: np.ndarray
    #: The local design the estimate was taken in.
    design: LocalDesign
    #: (b, t, P'): c̃ = Σ_j w_j ψ̃_j v_j, the standardized local covariances of the values
    #: with the monomials (0 where not resolved).
    covariances: np.ndarray


def local_covariances(design, ybar, products):
    r""":math:`\tilde c = \sum_j w_j \tilde\psi_j v_j` (b, t, P') from a :class:`LocalDesign`,
    the local constant ``ybar`` (b, t) and the normalized sums ``products`` (b, t, P') of
    :math:`v_j \phi(k_j)` over the non-constant monomials of degree at most :math:`p`:
    the sums carried to the local basis, then centered and standardized."""
    with np.errstate(over="ignore", invalid="ignore"):
        full = np.concatenate([ybar[:, :, None], products], axis=2)
        local = np.einsum("bij,btj->bti", design.transform, full)[:, :, 1:]
        c = (local - ybar[:, :, None] * design.psi_bar[:, None, :]) / design.root[:, None, :]
    return np.where(np.isfinite(c) & design.resolved[:, None, :], c, 0.0)


def fit_values(design, ybar, products):
    r"""The estimate :math:`\bar y + \tilde c^\top g` from a :class:`LocalDesign`, the local
    constant ``ybar`` (b, t) and the normalized sums ``products`` (b, t, P') of
    :math:`v_j \phi(k_j)` over the non-constant monomials of degree at most :math:`p`."""
    c = local_covariances(design, ybar, products)
    correction = np.einsum("bti,bi->bt", c, design.coefficients)
    return ybar + np.where(design.finite[:, None], correction, 0.0)


def raw_coefficients(design, coefficients, constant):
    r"""A polynomial :math:`c_0 + \sum_a b_a \tilde\psi_a(k)` of the local basis written in
    the raw monomials of the keys: ``beta`` with value ``beta · [1, φ(k)]`` at a key
    :math:`k` (:func:`monomial_exponents` of degree :math:`p`, the constant first).

    ``coefficients`` (b, P') or (b, k, P') are the :math:`b_a` (0 on unresolved
    monomials), ``constant`` (a scalar, or (b, k)) the :math:`c_0`: for the equivalent
    weights' factor :math:`1 + \tilde\psi_j^\top g` they are :math:`g` and 1, for the fitted
    polynomial :math:`(R + \lambda I)^{-1}\tilde c` and :math:`\bar y`. Rows whose sums were
    not finite get the constant.
    """
    single = coefficients.ndim == 2
    stacked = coefficients[:, None, :] if single else coefficients
    constant = np.broadcast_to(np.asarray(constant, dtype=float), stacked.shape[:2])
    scaled = stacked / design.root[:, None, :]
    beta = np.einsum("bij,bki->bkj", design.transform[:, 1:, :], scaled)
    beta[:, :, 0] += constant - np.einsum("bi,bki->bk", design.psi_bar, scaled)
    beta[~design.finite] = 0.0
    beta[~design.finite, :, 0] = constant[~design.finite]
    return beta[:, 0] if single else beta


def solve_local(design, rhs, ridge=True):
    r""":math:`(R + \lambda I)^{-1}` ``rhs`` on the kept directions of each row's local design,
    for ``rhs`` of shape (b, k, P') (0 on unresolved monomials); ``ridge=False``:
    :math:`R^{-1}` (the plain local polynomial, :math:`\lambda = 0`). The rows
    :func:`local_design` factored (no ridge, every direction kept) take the one solve with
    its factor; the others their eigen-decomposition."""
    solution = np.zeros(rhs.shape)
    factored = design.factored
    if np.any(factored):
        rows = np.flatnonzero(factored) if not np.all(factored) else slice(None)
        cholesky = design.cholesky
        L = [[cholesky[i, j, rows] for j in range(i + 1)] for i in range(len(cholesky))]
        solved = cholesky_solve(L, rhs[rows].transpose(2, 1, 0))  # (P', k, b)
        solution[rows] = solved.transpose(2, 1, 0)
    if not np.all(factored):
        rows = np.flatnonzero(~factored)
        V = design.eigenvectors[rows]
        regularized = design.eigenvalues[rows] + (design.ridge[rows, None] if ridge else 0.0)
        inverse = np.where(design.kept[rows], 1.0 / regularized, 0.0)
        projected = np.einsum("bji,bkj->bki", V, rhs[rows]) * inverse[:, None, :]
        solution[rows] = np.einsum("bji,bki->bkj", V, projected)
    return np.where(design.resolved[:, None, :], solution, 0.0)


def fitted_polynomial(fit):
    """The local polynomial each query fitted, in the raw monomials of the keys: ``beta``
    (b, t, P) with value ``beta[i, o] · [1, φ(k)]`` at a key :math:`k` (the fit's ridge
    included; for the estimate, evaluate at the query)."""
    return raw_coefficients(fit.design, solve_local(fit.design, fit.covariances), fit.ybar)


def weighted_polynomial_fit(weights, columns, Q, t, degree, precision=None):
    r"""The local polynomial of a block from its kernel weights (rows × keys) and the keys'
    :func:`polynomial_columns`, transposed (columns × keys): the fit
    (:func:`polynomial_estimate`) and the kernel totals :math:`\sum_j e_j`.

    ``precision``: the keys' precision weights (the squared weights' sums are divided by
    them), or ``None``."""
    n_design = n_design_columns(Q.shape[1], degree)
    with np.errstate(over="ignore", invalid="ignore"):
        # (Cᵀ Eᵀ)ᵀ: BLAS is faster with the long dimension inside.
        sums = np.dot(columns, weights.T).T
        square = np.square(weights)
        if precision is not None:
            square /= precision
        squared = np.dot(columns[2 * t : 2 * t + 1 + n_design], square.T).T
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        fit = polynomial_estimate(sums, squared, Q, t, Q.shape[1], degree)
    return fit, sums[:, 2 * t]


def key_residuals(fit, columns, residual, values, degree):
    r"""For a fit at a block of queries (:func:`weighted_polynomial_fit`, ``columns`` its
    transposed columns): ``A`` (b, n), the equivalent weights' factors
    :math:`l_{ij} = w_{ij} A_{ij}`, and ``P`` (b, n), each key's residual from the query's
    fitted polynomial against the query's own residual ``residual`` (b, t),
    :math:`P_{ij} = \sum_o r_{io} (y_{jo} - \hat m_{io}(k_j))` (``values`` the
    :math:`y`)."""
    t = values.shape[1]
    n_fit = len(monomial_exponents(fit.design.mean.shape[1], degree))
    # [1, φ(k)]: the keys' monomials up to the degree (the first design columns).
    basis = np.vstack([np.ones((1, columns.shape[1])), columns[2 * t + 1 : 2 * t + n_fit]])
    with np.errstate(over="ignore", invalid="ignore"):
        A = raw_coefficients(fit.design, fit.design.coefficients, 1.0) @ basis
        beta = np.einsum("bt,btp->bp", residual, fitted_polynomial(fit))
        P = residual @ values.T if t > 1 else np.multiply.outer(residual[:, 0], values[:, 0])
        P -= beta @ basis
    return A, P


def polynomial_estimate(sums, squared_sums, Q, t, d, degree, variance_bound=VARIANCE_BOUND):
    r"""The local polynomial of ``degree`` from the kernel sums of a block of queries.

    Parameters
    ----------
    sums : ndarray of shape (b, 2t + 1 + n_design_columns(d, degree) + t(P - 1))
        :math:`\sum_j e_j [v_j, v_j^2, 1, \phi_\gamma(k_j) (1 \le |\gamma| \le 2p), v_j
        \phi_\alpha(k_j) (1 \le |\alpha| \le p)]` for unnormalized kernel weights
        :math:`e_j` (:func:`polynomial_columns`). With each query's own key (and its exact
        duplicates) left out of both sums, the estimate is the leave-one-out fit, held back
        as the estimator would be without that row.
    squared_sums : ndarray of shape (b, 1 + n_design_columns(d, degree))
        :math:`\sum_j e_j^2 [1, \phi_\gamma(k_j)]`: :func:`design_columns` summed with the
        squared kernel weights (a max-shift of the logits cancels as for the plain sums,
        squared); with sample weights :math:`s_j` (in :math:`e_j`), :math:`\sum_j e_j^2
        [1, \phi_\gamma(k_j)] / s_j`: they are precision weights, and the variance factor
        is :math:`\sum_j l_j^2 / s_j`.
    Q : ndarray of shape (b, d)
        The queries' key-side projections.
    t, d : int
        Outputs and key dimension.
    degree : int
    variance_bound : float, default=VARIANCE_BOUND

    Returns
    -------
    LocalPolynomialFit
        ``mean`` the estimate, ``ybar`` and ``second_values`` the kernel averages of the
        values and of their squares, ``held_back`` the queries held back, ``variance``
        :math:`\sum_j l_j^2`, and ``self_factor`` :math:`1 + v^\top g`: at a training query
        :math:`x_i` whose own key is in the sums, the diagonal of the smoother matrix is
        :math:`S_{ii} = l_i(x_i) = w_{ii}(1 + v^\top g)` (its own :math:`\tilde\psi_i` is
        :math:`v`), with :math:`w_{ii}` its own normalized kernel weight: the trace that
        AICc and GCV need. For a fit that is not held back, the leave-one-out residual is
        also :math:`(y_i - \hat y_i)/(1 - S_{ii})` (the ridge then does not depend on the
        row: a linear smoother's deletion identity).
    """
    S0, ybar, second_values, design_moments, products = _split_sums(sums, t, d, degree)
    squared = squared_sums / (S0**2)[:, None]
    design = local_design(design_moments, squared, Q, degree, variance_bound)
    covariances = local_covariances(design, ybar, products)
    correction = np.einsum("bti,bi->bt", covariances, design.coefficients)
    mean = ybar + np.where(design.finite[:, None], correction, 0.0)
    self_factor = 1.0 + np.einsum("bi,bi->b", design.query, design.coefficients)
    variance = np.minimum(design.variance, variance_bound)
    return LocalPolynomialFit(
        mean, ybar, second_values, design.held_back, self_factor, variance, design, covariances
    )


def equivalent_weights(
    weights, keys, Q, degree, columns=None, variance_bound=VARIANCE_BOUND, sample_weight=None
):
    r"""The equivalent weights :math:`l_j(q)` of the local polynomial, from kernel weights.

    :math:`l_j = w_j (1 + \tilde\psi_j^\top g)`: :math:`\sum_j l_j = 1`,
    :math:`\hat y(q) = \sum_j l_j y_j` and :math:`\sum_j l_j^2 \le \kappa` (held-back
    queries included: shrunk, still linear in the targets).

    Parameters
    ----------
    weights : ndarray of shape (b, n)
        Kernel weights (each row is normalized here).
    keys : ndarray of shape (n, d)
    Q : ndarray of shape (b, d)
    degree : int
    columns : ndarray of shape (n, n_design_columns(d, degree)), optional
        :func:`design_columns` of the keys, if at hand.
    variance_bound : float, default=VARIANCE_BOUND
    sample_weight : ndarray of shape (n,), optional
        The keys' sample weights, read as precision weights (a key of weight 2 is the mean
        of two observations: :math:`\operatorname{Var}\hat y = \sigma^2 \sum_j l_j^2 /
        s_j`), so that an integer weight holds back as many queries as repeated rows.
        ``weights`` then include them (:math:`w_j \propto s_j \kappa_j`).

    Returns
    -------
    weights : ndarray of shape (b, n)
    held_back : ndarray of bool, shape (b,)
    """
    normalized, columns, design = _weights_design(
        weights, keys, Q, degree, columns, variance_bound, sample_weight
    )
    if degree == 0:
        return normalized, design.held_back
    P = len(monomial_exponents(keys.shape[1], degree))
    # 1 + ψ̃_jᵀ g as a polynomial in the raw monomials φ(k_j): coefficients h, then h·φ(k_j).
    h = raw_coefficients(design, design.coefficients, 1.0)
    return polynomial_weights(normalized, h, columns[:, : P - 1]), design.held_back


def polynomial_weights(normalized, coefficients, monomials):
    r"""Kernel weights times a polynomial of the keys, :math:`l_j = w_j\, h^\top [1,
    \phi(k_j)]`: the form of the equivalent weights (:func:`equivalent_weights`).

    ``normalized`` (b, n) the weights :math:`w_j`, ``coefficients`` (b, P) the :math:`h`
    of each row (the constant first), ``monomials`` (n, P - 1) the keys' :math:`\phi(k)`
    without the constant."""
    ones = np.ones((len(monomials), 1))
    with np.errstate(over="ignore", invalid="ignore"):
        factor = coefficients @ np.hstack([ones, monomials]).T
    return normalized * factor


def _weights_design(weights, keys, Q, degree, columns, variance_bound, sample_weight):
    """The normalized kernel weights, the keys' :func:`design_columns` and the
    :class:`LocalDesign` of a block, from its kernel weights (see
    :func:`equivalent_weights`)."""
    weights = np.asarray(weights, dtype=np.float64)
    if columns is None:
        columns = design_columns(keys, degree)
    normalized = weights / weights.sum(axis=1, keepdims=True)
    ones = np.ones((len(keys), 1))
    with np.errstate(over="ignore", invalid="ignore"):
        design_moments = normalized @ columns
        squared = _squared(normalized, sample_weight) @ np.hstack([ones, columns])
    design = local_design(design_moments, squared, Q, degree, variance_bound)
    return normalized, columns, design


def slope_weights(
    weights, keys, Q, degree, columns=None, variance_bound=VARIANCE_BOUND, sample_weight=None
):
    r"""The weights of the slope of the local polynomial at the query: ``G`` (b, n, d) with
    :math:`\partial \hat m_q(k)/\partial k_f` at :math:`k = q` equal to
    :math:`\sum_j G_{jf}\, y_j` (per unit of the keys).

    The weighted least-squares polynomial is :math:`\hat m_q(k) = \bar y + b^\top
    \tilde\psi(k)` with :math:`b = R^{-1} \tilde c` and :math:`\tilde c = \sum_j w_j
    \tilde\psi_j y_j`, so its slope is :math:`\sum_j w_j y_j\, \tilde\psi_j^\top u_f` with
    :math:`u_f = R^{-1} D^{-1/2} \partial\psi(z_q)/\partial k_f`: for ``degree=1`` the
    weighted least-squares slope :math:`C^{-1}\sum_j w_j (k_j - m) y_j`, which does not
    depend on where the query lies. A direction the local design does not resolve gets
    slope 0. The ridge of a held-back query is *not* applied: it bounds the variance of
    the estimate's level at the query, and shrinking the coefficients toward 0 would
    change the slope's direction, not only its size (for ``degree ≥ 2`` the slope at a
    query outside the data extrapolates the polynomial's derivative: its variance, from
    these weights, says how far).

    Parameters are those of :func:`equivalent_weights`; returns ``G`` and the held-back
    mask.
    """
    n, d = keys.shape
    normalized, columns, design = _weights_design(
        weights, keys, Q, degree, columns, variance_bound, sample_weight
    )
    ones = np.ones((n, 1))
    exponents = monomial_exponents(d, degree)
    z = np.where(design.finite[:, None], (Q - design.mean) / design.spread, 0.0)
    # ∂ψ_a/∂k_f = α_f z^(α − e_f) / s_f, standardized by √D.
    derivative = np.empty((len(Q), d, len(exponents) - 1))
    for f in range(d):
        lowered = np.maximum(exponents[1:] - np.eye(d, dtype=int)[f], 0)
        derivative[:, f] = exponents[1:, f] * monomials(z, lowered) / design.spread[:, f : f + 1]
    derivative /= design.root[:, None, :]
    u = solve_local(design, np.where(np.isfinite(derivative), derivative, 0.0), ridge=False)
    H = raw_coefficients(design, u, 0.0)  # (b, d, P)
    with np.errstate(over="ignore", invalid="ignore"):
        factor = np.einsum("bfp,np->bnf", H, np.hstack([ones, columns[:, : len(exponents) - 1]]))
    return normalized[:, :, None] * factor, design.held_back


def _squared(normalized, sample_weight):
    """The squared normalized weights, divided by the keys' precision weights (if any)."""
    squared = normalized**2
    if sample_weight is not None:
        squared /= np.asarray(sample_weight, dtype=float)[None, :]
    return squared


def held_back_message(n_held_back, n_queries, degree):
    """The message of a :class:`LocalDesignWarning`: how many queries were held back."""
    return (
        f"{n_held_back} of {n_queries} queries cannot be supported by their local design for "
        f"a polynomial of degree {degree} (too few effective neighbours, or outside the "
        "support of their kernel weights): their estimates were shrunk toward the local "
        f"constant until their variance is at most {VARIANCE_BOUND:g} times that of one "
        "observation. A larger bandwidth, or a lower degree, supports them."
    )
