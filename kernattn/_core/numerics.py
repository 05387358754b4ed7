"""Scale-free helpers: powers of two as units, weighted means and spreads that cannot
overflow, and sample weights normalized by a power of two.

The guards of exponentiated logits (the floor, the underflow test, the shifted
exponential) belong to the reduction, :mod:`kernattn._core.sums`.
"""

import numpy as np


def max_exponent(a, axis=None):
    """The exponent ``e`` of a power of two with ``|a| < 2**e`` along ``axis`` (0 where ``a``
    is empty or all 0): dividing by ``2**e`` is exact, and changes only the range."""
    return np.frexp(np.max(np.abs(a), axis=axis, initial=0.0))[1].astype(int)


def power_of_two_scale(a, axis=None):
    """The power of two ``2**k ≤ max|a| < 2**(k+1)`` along ``axis`` (1 where ``a`` is all 0).

    Dividing by a power of two is exact (short of the subnormal range), so data scaled by it
    keep every digit: ordinary data give bit-for-bit the results of the unscaled formulas,
    while data near the ends of the float range stop overflowing (in squares and sums) or
    underflowing.
    """
    a = np.asarray(a, dtype=float)
    with np.errstate(invalid="ignore"):
        top = np.max(np.abs(a), axis=axis, initial=0.0)
    _, exponent = np.frexp(top)
    ok = np.isfinite(top) & (top > 0)
    return np.where(ok, np.ldexp(1.0, np.where(ok, exponent - 1, 0)), 1.0)


def has_spread(sigma, magnitude):
    """Whether a feature's standard deviation ``sigma`` is a spread the kernels can use:
    above rounding of its values (1e-12 of their largest ``magnitude``), and a normal float.
    A subnormal spread carries a handful of bits, and dividing an ordinary query by it
    leaves the float range; such a feature counts as constant."""
    return sigma > np.maximum(1e-12 * magnitude, np.finfo(float).tiny)


def normalized_weights(sample_weight):
    """Sample weights divided by their largest, so their sum cannot overflow (``n`` weights
    of 1e308 each) and equal weights of any unit are exactly 1: the weighted statistics of
    ``c`` times equal weights are the unweighted ones, to the last bit."""
    sample_weight = np.asarray(sample_weight, dtype=float)
    largest = np.max(sample_weight, initial=0.0)
    return sample_weight / largest if largest > 0 and np.isfinite(largest) else sample_weight


def weighted_mean(X, sample_weight, axis=0):
    """The weighted mean along ``axis``, in units that cannot overflow: the values divided
    by a power of two near their largest (exact), the weights by their largest
    (:func:`normalized_weights`: equal weights give the plain average to the last bit)."""
    unit = power_of_two_scale(X, axis=axis)
    weights = normalized_weights(sample_weight)
    return np.average(X / unit, axis=axis, weights=weights) * unit


def standardization(X, sample_weight):
    """Weighted mean and standard deviation of every feature (a feature without a usable
    spread, :func:`has_spread`, gets 1), in units of powers of two near ``max|x|`` and
    ``max|x − mean|`` (exact): the sums and squares of inputs near 1e300 would overflow,
    those near 1e-300 underflow."""
    sample_weight = normalized_weights(sample_weight)
    mean = weighted_mean(X, sample_weight)
    deviation = X - mean
    unit = power_of_two_scale(deviation, axis=0)
    std = np.sqrt(np.average((deviation / unit) ** 2, axis=0, weights=sample_weight)) * unit
    size = np.max(np.abs(X), axis=0)
    return mean, np.where(has_spread(std, size), std, 1.0)
