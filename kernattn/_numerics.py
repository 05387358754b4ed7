"""Floating-point guards shared by every computation on logits.

Weights are made from logits (log-kernels) as ``exp(logits − c)`` with ``c`` a per-row
shift. Two facts drive everything here:

- relative to a row maximum of ``exp(0) = 1``, an entry below ``exp(−700) ≈ 1e-304`` is 0 in
  any float64 sum with it, while numpy's ``exp`` takes a slow path (several times slower) on
  arguments below about −708 whose results underflow. Shifted logits are floored at −700;
- a row whose unshifted kernel values sum below ``UNDERFLOW`` (or overflow) has lost its
  information and must be recomputed with its maximum subtracted.

float32 computations use the same rules with float32's limits.
"""

import numpy as np

#: Shifted logits are raised to this before ``exp`` (float64).
EXP_FLOOR = -700.0
_EXP_FLOOR32 = -85.0
#: A kernel row summing below this has underflowed (float64).
UNDERFLOW = 1e-200
_UNDERFLOW32 = 1e-30


def exp_floor(dtype):
    """The floor for shifted logits of this floating dtype (see the module docstring)."""
    return _EXP_FLOOR32 if np.dtype(dtype) == np.float32 else EXP_FLOOR


def exp_shifted(logits):
    """In place: ``exp`` of logits that are ≤ 0 after a per-row shift, floored first."""
    np.maximum(logits, exp_floor(logits.dtype), out=logits)
    return np.exp(logits, out=logits)


def shifted_exp(logits, axis=-1):
    """In place: ``exp(logits − max)`` along ``axis`` (the log-sum-exp shift), floored.

    The largest entry of every row becomes ``exp(0) = 1``: a row far below every other on
    the logit scale (a query far from every key) keeps its nearest key instead of 0/0. A row
    whose maximum is not finite is left to the caller to reject or repair.
    """
    top = np.max(logits, axis=axis, keepdims=True)
    # At astronomic distances the shift can overflow to −inf: a weight of 0, as meant.
    with np.errstate(over="ignore", invalid="ignore"):
        np.subtract(logits, top, out=logits)
    return exp_shifted(logits)


def underflowed(row_sums):
    """Rows whose exponentiated logits sum to (almost) nothing, or overflowed (inf, NaN)."""
    tiny = _UNDERFLOW32 if row_sums.dtype == np.float32 else UNDERFLOW
    with np.errstate(invalid="ignore"):
        return ~((row_sums >= tiny) & (row_sums < np.inf))


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
    """Sample weights divided by a power of two near their largest, so their sum cannot
    overflow (``n`` weights of 1e308 each); every ratio of weighted sums is unchanged."""
    sample_weight = np.asarray(sample_weight, dtype=float)
    return sample_weight / power_of_two_scale(sample_weight)


def weighted_mean(X, sample_weight, axis=0):
    """The weighted mean along ``axis``, in units that cannot overflow: the values divided
    by a power of two near their largest, the weights by one near theirs (exact: ordinary
    data give the plain weighted average to the last bit)."""
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
