r"""Attention as pure functions on arrays.

Softmax attention returns, for every query, a weighted average of the values whose weights
are a softmax over the query's similarity (logit) with every key:

.. math::

    \mathrm{out}_i = \sum_j w_{ij} v_j, \qquad
    w_{ij} = \frac{\exp(s\, q_i^\top k_j + b_j)}{\sum_l \exp(s\, q_i^\top k_l + b_l)}

with scale :math:`s` (``1/\sqrt{d_k}`` by default) and an optional key bias :math:`b`. This is
the Nadaraya–Watson estimate with kernel :math:`\kappa(q, k) = \exp(s\, q^\top k + b_k)`.
Linear attention replaces the kernel by an explicit feature map,
:math:`\kappa(q, k) = \phi(q)^\top \phi(k)`, so the sums over the keys are taken once.

Nothing here holds state. The sums go through the one reduction the estimators use
(:mod:`kernattn._sums`): the Gaussian smoother's prediction *is* :func:`softmax_attention`
with ``key_bias = -½‖k‖² + log s``.
"""

import math
import numbers

import numpy as np

from kernattn._blocks import KEY_TILE, map_query_blocks
from kernattn._numerics import max_exponent, shifted_exp
from kernattn._sums import kernel_sums, softmax_weights

__all__ = ["softmax", "log_softmax", "softmax_attention", "linear_attention"]

# Logits are kept below 2**_SAFE_EXPONENT in magnitude, so that a logit minus its row maximum
# (at most twice that) cannot overflow.
_SAFE_EXPONENT = 1000


def _as_real(name, A, *, finite=True):
    """``A`` as a float64 array of real numbers, or an error that names ``name``.

    ``np.asarray(A, dtype=float)`` alone would drop the imaginary part of a complex array
    with only a warning, and let NaN through to become a NaN answer.
    """
    A = np.asarray(A)
    if A.dtype.kind == "c":
        raise TypeError(
            f"{name} must be real; got a complex array (pass its real part or modulus explicitly)"
        )
    if A.dtype.kind not in "biuf":
        try:
            A = A.astype(float)
        except (TypeError, ValueError):
            raise TypeError(
                f"{name} must be an array of real numbers; got dtype {A.dtype}"
            ) from None
    A = A.astype(float, copy=False)
    if finite and not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or infinite values; every entry must be finite")
    return A


def _as_2d(name, A):
    A = _as_real(name, A)
    if A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, dim); got shape {A.shape}")
    return A


def _as_values(V, n_keys):
    V = _as_real("V", V)
    if V.ndim not in (1, 2) or V.shape[0] != n_keys:
        raise ValueError(
            f"V must have shape (n_keys,) or (n_keys, d_v) with n_keys={n_keys}; got {V.shape}"
        )
    return V


def _check_scale(scale):
    """``scale`` as a float (None stays None), or an error that names it."""
    if scale is None:
        return None
    value = scale
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"scale must be a finite real number or None (1/√d_k); got {scale!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"scale must be a finite real number or None (1/√d_k); got {value}")
    return value


def log_softmax(logits, axis=-1):
    """Log of :func:`softmax`, computed as ``logits - logsumexp(logits)``.

    A row whose logits are all ``-inf`` (no key is reachable) gives ``-inf`` everywhere, not
    NaN. NaN or ``+inf`` logits raise ``ValueError``.

    Examples
    --------
    >>> log_softmax([[0.0, 0.0], [-np.inf, -np.inf]])
    array([[-0.69314718, -0.69314718],
           [       -inf,        -inf]])
    """
    logits = _as_real("logits", logits, finite=False)
    if np.any(np.isnan(logits) | np.isposinf(logits)):
        raise ValueError("log_softmax needs logits that are finite or -inf; got NaN or +inf")
    top = np.max(logits, axis=axis, keepdims=True)
    reachable = np.isfinite(top)
    shifted = logits - np.where(reachable, top, 0.0)
    with np.errstate(divide="ignore"):
        log_sum = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    # An all −inf row: −inf − log(0) would be −inf − (−inf) = NaN.
    return shifted - np.where(reachable, log_sum, 0.0)


def softmax(logits, axis=-1, out=None):
    """Numerically stable softmax: ``exp(s - max s) / sum exp(s - max s)``.

    Subtracting the maximum keeps ``exp`` from overflowing for large logits and from
    underflowing every entry to 0 (then 0/0) for very negative ones: the largest entry
    always becomes ``exp(0) = 1``. Shifted logits below −700 are raised to −700 before
    ``exp`` (numpy's ``exp`` is several times slower on arguments that underflow), so a
    weight that would be smaller than about 1e-304 of the largest comes out as that, not as
    an exact 0; in a float64 sum with the largest weight it is 0 all the same. A logit of
    ``-inf`` is different: it removes its entry, whose weight is exactly 0.

    Parameters
    ----------
    logits : array_like of real numbers
        Finite or ``-inf``; every row (along ``axis``) needs one finite logit.
    axis : int
        The axis that sums to one.
    out : ndarray, optional
        Where to write the result (may be ``logits`` itself, for an in-place softmax).

    Raises
    ------
    ValueError
        If a row has a NaN or ``+inf`` logit, or only ``-inf`` ones.

    Examples
    --------
    >>> softmax([1000.0, 1000.0, 999.0]).round(4)
    array([0.4223, 0.4223, 0.1554])
    >>> softmax([0.0, -np.inf])
    array([1., 0.])
    """
    logits = _as_real("logits", logits, finite=False)
    top = np.max(logits, axis=axis, keepdims=True)
    if not np.all(np.isfinite(top)):
        raise ValueError(
            "softmax needs at least one finite logit in every row and no NaN or +inf; got "
            "a row with a NaN or +inf logit, or whose logits are all -inf"
        )
    removed = np.isneginf(logits)
    removed = removed if removed.any() else None
    if out is None:
        out = logits.copy()
    elif out is not logits:
        np.copyto(out, logits)
    shifted_exp(out, axis=axis)
    if removed is not None:
        # The exp floor raises −inf to −700 like any very negative logit, which would let a
        # removed key keep a weight of about 1e-304 (and, with a huge value, a share of the
        # answer): a removed entry's weight is exactly 0.
        out[removed] = 0.0
    out /= np.sum(out, axis=axis, keepdims=True)
    return out


def _logit_units(Q, K, scale, bias):
    """Queries, scaled keys, key bias and the exponent ``m`` such that the logits are
    ``(Q @ K_scaled.T + bias) · 2**m``, every term below ``2**_SAFE_EXPONENT``.

    For ordinary inputs ``m = 0`` and this is ``Q, scale · K, bias`` unchanged. When
    ``scale · qᵀk`` or the bias could overflow (a scale of 1e300, features near 1e200),
    ``Q`` and ``K`` are divided by powers of two and the logits are counted in units of
    ``2**m``: the differences to the row maximum that matter stay exact, and those that
    overflow when multiplied back by ``2**m`` are far below −700, a weight of 0 anyway.
    """
    d_k = Q.shape[1]
    q_exp, k_exp = int(max_exponent(Q)), int(max_exponent(K))
    _, scale_exp = np.frexp(abs(scale))
    # |scale · qᵀk| < 2**dot_exp, a sum of d_k products each below 2**(s + q + k).
    dot_exp = int(scale_exp) + q_exp + k_exp + (d_k - 1).bit_length() if scale else 0
    bias_exp = 0
    if bias is not None:
        bias_exp = int(max_exponent(bias[np.isfinite(bias)]))
    largest = max(dot_exp, int(scale_exp) + k_exp, bias_exp)
    if largest <= _SAFE_EXPONENT:
        return Q, K * scale, bias, 0
    m = max(0, dot_exp - _SAFE_EXPONENT, bias_exp - _SAFE_EXPONENT)
    Q = np.ldexp(Q, -q_exp)
    K_scaled = np.ldexp(K, -k_exp) * np.ldexp(scale, q_exp + k_exp - m)
    if bias is not None:
        bias = np.ldexp(bias, -m)
    return Q, K_scaled, bias, m


def softmax_attention(Q, K, V, *, scale=None, key_bias=None, return_weights=False):
    r"""Exact softmax attention, ``softmax(scale · Q Kᵀ + key_bias) V``.

    Row ``i`` of the output is the Nadaraya–Watson estimate at query ``Q[i]``: the values
    averaged with weights :math:`w_{ij} \propto \exp(\mathrm{scale}\, q_i^\top k_j + b_j)`.
    The row maximum of the logits is subtracted before ``exp`` (log-sum-exp), and the
    queries are processed in blocks bounded by scikit-learn's ``working_memory``, so no
    (n_queries × n_keys) matrix exists unless ``return_weights=True``.

    Any finite inputs give a finite answer: each output row is a weighted average of the
    rows of ``V`` and lies within their range (per column), also for logits far beyond the
    float64 range (a scale of 1e300), where the weights become those of the largest logits.

    Parameters
    ----------
    Q : array_like of shape (n_queries, d_k)
        Finite real numbers. A query or key at infinity has no defined logit (∞ · 0, ∞ − ∞):
        NaN or ±inf in ``Q`` or ``K`` raise ``ValueError``.
    K : array_like of shape (n_keys, d_k)
        Finite real numbers, at least one key.
    V : array_like of shape (n_keys,) or (n_keys, d_v)
        Finite real numbers.
    scale : float, optional
        A finite real number that multiplies the dot products. ``None`` means
        :math:`1/\sqrt{d_k}`, which keeps the logits at unit variance when the entries of
        ``Q`` and ``K`` are independent with mean 0 and variance 1 (then
        :math:`\mathrm{Var}(q^\top k) = d_k`). 0 gives every unremoved key the same weight;
        a negative scale favours the least similar keys.
    key_bias : array_like of shape (n_keys,), optional
        Added to every query's logit for that key: finite, or ``-inf`` to remove the key
        (its weight is then exactly 0). ``key_bias = -½‖k‖²`` with ``scale=1`` turns the dot
        product into the Gaussian kernel ``exp(-½‖q − k‖²)`` (the query-only term cancels in
        the softmax).
    return_weights : bool
        Also return the (n_queries, n_keys) weight matrix.

    Returns
    -------
    out : ndarray of shape (n_queries,) or (n_queries, d_v)
    weights : ndarray of shape (n_queries, n_keys)
        Only when ``return_weights=True``. Rows are non-negative and sum to one.

    Raises
    ------
    TypeError
        ``scale`` is not a real number, or an array is complex or not numeric.
    ValueError
        ``scale`` is NaN or infinite; NaN or infinity in ``Q``, ``K`` or ``V``; NaN or
        ``+inf`` in ``key_bias``, or every key removed; no keys; mismatched shapes.

    Examples
    --------
    >>> Q = np.array([[0.0], [1.0]])
    >>> K = np.array([[0.0], [1.0]])
    >>> out, w = softmax_attention(Q, K, np.array([1.0, 2.0]), scale=1.0, return_weights=True)
    >>> w.round(4)
    array([[0.5   , 0.5   ],
           [0.2689, 0.7311]])
    """
    scale = _check_scale(scale)
    Q = _as_2d("Q", Q)
    K = _as_2d("K", K)
    V = _as_values(V, K.shape[0])
    if Q.shape[1] != K.shape[1]:
        raise ValueError(
            f"Q and K must have the same number of columns (d_k); got {Q.shape[1]} and "
            f"{K.shape[1]}"
        )
    if K.shape[0] == 0:
        raise ValueError("softmax attention needs at least one key; got K with 0 rows")
    if K.shape[1] == 0:
        raise ValueError("Q and K need at least one column (d_k >= 1); got 0")
    if scale is None:
        scale = 1.0 / np.sqrt(K.shape[1])
    bias, removed = None, None
    if key_bias is not None:
        bias = _as_real("key_bias", key_bias, finite=False).ravel()
        if bias.shape != (K.shape[0],):
            raise ValueError(
                f"key_bias must have shape (n_keys,) = ({K.shape[0]},); got {np.shape(key_bias)}"
            )
        if np.any(np.isnan(bias) | np.isposinf(bias)):
            raise ValueError("key_bias must be finite, or -inf to remove a key; got NaN or +inf")
        removed = np.flatnonzero(np.isneginf(bias))
        if len(removed) == K.shape[0]:
            raise ValueError("key_bias is -inf for every key: no key is left to attend to")
        removed = removed if len(removed) else None
    Q, K_scaled, bias, unit_exponent = _logit_units(Q, K, scale, bias)

    V2 = V.reshape(K.shape[0], -1)
    # Values near the float64 limit: a weighted sum rounding a few ulps above its largest
    # term would overflow, so average them in a smaller unit (a power of two: exact).
    value_exp = int(max_exponent(V2))
    value_shift = value_exp - _SAFE_EXPONENT if value_exp > _SAFE_EXPONENT else 0
    if value_shift:
        V2 = np.ldexp(V2, -value_shift)
    n_queries, n_keys = Q.shape[0], K.shape[0]
    out = np.empty((n_queries, V2.shape[1]))
    weights = np.empty((n_queries, n_keys)) if return_weights else None
    columns = np.hstack([V2, np.ones((n_keys, 1))])

    def logits(rows, keys, out=None):
        block = np.matmul(Q[rows], K_scaled[keys].T, out=out)
        if bias is not None:
            block += bias[keys]
        return block

    def attend(rows):
        # Every row has a finite maximum: Q, K are finite and some key is not removed.
        if return_weights:
            w = softmax_weights(logits(rows, slice(None)), exponent=unit_exponent, removed=True)
            out[rows] = w @ V2
            weights[rows] = w
            return
        _, sums = kernel_sums(
            lambda keys, buffer: logits(rows, keys, buffer),
            n_keys,
            columns,
            exponent=unit_exponent,
            removed=removed is not None,
        )
        out[rows] = sums[:, :-1] / sums[:, -1:]

    if return_weights:
        map_query_blocks(attend, n_queries, n_keys)
    else:
        map_query_blocks(attend, n_queries, n_keys, key_tile=KEY_TILE)
    # A weighted average lies within the range of the values; clipping removes the few-ulp
    # excursions of rounding (the weights sum to 1 only up to rounding).
    np.clip(out, V2.min(axis=0), V2.max(axis=0), out=out)
    if value_shift:
        out = np.ldexp(out, value_shift)
    out = out.reshape((n_queries,) + V.shape[1:])
    return (out, weights) if return_weights else out


def linear_attention(phi_Q, phi_K, V):
    r"""Linear attention with explicit features: the Nadaraya–Watson estimate with kernel
    :math:`\kappa(q, k) = \phi(q)^\top \phi(k)`.

    .. math::

        \mathrm{out}_i = \frac{\phi(q_i)^\top S}{\phi(q_i)^\top z}, \qquad
        S = \sum_j \phi(k_j) v_j^\top, \quad z = \sum_j \phi(k_j)

    The sums over the keys are computed once, so the cost is O((n_queries + n_keys) · r · d_v)
    for r features instead of O(n_queries · n_keys).

    The ratio does not change when a query's features, or all the keys' features, are
    multiplied by a positive constant, so each row of ``phi_Q``, ``phi_K`` as a whole and
    each column of ``V`` are divided by a power of two near their largest entry before the
    sums: any finite non-negative features give a finite answer, within the range of ``V``
    (per column), however large or small they are.

    Parameters
    ----------
    phi_Q : array_like of shape (n_queries, r)
    phi_K : array_like of shape (n_keys, r)
        At least one key.
    V : array_like of shape (n_keys,) or (n_keys, d_v)
        All three finite real numbers.

    Returns
    -------
    out : ndarray of shape (n_queries,) or (n_queries, d_v)

    Raises
    ------
    TypeError
        An array is complex or not numeric.
    ValueError
        If a query's denominator :math:`\phi(q)^\top z` is not positive (signed features,
        such as random Fourier features, can make it so): the ratio would be meaningless;
        if it is so close to 0 that the ratio overflows; NaN or infinity in an argument; no
        keys; mismatched shapes.

    Examples
    --------
    >>> phi = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> linear_attention(phi, phi, np.array([3.0, 5.0]))
    array([3., 5.])
    """
    phi_Q = _as_2d("phi_Q", phi_Q)
    phi_K = _as_2d("phi_K", phi_K)
    V = _as_values(V, phi_K.shape[0])
    if phi_Q.shape[1] != phi_K.shape[1]:
        raise ValueError(
            "phi_Q and phi_K must have the same number of features; got "
            f"{phi_Q.shape[1]} and {phi_K.shape[1]}"
        )
    if phi_K.shape[0] == 0:
        raise ValueError("linear attention needs at least one key; got phi_K with 0 rows")
    V2 = V.reshape(phi_K.shape[0], -1)
    # Powers of two: exact, so ordinary inputs give the same digits as the plain formula.
    query_exp = max_exponent(phi_Q, axis=1)
    value_exp = max_exponent(V2, axis=0)
    phi_Q = np.ldexp(phi_Q, -query_exp[:, None])
    phi_K = np.ldexp(phi_K, -int(max_exponent(phi_K)))
    V2 = np.ldexp(V2, -value_exp)
    S = phi_K.T @ V2
    z = phi_K.sum(axis=0)
    denominator = phi_Q @ z
    bad = ~(denominator > 0)
    if np.any(bad):
        raise ValueError(
            f"{int(bad.sum())} quer{'y has' if bad.sum() == 1 else 'ies have'} a "
            "non-positive linear-attention denominator phi(q)ᵀ sum_j phi(k_j); use positive "
            "features or compute those rows exactly"
        )
    with np.errstate(over="ignore"):
        out = (phi_Q @ S) / denominator[:, None]
    if phi_Q.min(initial=0.0) >= 0 and phi_K.min(initial=0.0) >= 0:
        # Non-negative features make every row a weighted average of the values: clip the
        # few-ulp excursions of rounding so that it provably stays within their range.
        np.clip(out, V2.min(axis=0), V2.max(axis=0), out=out)
    with np.errstate(over="ignore"):
        out = np.ldexp(out, value_exp)
    if not np.all(np.isfinite(out)):
        raise ValueError(
            "linear attention overflowed: a denominator phi(q)ᵀ sum_j phi(k_j) is too close "
            "to 0 for signed features; use positive features or compute those rows exactly"
        )
    return out.reshape((phi_Q.shape[0],) + V.shape[1:])
