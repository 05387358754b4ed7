r"""Categorical and ordinal features: their kernels as a Gaussian kernel on encoded inputs.

The product kernel of Racine and Li (2004), as in R's ``np``, multiplies a Gaussian for each
continuous feature by a kernel of smoothing parameter :math:`\lambda` for each discrete one:

- unordered, :math:`c` levels — Aitchison and Aitken (1976):
  :math:`l = 1-\lambda` if :math:`x = x'`, else :math:`\lambda/(c-1)`;
  :math:`\lambda \in [0, (c-1)/c]`;
- ordered — Wang and van Ryzin (1981): :math:`l = 1-\lambda` if :math:`x = x'`, else
  :math:`\tfrac12(1-\lambda)\lambda^{|x - x'|}`; :math:`\lambda \in [0, 1]`.

:math:`\lambda = 0` averages only rows of the query's own level; the upper end of the range
smooths the feature away (Aitchison–Aitken) or weighs every other level alike
(Wang–van Ryzin). A Nadaraya–Watson estimate uses only ratios of kernel values, so the
factor :math:`1-\lambda` cancels and the kernels are

.. math::

    \text{unordered: } e^{-\rho\,[x \ne x']},\quad \rho = \log\frac{(c-1)(1-\lambda)}{\lambda};
    \qquad
    \text{ordered: } e^{-\log 2\,[x \ne x'] - \tau |x - x'|},\quad \tau = -\log\lambda .

Both are Gaussian kernels of encoded inputs. With the one-hot code :math:`e(x)` over the
training levels, :math:`\|e(x) - e(x')\|^2 = 2\,[x \ne x']`, so :math:`e^{-\rho[x \ne x']} =
\exp(-\tfrac12 \|e(x) - e(x')\|^2 / \sigma^2)` with :math:`\sigma^2 = 1/\rho`. With the
"thermometer" code :math:`t_k(x) = \sqrt{g_k}\, \mathrm{clip}((x - v_k)/g_k, 0, 1)` over the
gaps :math:`g_k = v_{k+1} - v_k` of the sorted training levels :math:`v`,
:math:`\|t(x) - t(x')\|^2 = |x - x'|` between training levels (and up to a term that depends
on the query only, which cancels, for any other query value), so :math:`e^{-\tau|x - x'|}`
is the Gaussian of :math:`t` with :math:`\sigma^2 = 1/(2\tau)`; the :math:`\log 2` term is
the one-hot code's Gaussian with :math:`\sigma^2 = 1/\log 2`. So a smoother with discrete
features is the Gaussian smoother — softmax attention — on the encoded inputs, with one
scale per encoded column, tied within each discrete feature. A query level never seen in
training is equally far from every training level: the feature then does not change that
query's weights.
"""

import numbers

import numpy as np

from kernattn.bandwidth import BANDWIDTH_RULES, CRITERIA, rule_of_thumb_bandwidth
from kernattn.bandwidth._search import search_start
from kernattn.bandwidth._tied import select_tied_bandwidth

__all__ = [
    "MixedEncoding",
    "categorical_codes",
    "dtype_categories",
    "mixed_bandwidth",
    "resolve_feature_kinds",
    "select_mixed_bandwidth",
]

CONTINUOUS, CATEGORICAL, ORDINAL = "continuous", "categorical", "ordinal"
# ρ (or 2τ) is kept in [_RHO_MIN, _RHO_MAX]: a kernel ratio e^-700 is no weight at all in
# float64 (λ = 0), and e^-1e-12 is 1 (λ at the top of its range): the encoded scales stay
# finite and positive.
_RHO_MIN, _RHO_MAX = 1e-12, 700.0
#: The range of ρ (or 2τ) the bandwidth search explores: from e^-40 (λ ≈ 0 to 17 digits) to a
#: kernel ratio within 1e-8 of 1.
SEARCH_RHO = (1e-8, 40.0)


def _indices(spec, n_features, name):
    """Feature indices from ``None``, integer indices or a boolean mask."""
    if spec is None:
        return np.array([], dtype=int)
    array = np.asarray(spec)
    if array.dtype == bool:
        if array.shape != (n_features,):
            raise ValueError(
                f"{name} as a boolean mask must have one entry per feature ({n_features}); "
                f"got shape {array.shape}"
            )
        return np.flatnonzero(array)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"{name} must be None, 'from_dtype', an array of feature indices or a boolean "
            f"mask of n_features entries; got {spec!r}"
        )
    if np.any((array < -n_features) | (array >= n_features)):
        raise ValueError(f"{name} has indices outside [0, {n_features - 1}]; got {spec!r}")
    indices = np.unique(array % n_features)
    if len(indices) != len(array):
        raise ValueError(f"{name} lists a feature twice; got {spec!r}")
    return indices


def dtype_categories(X, categorical, ordinal):
    """For ``"from_dtype"``: the categories of every pandas categorical column of ``X``
    (``{column index: (categories, ordered)}``), or ``None`` when no parameter asks for them
    or ``X`` is not a DataFrame."""
    if not ("from_dtype" in (_as_str(categorical), _as_str(ordinal)) and hasattr(X, "dtypes")):
        return None
    found = {}
    for j, dtype in enumerate(X.dtypes):
        if getattr(dtype, "name", None) == "category":
            found[j] = (dtype.categories, bool(dtype.ordered))
    return found


def _as_str(spec):
    return spec if isinstance(spec, str) else None


def categorical_codes(X, categories):
    """``X`` with its pandas categorical columns replaced by their codes in the training
    ``categories`` (a category not seen in training gets code −1, an unseen level; a missing
    value stays missing, NaN, for the usual error)."""
    if not categories or not hasattr(X, "dtypes"):
        return X
    X = X.copy()
    for j, (values, _) in categories.items():
        name = X.columns[j]
        column = X[name]
        missing = column.isna().to_numpy()
        # The position of each value among the training categories (−1: not among them).
        codes = values.get_indexer(np.asarray(column, dtype=object)).astype(float)
        codes[missing] = np.nan
        X[name] = codes
    return X


def resolve_feature_kinds(categorical, ordinal, n_features, categories=None):
    """The kind of every feature: ``"continuous"``, ``"categorical"`` or ``"ordinal"``.

    ``categories`` (from :func:`dtype_categories`, or ``None``) serves ``"from_dtype"``:
    unordered pandas categoricals are categorical, ordered ones ordinal.
    """
    kinds = np.full(n_features, CONTINUOUS, dtype=object)
    for spec, kind, name in (
        (categorical, CATEGORICAL, "categorical_features"),
        (ordinal, ORDINAL, "ordinal_features"),
    ):
        if isinstance(spec, str):
            if spec != "from_dtype":
                raise ValueError(
                    f"{name} must be None, 'from_dtype', an array of feature indices or a "
                    f"boolean mask of n_features entries; got {spec!r}"
                )
            wanted = kind == ORDINAL
            indices = [j for j, (_, ordered) in (categories or {}).items() if ordered == wanted]
        else:
            indices = _indices(spec, n_features, name)
        indices = np.asarray(indices, dtype=int)
        if np.any(kinds[indices] != CONTINUOUS):
            shared = indices[kinds[indices] != CONTINUOUS].tolist()
            raise ValueError(
                "a feature cannot be both categorical and ordinal; categorical_features and "
                f"ordinal_features share {shared}"
            )
        kinds[indices] = kind
    return kinds


class MixedEncoding:
    """The encoded inputs of a product kernel with discrete features (module docstring).

    Parameters
    ----------
    kinds : ndarray of str, shape (n_features,)
        ``"continuous"``, ``"categorical"`` or ``"ordinal"`` per feature.
    X : ndarray of shape (n, n_features)
        The training inputs, whose values define each discrete feature's levels.

    Attributes
    ----------
    levels : list of ndarray or None
        Per feature, its sorted training levels (``None`` for continuous features).
    columns : list of ndarray
        Per feature, the indices of its encoded columns.
    """

    def __init__(self, kinds, X):
        self.kinds = np.asarray(kinds, dtype=object)
        self.levels = []
        self.columns = []
        width = 0
        for j, kind in enumerate(self.kinds):
            if kind == CONTINUOUS:
                self.levels.append(None)
                size = 1
            else:
                levels = np.unique(X[:, j])
                self.levels.append(levels)
                # Ordinal: the one-hot code, then one thermometer column per gap.
                size = len(levels) + (len(levels) - 1 if kind == ORDINAL else 0)
            self.columns.append(np.arange(width, width + size))
            width += size
        self.n_columns = width

    @property
    def discrete(self):
        """Whether each feature is discrete."""
        return self.kinds != CONTINUOUS

    def n_levels(self, j):
        return len(self.levels[j])

    def transform(self, X):
        """The encoded inputs, (n, n_columns): continuous features as they are, discrete
        ones one-hot (and thermometer-coded if ordinal)."""
        X = np.asarray(X, dtype=float)
        Z = np.zeros((len(X), self.n_columns))
        for j, kind in enumerate(self.kinds):
            columns = self.columns[j]
            if kind == CONTINUOUS:
                Z[:, columns[0]] = X[:, j]
                continue
            levels = self.levels[j]
            Z[:, columns[: len(levels)]] = X[:, j, None] == levels[None, :]
            if kind == ORDINAL and len(levels) > 1:
                gaps = np.diff(levels)
                fraction = np.clip((X[:, j, None] - levels[None, :-1]) / gaps, 0.0, 1.0)
                Z[:, columns[len(levels) :]] = fraction * np.sqrt(gaps)
        return Z

    # ------------------------------------------------- bandwidths and column scales

    def rho(self, j, lam):
        """λ of discrete feature ``j`` → the rate of its λ-dependent columns (ρ, or 2τ)."""
        with np.errstate(divide="ignore"):
            if self.kinds[j] == CATEGORICAL:
                c = self.n_levels(j)
                rho = np.log((c - 1) * (1.0 - lam)) - np.log(lam) if c > 1 else _RHO_MAX
            else:
                rho = -2.0 * np.log(lam)
        return float(np.clip(rho, _RHO_MIN, _RHO_MAX))

    def lam(self, j, rho):
        """The inverse of :meth:`rho`."""
        if self.kinds[j] == CATEGORICAL:
            c = self.n_levels(j)
            return float((c - 1) / (np.exp(rho) + c - 1)) if c > 1 else 0.0
        return float(np.exp(-rho / 2.0))

    def lam_range(self, j):
        """The allowed λ of discrete feature ``j``."""
        if self.kinds[j] == CATEGORICAL:
            c = self.n_levels(j)
            return 0.0, (c - 1) / c if c > 1 else 0.0
        return 0.0, 1.0

    def column_scales(self, bandwidth):
        """Per encoded column, the Gaussian's standard deviation σ, from the per-feature
        bandwidths (``h`` for continuous features, ``λ`` for discrete ones)."""
        scales = np.empty(self.n_columns)
        for j, kind in enumerate(self.kinds):
            columns = self.columns[j]
            if kind == CONTINUOUS:
                scales[columns] = bandwidth[j]
                continue
            c = self.n_levels(j)
            rate = self.rho(j, bandwidth[j])
            if kind == CATEGORICAL:
                scales[columns] = 1.0 / np.sqrt(rate)
            else:
                scales[columns[:c]] = 1.0 / np.sqrt(np.log(2.0))
                scales[columns[c:]] = 1.0 / np.sqrt(rate)
        return scales

    def line_columns(self):
        """The encoded columns of the continuous features, in order: where a local-linear
        fit puts its line (the discrete features enter through the kernel weights only,
        as in Li and Racine (2004) and R np's local-linear ``npreg``)."""
        return np.array([self.columns[j][0] for j in np.flatnonzero(~self.discrete)], dtype=int)

    def tied_columns(self):
        """Per feature, the encoded columns whose scale its bandwidth sets (the one-hot part
        of an ordinal feature has the fixed scale 1/√log 2)."""
        tied = []
        for j, kind in enumerate(self.kinds):
            columns = self.columns[j]
            tied.append(columns[self.n_levels(j) :] if kind == ORDINAL else columns)
        return tied

    def bandwidth_from_scales(self, scales):
        """The per-feature bandwidths (``h`` or ``λ``) of encoded column scales."""
        bandwidth = np.empty(len(self.kinds))
        for j, kind in enumerate(self.kinds):
            columns = self.tied_columns()[j]
            if kind == CONTINUOUS:
                bandwidth[j] = scales[columns[0]]
            elif len(columns):
                bandwidth[j] = self.lam(j, 1.0 / scales[columns[0]] ** 2)
            else:  # one level: no column depends on λ
                bandwidth[j] = 0.0
        return bandwidth

    def feature_gradient(self, gradient, variance=None):
        """Gradients over the encoded columns, (m, n_columns, t), to the features:
        a continuous feature's is its column's; a discrete feature has none (NaN)."""
        out = []
        for a in (gradient, variance):
            if a is None:
                out.append(None)
                continue
            features = np.full((a.shape[0], len(self.kinds)) + a.shape[2:], np.nan)
            for j in np.flatnonzero(~self.discrete):
                features[:, j] = a[:, self.columns[j][0]]
            out.append(features)
        return out[0], out[1]

    def check_bandwidth(self, bandwidth):
        """λ of every discrete feature within its range, or a ``ValueError``."""
        for j in np.flatnonzero(self.discrete):
            low, high = self.lam_range(j)
            if not low <= bandwidth[j] <= high:
                kernel = "Aitchison–Aitken" if self.kinds[j] == CATEGORICAL else "Wang–van Ryzin"
                raise ValueError(
                    f"the bandwidth of {self.kinds[j]} feature {j} is the {kernel} λ, which "
                    f"must be in [{low:g}, {high:g}] ({self.n_levels(j)} levels); got "
                    f"{bandwidth[j]!r}"
                )


def _message(bandwidth, detail=""):
    return (
        "with categorical or ordinal features, bandwidth must be a positive float (for the "
        "continuous features; the discrete ones get λ = 0), an array of n_features values "
        "(h > 0 for a continuous feature, λ for a discrete one), or one of 'scott', "
        f"'silverman', 'loo'; got {bandwidth!r}{detail}"
    )


def mixed_bandwidth(bandwidth, encoding, X, sample_weight):
    """The per-feature bandwidths (``h`` or ``λ``) of a given bandwidth or rule.

    A float or a rule of thumb sets the continuous features' bandwidths (the rule from
    their spread alone) and gives every discrete feature λ = 0 (only its own level); an
    array gives one value per feature.
    """
    d = len(encoding.kinds)
    continuous = ~encoding.discrete
    h = np.zeros(d)
    if isinstance(bandwidth, str):
        if bandwidth not in BANDWIDTH_RULES + CRITERIA:
            raise ValueError(_message(bandwidth))
        if np.any(continuous):
            h[continuous] = rule_of_thumb_bandwidth(X[:, continuous], sample_weight, bandwidth)
        return h
    if isinstance(bandwidth, numbers.Real) and not isinstance(bandwidth, bool):
        if not (np.isfinite(bandwidth) and bandwidth > 0):
            raise ValueError(_message(bandwidth))
        h[continuous] = float(bandwidth)
        return h
    try:
        h = np.asarray(bandwidth, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(_message(bandwidth)) from None
    if h.shape != (d,):
        raise ValueError(_message(bandwidth, f" (shape {h.shape}, but X has {d} features)"))
    if not np.all(np.isfinite(h) & (h > 0) | encoding.discrete):
        raise ValueError(_message(bandwidth))
    encoding.check_bandwidth(h)
    return h


def select_mixed_bandwidth(
    encoding, X, Z, Y, sample_weight, *, criterion="loo", degree=0, n_jobs=None
):
    """Bandwidths of every feature that minimize a selection criterion (``"loo"``,
    ``"aic"`` or ``"gcv"``) of the local-constant (``degree=0``) or local-polynomial
    (``degree ≥ 1``, the polynomial in the continuous features:
    :meth:`MixedEncoding.line_columns`) estimate: ``h`` of the continuous features and
    ``λ`` of the discrete ones (as R np's ``npregbw``).

    The search runs on the scales of the encoded columns, tied within each discrete feature
    (:func:`kernattn.bandwidth.select_tied_bandwidth`; its grid moves the continuous
    bandwidths first, then the discrete ones): continuous ones within a factor 1000
    of Scott's rule, discrete ones over kernel ratios from e^-40 (λ ≈ 0) to 1 − 1e-8 (the
    top of λ's range), starting from a ratio of e^-1. With a continuous feature, a row's
    exact duplicates are left out with it, as everywhere in kernattn (a vanishing bandwidth
    would copy each target from its twin). With discrete features only, every row of a cell
    is an exact duplicate of the others, and they are its neighbours, not copies: only the
    row itself is left out (as in R np, whose λ this then reproduces).

    Returns
    -------
    selection : BandwidthSelection
        ``bandwidth`` per feature (``h`` or ``λ``); ``upper_edge`` marks the features
        smoothed away (a continuous bandwidth 1000 times Scott's, a categorical kernel
        ratio within 1e-8 of 1).
    """
    continuous = ~encoding.discrete
    start = np.ones(len(encoding.kinds))
    if np.any(continuous):
        start[continuous] = search_start(X[:, continuous], sample_weight)
    # A start of λ with rate 1 for the discrete features (σ = 1).
    for j in np.flatnonzero(encoding.discrete):
        start[j] = encoding.lam(j, 1.0)
    scales = encoding.column_scales(start)
    bounds = np.empty((len(start), 2))
    bounds[continuous] = np.log(start[continuous])[:, None] + [-np.log(1e3), np.log(1e3)]
    bounds[~continuous] = [-0.5 * np.log(SEARCH_RHO[1]), -0.5 * np.log(SEARCH_RHO[0])]
    selection = select_tied_bandwidth(
        Z,
        Y,
        sample_weight,
        scales,
        encoding.tied_columns(),
        bounds,
        criterion=criterion,
        degree=degree,
        line=encoding.line_columns(),
        # The continuous bandwidths first (the discrete features at their start), then λ.
        grid_groups=[
            group
            for group in (np.flatnonzero(continuous), np.flatnonzero(~continuous))
            if len(group)
        ],
        leave_out_duplicates=bool(np.any(continuous)),
        n_jobs=n_jobs,
    )
    # An ordinal feature at the top of λ's range still tells same level from other levels.
    return selection._replace(
        bandwidth=encoding.bandwidth_from_scales(selection.bandwidth),
        upper_edge=selection.upper_edge & (encoding.kinds != ORDINAL),
    )
