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

Nothing here holds state; the estimators call these functions.
"""

import numpy as np

from kernattn._blocks import map_query_blocks
from kernattn._numerics import shifted_exp

__all__ = ["softmax", "log_softmax", "softmax_attention", "linear_attention"]


def log_softmax(logits, axis=-1):
    """Log of :func:`softmax`, computed as ``logits - logsumexp(logits)``.

    Rows whose logits are all ``-inf`` stay ``-inf`` (no key is reachable) instead of NaN.
    """
    logits = np.asarray(logits, dtype=float)
    top = np.max(logits, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    shifted = logits - top
    with np.errstate(divide="ignore"):
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def softmax(logits, axis=-1, out=None):
    """Numerically stable softmax: ``exp(s - max s) / sum exp(s - max s)``.

    Subtracting the maximum keeps ``exp`` from overflowing for large logits and from
    underflowing every entry to 0 (then 0/0) for very negative ones: the largest entry
    always becomes ``exp(0) = 1``. Shifted logits below −700 are raised to −700 before
    ``exp`` (numpy's ``exp`` is several times slower on arguments that underflow), so a
    weight that would be smaller than about 1e-304 of the largest comes out as that, not as
    an exact 0; in a float64 sum with the largest weight it is 0 all the same.

    Parameters
    ----------
    logits : array_like
    axis : int
        The axis that sums to one.
    out : ndarray, optional
        Where to write the result (may be ``logits`` itself, for an in-place softmax).

    Examples
    --------
    >>> softmax([1000.0, 1000.0, 999.0]).round(4)
    array([0.4223, 0.4223, 0.1554])
    """
    logits = np.asarray(logits, dtype=float)
    top = np.max(logits, axis=axis, keepdims=True)
    if not np.all(np.isfinite(top)):
        raise ValueError(
            "softmax needs at least one finite logit in every row; got a row whose "
            "logits are all -inf, +inf or NaN"
        )
    if out is None:
        out = logits.copy()
    elif out is not logits:
        np.copyto(out, logits)
    shifted_exp(out, axis=axis)
    out /= np.sum(out, axis=axis, keepdims=True)
    return out


def _as_2d(name, A):
    A = np.asarray(A, dtype=float)
    if A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, dim); got shape {A.shape}")
    return A


def softmax_attention(Q, K, V, *, scale=None, key_bias=None, return_weights=False):
    r"""Exact softmax attention, ``softmax(scale · Q Kᵀ + key_bias) V``.

    Row ``i`` of the output is the Nadaraya–Watson estimate at query ``Q[i]``: the values
    averaged with weights :math:`w_{ij} \propto \exp(\mathrm{scale}\, q_i^\top k_j + b_j)`.
    The row maximum of the logits is subtracted before ``exp`` (log-sum-exp), and the
    queries are processed in blocks bounded by scikit-learn's ``working_memory``, so no
    (n_queries × n_keys) matrix exists unless ``return_weights=True``.

    Parameters
    ----------
    Q : array_like of shape (n_queries, d_k)
    K : array_like of shape (n_keys, d_k)
    V : array_like of shape (n_keys,) or (n_keys, d_v)
    scale : float, optional
        Multiplies the dot products. ``None`` means :math:`1/\sqrt{d_k}`, which keeps the
        logits at unit variance when the entries of ``Q`` and ``K`` are independent with
        mean 0 and variance 1 (then :math:`\mathrm{Var}(q^\top k) = d_k`).
    key_bias : array_like of shape (n_keys,), optional
        Added to every query's logit for that key. ``-inf`` removes a key.
        ``key_bias = -½‖k‖²`` with ``scale=1`` turns the dot product into the Gaussian
        kernel ``exp(-½‖q − k‖²)`` (the query-only term cancels in the softmax).
    return_weights : bool
        Also return the (n_queries, n_keys) weight matrix.

    Returns
    -------
    out : ndarray of shape (n_queries,) or (n_queries, d_v)
    weights : ndarray of shape (n_queries, n_keys)
        Only when ``return_weights=True``. Rows are non-negative and sum to one.

    Examples
    --------
    >>> Q = np.array([[0.0], [1.0]])
    >>> K = np.array([[0.0], [1.0]])
    >>> out, w = softmax_attention(Q, K, np.array([1.0, 2.0]), scale=1.0, return_weights=True)
    >>> w.round(4)
    array([[0.5   , 0.5   ],
           [0.2689, 0.7311]])
    """
    Q = _as_2d("Q", Q)
    K = _as_2d("K", K)
    V = np.asarray(V, dtype=float)
    if Q.shape[1] != K.shape[1]:
        raise ValueError(
            f"Q and K must have the same number of columns (d_k); got {Q.shape[1]} and "
            f"{K.shape[1]}"
        )
    if V.ndim not in (1, 2) or V.shape[0] != K.shape[0]:
        raise ValueError(
            f"V must have shape (n_keys,) or (n_keys, d_v) with n_keys={K.shape[0]}; got {V.shape}"
        )
    if K.shape[0] == 0:
        raise ValueError("softmax attention needs at least one key; got K with 0 rows")
    if scale is None:
        scale = 1.0 / np.sqrt(K.shape[1])
    scale = float(scale)
    bias = None
    if key_bias is not None:
        bias = np.asarray(key_bias, dtype=float).ravel()
        if bias.shape != (K.shape[0],):
            raise ValueError(
                f"key_bias must have shape (n_keys,) = ({K.shape[0]},); got {np.shape(key_bias)}"
            )
    V2 = V.reshape(K.shape[0], -1)
    n_queries, n_keys = Q.shape[0], K.shape[0]
    out = np.empty((n_queries, V2.shape[1]))
    weights = np.empty((n_queries, n_keys)) if return_weights else None
    K_scaled = K * scale

    def attend(rows):
        logits = Q[rows] @ K_scaled.T
        if bias is not None:
            logits += bias
        w = softmax(logits, axis=1, out=logits)
        out[rows] = w @ V2
        if return_weights:
            weights[rows] = w

    map_query_blocks(attend, n_queries, n_keys)
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

    Parameters
    ----------
    phi_Q : array_like of shape (n_queries, r)
    phi_K : array_like of shape (n_keys, r)
    V : array_like of shape (n_keys,) or (n_keys, d_v)

    Returns
    -------
    out : ndarray of shape (n_queries,) or (n_queries, d_v)

    Raises
    ------
    ValueError
        If a query's denominator :math:`\phi(q)^\top z` is not positive (signed features,
        such as random Fourier features, can make it so): the ratio would be meaningless.

    Examples
    --------
    >>> phi = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> linear_attention(phi, phi, np.array([3.0, 5.0]))
    array([3., 5.])
    """
    phi_Q = _as_2d("phi_Q", phi_Q)
    phi_K = _as_2d("phi_K", phi_K)
    V = np.asarray(V, dtype=float)
    if phi_Q.shape[1] != phi_K.shape[1]:
        raise ValueError(
            "phi_Q and phi_K must have the same number of features; got "
            f"{phi_Q.shape[1]} and {phi_K.shape[1]}"
        )
    if V.ndim not in (1, 2) or V.shape[0] != phi_K.shape[0]:
        raise ValueError(
            f"V must have shape (n_keys,) or (n_keys, d_v) with n_keys={phi_K.shape[0]}; "
            f"got {V.shape}"
        )
    V2 = V.reshape(phi_K.shape[0], -1)
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
    out = (phi_Q @ S) / denominator[:, None]
    return out.reshape((phi_Q.shape[0],) + V.shape[1:])
