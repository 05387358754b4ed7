r"""Normal-reference bandwidths (Scott, Silverman), weighted spreads, and given bandwidths
checked.

The bandwidth sets how far a query looks: with the Gaussian kernel, :math:`h_j` is the
kernel's standard deviation along feature :math:`j`. The rules of thumb read it off each
feature's spread.
"""

import numbers

import numpy as np

from kernattn._core.numerics import has_spread, normalized_weights, power_of_two_scale

#: The names a bandwidth can be given by: the rules, and the leave-one-out selection.
BANDWIDTH_RULES = ("scott", "silverman", "loo")


def _weighted_quantile(x, weights, q):
    """Inverted-CDF quantile: integer weights give the quantile of the repeated sample."""
    order = np.argsort(x)
    cumulative = np.cumsum(weights[order])
    index = np.searchsorted(cumulative, q * cumulative[-1], side="left")
    return x[order][min(index, len(x) - 1)]


def rule_of_thumb_bandwidth(X, sample_weight=None, rule="scott"):
    r"""Normal-reference bandwidths, one per feature.

    Scott: :math:`h_j = \sigma_j\, n^{-1/(d+4)}`. Silverman:
    :math:`h_j = (4/(d+2))^{1/(d+4)}\, n^{-1/(d+4)} \min(\sigma_j, \mathrm{IQR}_j/1.349)`.
    With sample weights, :math:`n` is their sum and :math:`\sigma_j`, the IQR are weighted,
    so integer weights act as repeated rows. A constant feature gets bandwidth 1: it
    shifts every key's logit by the same amount, so any bandwidth gives the same weights.

    Examples
    --------
    >>> X = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
    >>> rule_of_thumb_bandwidth(X).round(3)
    array([0.887, 1.   ])
    """
    X = np.asarray(X, dtype=float)
    n, d = X.shape
    weights = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    # The sum of the weights in logs: n weights near 1e308 overflow it, not its root.
    unit = power_of_two_scale(weights)
    weights = weights / unit
    with np.errstate(over="ignore"):
        total = weights.sum() * unit
    if np.isfinite(total):
        factor = total ** (-1.0 / (d + 4))
    else:
        factor = np.exp(-(np.log(weights.sum()) + np.log(unit)) / (d + 4))
    _, sigma = weighted_spread(X, weights)
    if rule == "scott":
        h = sigma * factor
    elif rule == "silverman":
        iqr = np.array([_weighted_iqr(X[:, j], weights) for j in range(d)])
        spread = np.where(iqr > 0, np.minimum(sigma, iqr / 1.349), sigma)
        h = (4.0 / (d + 2)) ** (1.0 / (d + 4)) * factor * spread
    else:
        raise ValueError(f"rule must be 'scott' or 'silverman'; got {rule!r}")
    # Relative to the feature's magnitude: a "constant" feature that differs only by rounding.
    scale = np.max(np.abs(X), axis=0) if n else np.ones(d)
    return np.where(has_spread(sigma, scale), h, 1.0)


def _weighted_iqr(x, weights):
    """Weighted interquartile range, its difference taken in units of ``max|x|`` (exact
    powers of two): quartiles near ±1e308 would overflow it."""
    unit = power_of_two_scale(x)
    x = x / unit
    return (_weighted_quantile(x, weights, 0.75) - _weighted_quantile(x, weights, 0.25)) * unit


def weighted_spread(X, weights):
    r"""Weighted mean and standard deviation of every column, at any scale.

    :math:`\sigma = m\, \mathrm{std}(x/m)` with :math:`m` a power of two near
    :math:`\max|x - \bar x|`: the squares of inputs near 1e200 overflow and those of
    inputs near 1e-200 underflow, their scaled versions do neither; for ordinary data the
    scaling is exact and changes nothing.
    """
    weights = normalized_weights(weights)
    total = weights.sum()
    unit = power_of_two_scale(X, axis=0)
    mean = weights @ (X / unit) / total * unit
    deviation = X - mean
    unit = power_of_two_scale(deviation, axis=0)
    deviation /= unit
    sigma = np.sqrt(np.maximum(weights @ deviation**2 / total, 0.0)) * unit
    return mean, sigma


def bandwidth_message(bandwidth, detail="", rules=BANDWIDTH_RULES):
    return (
        "bandwidth must be a positive float, an array of n_features positive floats, or "
        f"one of {', '.join(map(repr, rules))}; got {bandwidth!r}{detail}"
    )


def check_bandwidth(bandwidth, n_features, rules=BANDWIDTH_RULES):
    """A given bandwidth as one positive finite float per feature, or a ``ValueError``."""
    if isinstance(bandwidth, numbers.Real) and not isinstance(bandwidth, bool):
        h = np.full(n_features, float(bandwidth))
    else:
        try:
            h = np.asarray(bandwidth, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(bandwidth_message(bandwidth, rules=rules)) from None
        if h.shape != (n_features,):
            raise ValueError(
                bandwidth_message(
                    bandwidth, f" (shape {h.shape}, but X has {n_features} features)", rules
                )
            )
    if not np.all(np.isfinite(h) & (h > 0)):
        raise ValueError(bandwidth_message(bandwidth, rules=rules))
    return h
