r"""The one reduction: Nadaraya–Watson kernel sums over tiles of keys.

Every exact computation in kernattn — a prediction, the weights, a bandwidth criterion and
its gradient, the near field of linear attention, a partition of a Dask computation,
:func:`kernattn.attention.softmax_attention` — is the same sum over the keys :math:`j` of a
block of queries :math:`i`,

.. math::

    \Sigma_i = \sum_j e^{\ell_{ij} - c_i}\, C_j, \qquad
    \hat y_i = \frac{\Sigma_i[v]}{\Sigma_i[1]},

of the logits :math:`\ell_{ij}` (log-kernels) against columns :math:`C_j` of the keys (the
values, their squares and a 1 for the denominator; the moments of a local line; the
gradient's terms), on a per-query shift :math:`c_i` that cancels in every ratio. It is
computed here, once:

- **keys in tiles, a running maximum** (the online softmax of FlashAttention): each tile's
  logits are formed, the shift is raised to the largest logit seen so far, and the sums so
  far are rescaled by :math:`e^{c_\mathrm{old} - c_\mathrm{new}}`; no (queries × keys)
  matrix exists, and no row underflows to 0/0. Logits known never to be positive (radial
  kernels) can skip the shift (:math:`c = 0`): the caller redoes the rows that underflowed;
- **removed pairs** — a masked key, a query's own row left out of a leave-one-out sum —
  weigh exactly 0 (their logit is :math:`-\infty`);
- **partial sums taken at different shifts merge** (:func:`merge`): over partitions of a
  training set, over chunks of keys, over cells,
  :math:`(c, \Sigma) = (\max(c_a, c_b),\; \Sigma_a e^{c_a - c} + \Sigma_b e^{c_b - c})`;
- **the augmented logit** (:func:`augment_queries`, :func:`augment_keys`): the dot product
  and the Gaussian kernel in one matrix product,
  :math:`[q, -\tfrac12\|q\|^2, 1] \cdot [k, 1, -\tfrac12\|k\|^2 + \log s]
  = -\tfrac12\|q - k\|^2 + \log s`;
- **the row-wise forms** of the same shift: :func:`shift_of` (the finite row maximum),
  :func:`log_sum_exp`, :func:`log_softmax`, :func:`softmax_weights`, :func:`shifted_exp`;
- **sums in power-of-two units** (:func:`times_two_to`, :func:`recount`): a running
  maximum in base two, as causal linear attention carries its state (exact rescaling).

The functions take any array namespace (numpy first; ``xp`` of ``array-api-compat``): on
numpy the tiles reuse one buffer and update in place; other libraries get the same steps
out of place (differentiable on torch).

**Guards on exponentiated logits.** Relative to a row maximum of ``exp(0) = 1``, an entry
below ``exp(−700) ≈ 1e-304`` is 0 in any float64 sum with it, while numpy's ``exp`` takes a
slow path (several times slower) on arguments below about −708 whose results underflow:
shifted logits are floored at −700 (:func:`exp_floor`; −85 in float32). A row whose
unshifted kernel values sum below ``UNDERFLOW`` (or overflow) has lost its information and
must be recomputed with its maximum subtracted (:func:`underflowed`).
"""

import math

import numpy as np
from array_api_compat import (
    array_namespace,
    is_jax_array,
    is_numpy_namespace,
    is_torch_array,
    is_writeable_array,
)
from array_api_compat import device as device_of

from kernattn._core.blocks import KEY_TILE

__all__ = [
    "EXP_FLOOR",
    "UNDERFLOW",
    "augment_keys",
    "augment_queries",
    "centered_sums",
    "constant",
    "exp_bounded",
    "exp_floor",
    "exp_shifted",
    "gaussian_key_bias",
    "kernel_sums",
    "ldexp",
    "log_normalized",
    "log_softmax",
    "log_sum_exp",
    "merge",
    "merge_centered",
    "merge_shifts",
    "recount",
    "rescaling",
    "row_shift",
    "shift_of",
    "shifted_exp",
    "softmax_weights",
    "subtract_row_max",
    "times_two_to",
    "underflowed",
    "updatable",
]


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


def shift_of(logits, axis=-1, *, xp=None):
    """The shift :math:`c` of ``logits`` along ``axis`` (kept): their largest entry, 0 where
    that is not finite (a row with nothing left, where −inf − (−inf) would be NaN)."""
    xp = array_namespace(logits) if xp is None else xp
    top = xp.max(logits, axis=axis, keepdims=True)
    if is_numpy_namespace(xp):
        top[~np.isfinite(top)] = 0.0
        return top
    return xp.where(xp.isfinite(top), top, xp.zeros_like(top))


def _log_total(logits, axis, xp):
    r"""The shifted logits, the shift and :math:`\log \sum e^{\ell - c}` (0 where the sum is
    0: a row with nothing left), and whether the sum is 0."""
    shift = shift_of(logits, axis, xp=xp)
    shifted = logits - shift
    total = xp.sum(xp.exp(shifted), axis=axis, keepdims=True)
    empty = total == 0
    return shifted, shift, xp.log(xp.where(empty, 1, total)), empty


def log_sum_exp(logits, axis=-1, *, keepdims=False, xp=None):
    r""":math:`\log \sum_j e^{\ell_j}` along ``axis``, shifted by the largest logit.

    A row with no finite logit (no keys, every key removed) gives :math:`-\infty`, not NaN;
    a row holding :math:`+\infty` gives :math:`+\infty`. Any array namespace
    (differentiable on torch); an empty ``axis`` gives :math:`-\infty`.

    Examples
    --------
    >>> float(log_sum_exp(np.array([1000.0, 1000.0])))  # doctest: +ELLIPSIS
    1000.693...
    >>> log_sum_exp(np.array([[-np.inf, -np.inf]]))
    array([-inf])
    """
    xp = array_namespace(logits) if xp is None else xp
    if logits.shape[axis] == 0:
        shape = list(logits.shape)
        if keepdims:
            shape[axis] = 1
        else:
            del shape[axis]
        return xp.full(tuple(shape), -math.inf, dtype=logits.dtype)
    _, shift, log_total, empty = _log_total(logits, axis, xp)
    out = xp.where(empty, xp.full_like(log_total, -math.inf), log_total) + shift
    return out if keepdims else xp.squeeze(out, axis=axis)


def log_softmax(logits, axis=-1, *, xp=None):
    r""":math:`\ell_j - \log \sum_l e^{\ell_l}` along ``axis`` (finite or −inf logits): a
    removed entry gives −inf, and so does every entry of a row with nothing left (never
    NaN). Any array namespace."""
    xp = array_namespace(logits) if xp is None else xp
    shifted, _, log_total, _ = _log_total(logits, axis, xp)
    return shifted - log_total


def augment_queries(Q, *, radial=True, xp=None):
    r"""``[q, -½‖q‖², 1]`` (``[q, 0, 1]`` for a plain dot product): queries for one product.

    With :func:`augment_keys`, ``augment_queries(Q) @ augment_keys(K, b).T`` is
    :math:`q^\top k - \tfrac12\|q\|^2 + b_k`; with the Gaussian key bias
    :math:`b_k = -\tfrac12\|k\|^2 + \log s_k` it is :math:`-\tfrac12\|q - k\|^2 + \log s_k`.
    """
    xp = array_namespace(Q) if xp is None else xp
    n = Q.shape[0]
    if radial:
        half = -0.5 * _squared_norms(Q, xp)
    else:
        half = xp.zeros(n, dtype=Q.dtype)
    ones = xp.ones(n, dtype=Q.dtype)
    return xp.concat([Q, half[:, None], ones[:, None]], axis=-1)


def augment_keys(K, bias, *, xp=None):
    r"""``[k, 1, b]``: keys for one product with :func:`augment_queries` (``b`` the key's
    bias, e.g. :math:`-\tfrac12\|k\|^2 + \log s` for the Gaussian kernel)."""
    xp = array_namespace(K) if xp is None else xp
    n = K.shape[0]
    ones = xp.ones(n, dtype=K.dtype)
    return xp.concat([K, ones[:, None], xp.astype(bias, K.dtype)[:, None]], axis=-1)


def gaussian_key_bias(K, log_weight=None, *, xp=None):
    r""":math:`-\tfrac12\|k\|^2 (+ \log s)`: the key bias of the Gaussian kernel."""
    xp = array_namespace(K) if xp is None else xp
    bias = -0.5 * _squared_norms(K, xp)
    return bias if log_weight is None else bias + log_weight


def _squared_norms(A, xp):
    """``‖a‖²`` of every row (numpy's einsum: one pass, the digits every caller expects)."""
    if is_numpy_namespace(xp):
        return np.einsum("...j,...j->...", A, A)
    return xp.sum(A * A, axis=-1)


def _scale_of(top, new_top, exponent, xp, binary=False):
    """``exp((top − new_top) · 2**exponent)`` (``2**(…)`` for ``binary`` logits), 0 where
    ``top`` is −inf (nothing summed yet)."""
    finite = xp.isfinite(top)
    # Where ``top`` is −inf so may ``new_top`` be: −inf − (−inf) is never formed.
    gap = xp.where(finite, top, 0.0) - xp.where(finite, new_top, 0.0)
    if exponent:
        gap = gap * 2.0**exponent if exponent < _STEP else ldexp(gap, exponent, xp)
    if binary:
        gap = gap * _LN2
    return xp.where(finite, xp.exp(gap), 0.0)


# Powers of two up to 2**_STEP are normal numbers in float32, and 2.0**e (a Python float) is
# one for |e| < 1024: larger factors are applied in steps.
_STEP = 100


def ldexp(a, exponent, xp):
    """``a · 2**exponent`` (exact short of over- and underflow), for any integer exponent: a
    power of two beyond the float range is applied in steps, each a normal float32 number
    (the steps go one way, so the intermediate results lie between ``a`` and the result)."""
    if is_numpy_namespace(xp):
        return np.ldexp(a, exponent)
    while exponent:
        step = max(-_STEP, min(_STEP, exponent))
        a = a * 2.0**step
        exponent -= step
    return a


def kernel_sums(
    logits,
    n_keys,
    columns,
    *,
    shift=True,
    floor=True,
    removed=False,
    left_out=None,
    exponent=0,
    tile=None,
    precision=None,
    squared_columns=None,
    fresh=False,
    binary=False,
    xp=None,
):
    r"""Shifted kernel sums :math:`\Sigma_i = \sum_j e^{\ell_{ij} - c_i} C_j` of a block of
    queries, over tiles of keys.

    Parameters
    ----------
    logits : callable
        ``logits(keys, out)``: the block's logits against the keys of the slice ``keys``,
        shape (…, b, len(keys)) (leading batch dimensions broadcast), a new array (the
        reduction works in it, and writes the next tiles' logits into the first tile's)
        or ``out``: ``None``, or a numpy buffer of that shape to write into and return.
    n_keys : int
    columns : array of shape (…, n_keys, m), or callable
        What the weights are summed against; a callable ``columns(weights, keys)`` returns
        a tile's contribution (…, b, m) itself (columns that depend on the query).
    shift : bool
        True: :math:`c_i` is the running maximum of the row's logits (returned). False: the
        logits are known never to be positive and :math:`c_i = 0`; a row whose sums
        underflow is the caller's to redo with ``shift=True``.
    floor : bool
        Raise shifted logits to the ``exp`` floor first (numpy's ``exp`` is several times
        slower where it underflows; a weight below :math:`e^{-700}` of the largest is 0 in
        any sum with it).
    removed : bool
        The logits may hold :math:`-\infty` (masked keys): those weigh exactly 0 (the floor
        would give them :math:`e^{-700}`).
    left_out : tuple of two int arrays, optional
        ``(rows, keys)``: pairs of block rows and key indices that weigh 0 (a query's own
        row and its exact duplicates in a leave-one-out sum). Two-dimensional blocks only.
    exponent : int
        The logits are in units of :math:`2^\mathrm{exponent}` (logits beyond the float
        range are formed in a smaller unit: their differences to the row maximum stay
        exact).
    tile : int, optional
        Keys per tile (default :data:`kernattn._core.blocks.KEY_TILE`).
    precision : dtype, optional
        Exponentiate in this (lower) precision, sum in the columns'.
    squared_columns : array of shape (…, n_keys, m₂), optional
        Also summed, in the same pass, against the *squared* weights:
        :math:`\sum_j e^{2(\ell_{ij} - c_i)} D_j` (what the variance of a linear smoother
        needs: a local polynomial's held-back rule, :mod:`kernattn._local.polynomial`).
        When the running maximum moves by :math:`\Delta` these sums are rescaled by
        :math:`e^{-2\Delta}`, the square of the plain sums' factor.
    fresh : bool
        The callable ``columns`` returns a new array of its own at every call: the first
        tile's is the accumulator (no copy).
    binary : bool
        The logits are base-2 logarithms of the kernel (:math:`\log_2 e` times the natural
        ones; the weights are :math:`2^{\ell - c}`, the shifts come back in base 2): a
        caller that scales its logits anyway folds :math:`\log_2 e` into that scale, and
        torch's in-place ``exp2`` then needs no multiplication first.

    Returns
    -------
    top : array of shape (…, b)
        The shifts :math:`c_i` (in the logits' units, :math:`2^\mathrm{exponent}`; 0 without
        ``shift``; :math:`-\infty` for a row whose every key was removed, whose sums are 0).
    sums : array of shape (…, b, m) (or (…, b, m + m₂) with ``squared_columns``: the
        squared weights' sums last)
    """
    tile = KEY_TILE if tile is None else tile
    if callable(columns):
        column_of = columns
    else:
        xp = array_namespace(columns) if xp is None else xp

        def column_of(weights, keys):
            return weights @ columns[..., keys, :]

    numpy = xp is None or is_numpy_namespace(xp)
    if squared_columns is not None:
        column_of, rescaled = _with_squared(column_of, squared_columns, numpy, xp)
    top, sums = None, None
    settings = (shift, floor, removed, left_out, exponent, tile, precision, binary)
    for running, weights, keys, rescale in _weight_tiles(logits, n_keys, settings, xp, numpy):
        top = running
        part = column_of(weights, keys)
        if rescale is not None and squared_columns is not None:
            rescale = rescaled(rescale, part.shape[-1])
        sums = _accumulate(sums, part, rescale, fresh, numpy, xp)
    if sums is None:
        raise ValueError("kernel sums need at least one key; got 0")
    if not shift:
        zeros = np.zeros if numpy else xp.zeros
        top = zeros(sums.shape[:-1], dtype=sums.dtype)
    return top, sums


def _accumulate(sums, part, rescale, fresh, numpy, xp):
    """``sums · rescale + part``: in place where allowed; the first tile's ``part`` (``sums``
    None) becomes the accumulator, copied unless ``fresh`` (it must not be the caller's)."""
    if sums is None:
        if fresh:
            return part
        if numpy:
            return np.array(part, copy=True)
        return xp.asarray(part, copy=True) if updatable(part) else part
    if numpy:
        if rescale is not None:
            factor = rescale if rescale.ndim == sums.ndim else rescale[..., None]
            sums *= factor.astype(sums.dtype, copy=False)
        sums += part
    elif updatable(sums):
        if rescale is not None:
            sums *= rescale[..., None]
        sums += part
    else:
        if rescale is not None:
            sums = sums * (rescale if rescale.ndim == sums.ndim else rescale[..., None])
        sums = sums + part
    return sums


def _with_squared(column_of, squared_columns, numpy, xp):
    """``column_of`` extended by the squared weights' sums, and the per-column rescale
    (the plain factor, then its square) for a rescale per row."""
    m2 = squared_columns.shape[-1]
    concat = np.concatenate if numpy else xp.concat

    def both(weights, keys):
        plain = column_of(weights, keys)
        if numpy:
            # In the columns' precision: float32 weights of 1e-20 square to nothing.
            square = np.square(weights, dtype=squared_columns.dtype)
        else:
            square = weights * weights
        return concat([plain, square @ squared_columns[..., keys, :]], axis=-1)

    def rescaled(rescale, width):
        factor = rescale[..., None]
        ones = (np.ones if numpy else xp.ones)((width - m2,), dtype=factor.dtype)
        twos = (np.ones if numpy else xp.ones)((m2,), dtype=factor.dtype)
        # Shape (…, b, width): the rows' factor for the plain sums, its square after.
        return concat([factor * ones, (factor * factor) * twos], axis=-1)

    return both, rescaled


def centered_sums(logits, n_keys, values, *, shift=True, floor=True, removed=False, tile=None):
    r"""The kernel's weighted moments of ``values`` about their own mean, in one pass:
    :math:`W_i = \sum_j e^{\ell_{ij} - c_i}`, the weighted mean :math:`m_i` and
    :math:`M_{2,i} = \sum_j e^{\ell_{ij} - c_i} (v_j - m_i)^2` (numpy).

    The tiles' moments are combined with Chan, Golub and LeVeque's update (each tile's
    spread taken about its own mean), so :math:`M_2 / W` keeps its digits where the values
    sit far from 0 compared with their spread (where :math:`E[v^2] - E[v]^2` cancels).
    States of other key sets merge with :func:`merge_centered`.

    Returns
    -------
    top, total, mean, m2 : arrays of shape (b,), (b,), (b, t), (b, t)
    """
    tile = KEY_TILE if tile is None else tile
    values = np.asarray(values)
    state = None
    top = None
    settings = (shift, floor, removed, None, 0, tile, None, False)
    for running, weights, keys, rescale in _weight_tiles(logits, n_keys, settings, None, True):
        top = running
        part = _tile_moments(weights, values[keys])
        if state is None:
            state = part
            continue
        if rescale is not None:
            state = (state[0] * rescale, state[1], state[2] * rescale[:, None])
        state = _chan(state, part)
    if state is None:
        raise ValueError("kernel sums need at least one key; got 0")
    total, mean, m2 = state
    if not shift:
        top = np.zeros(len(total))
    return top, total, mean, m2


def _tile_moments(weights, values):
    total = weights.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (weights @ values) / total[:, None]
    mean = np.where(total[:, None] > 0, mean, 0.0)
    m2 = np.empty_like(mean)
    for o in range(values.shape[1]):
        # Σ e (v − m)² directly: E[v²] − m² would cancel where m is far from 0.
        deviation = values[:, o][None, :] - mean[:, o : o + 1]
        m2[:, o] = np.einsum("ij,ij->i", weights * deviation, deviation)
    return total, mean, m2


def _chan(a, b):
    """Two (total, mean, m2) states on the same shift combined (Chan et al.'s update)."""
    total_a, mean_a, m2_a = a
    total_b, mean_b, m2_b = b
    total = total_a + total_b
    share = np.divide(total_b, total, out=np.zeros_like(total), where=total > 0)[:, None]
    delta = mean_b - mean_a
    return total, mean_a + delta * share, m2_a + m2_b + delta**2 * (total_a[:, None] * share)


def merge_centered(a, b):
    r"""Two :func:`centered_sums` states ``(top, total, mean, m2)`` of the same queries
    merged at the larger shift (a state without keys, shift :math:`-\infty`, adds
    nothing)."""
    top_a, total_a, mean_a, m2_a = a
    top_b, total_b, mean_b, m2_b = b
    top = np.maximum(top_a, top_b)
    scale_a = _scale_of(top_a, top, 0, np)
    scale_b = _scale_of(top_b, top, 0, np)
    state = _chan(
        (total_a * scale_a, mean_a, m2_a * scale_a[:, None]),
        (total_b * scale_b, mean_b, m2_b * scale_b[:, None]),
    )
    return (top,) + state


def _weight_tiles(logits, n_keys, settings, xp, numpy):
    """The loop of the reduction: per tile of keys, the running shift, the tile's weights
    ``exp(ℓ − c)``, the keys' slice and the factor that rescales what was summed before
    to the new shift (``None``: unchanged). ``settings``: :func:`kernel_sums`' ``shift,
    floor, removed, left_out, exponent, tile, precision, binary``."""
    if numpy:
        yield from _numpy_tiles(logits, n_keys, *settings)
    else:
        *settings, precision, binary = settings
        yield from _array_tiles(logits, n_keys, *settings, binary, xp)


def _left_out_in(left_out, start, stop):
    rows, keys = left_out
    here = (keys >= start) & (keys < stop)
    return rows[here], keys[here] - start


def _numpy_tiles(
    logits, n_keys, shift, floor, removed, left_out, exponent, tile, precision, binary
):
    top, buffer = None, None
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for start in range(0, max(n_keys, 0), tile):
            keys = slice(start, min(start + tile, n_keys))
            block = logits(keys, None if buffer is None else buffer[:, : keys.stop - start])
            if buffer is None and block.ndim == 2 and n_keys > tile and block.shape[1] == tile:
                # The next tiles' logits go where the first tile's were (no allocation, no
                # fresh pages to fault in, per tile).
                buffer = block
            if left_out is not None:
                block[_left_out_in(left_out, keys.start, keys.stop)] = -np.inf
            gone = np.isneginf(block) if removed or left_out is not None else None
            rescale = None
            if shift:
                new_top = block.max(axis=-1)
                if top is None:
                    top = new_top
                else:
                    new_top = np.maximum(top, new_top)
                    rescale = _scale_of(top, new_top, exponent, np, binary)
                    top = new_top
                # A row that met only removed keys has no shift yet (−inf): 0 instead.
                current = np.where(np.isfinite(top), top, 0.0).astype(block.dtype, copy=False)
                block -= current[..., None]
            if exponent:
                np.ldexp(block, exponent, out=block)
            if binary:
                block *= _LN2
            if floor:
                np.maximum(block, exp_floor(block.dtype), out=block)
            if precision is not None and np.dtype(precision) != block.dtype:
                weights = np.exp(block.astype(precision)).astype(block.dtype)
            else:
                weights = np.exp(block, out=block)
            if gone is not None:
                weights[gone] = 0.0
            yield top, weights, keys, rescale


def _array_tiles(logits, n_keys, shift, floor, removed, left_out, exponent, tile, binary, xp):
    """The steps of :func:`_numpy_tiles` in any array namespace: in place where the library
    allows it and nothing differentiates through the tile (a torch tensor without
    ``requires_grad``), out of place otherwise (autograd, jax).

    The shifts are constants to a gradient (detached): the result does not depend on them,
    and differentiating through the running maximum would only add terms that cancel.
    """
    if left_out is not None:
        raise TypeError("left_out pairs are for numpy blocks; mask the logits instead")
    top = None
    for start in range(0, max(n_keys, 0), tile):
        keys = slice(start, min(start + tile, n_keys))
        block = logits(keys, None)
        in_place = updatable(block)
        base_two = in_place and is_torch_array(block)
        # One comparison finds the removed keys: the floor would give them exp(floor).
        gone = block == -math.inf if removed and floor and not base_two else None
        rescale = None
        if shift:
            new_top = constant(xp.max(block, axis=-1))
            if top is not None:
                new_top = xp.maximum(top, new_top)
                rescale = _scale_of(top, new_top, exponent, xp, binary)
            top = new_top
            current = top[..., None]
            if removed:
                # A row that met only removed keys has no shift yet (−inf): any finite shift
                # leaves its weights 0; the most negative float is one operation away.
                current = xp.clip(current, min=-xp.finfo(current.dtype).max)
            if in_place:
                block -= current
            else:
                block = block - current
        if exponent:
            block = ldexp(block, exponent, xp)
        floor_value = exp_floor(_numpy_dtype(block.dtype)) if floor else None
        weights = _exp(block, floor_value, base_two, binary, xp)
        if gone is not None:
            weights = _zero_where(weights, gone, in_place, xp)
        yield top, weights, keys, rescale


def updatable(a):
    """Whether a computation may overwrite ``a``: its own array, in a library with in-place
    updates, that no gradient is taken through (autograd keeps what ``exp`` returns)."""
    if is_torch_array(a):
        return not a.requires_grad
    return is_writeable_array(a)


def constant(a):
    """``a`` as a constant to automatic differentiation (torch, jax); ``a`` itself elsewhere."""
    if is_torch_array(a):
        return a.detach()
    if is_jax_array(a):
        import jax

        return jax.lax.stop_gradient(a)
    return a


_LOG2E = math.log2(math.e)
_LN2 = math.log(2.0)


def _exp(block, floor, base_two, binary, xp):
    r"""``exp`` of shifted logits.

    ``exp(max(block, floor))`` in general: numpy's and torch's ``exp`` are many times slower
    where the result underflows (and on −inf), so the floor makes them fast as well as safe.
    With ``base_two`` (a torch tensor that may be overwritten): ``2**(block · log2 e)`` in
    place, since torch's ``exp2`` is three times faster than its ``exp``, at most twice as
    slow where the result underflows, and gives −inf exactly 0: no floor, and no search for
    removed keys. (The product's rounding moves a weight :math:`e^{x}` by a relative
    :math:`|x| \cdot 2^{-24}` in float32, below :math:`2^{-24}/e` of the row's largest.)
    ``binary``: the block holds base-2 logarithms already.
    """
    if base_two:
        return (block if binary else block.mul_(_LOG2E)).exp2_()
    if binary:
        block = block * _LN2
    if floor is not None:
        block = xp.clip(block, min=floor)
    return xp.exp(block)


def _zero_where(weights, gone, in_place, xp):
    """``weights`` with the entries where ``gone`` is true set to exactly 0."""
    if in_place and is_torch_array(weights):
        return weights.masked_fill_(gone, 0.0)
    return xp.where(gone, xp.zeros_like(weights), weights)


def _numpy_dtype(dtype):
    """numpy's float dtype of the same precision as another library's (for the floor)."""
    return np.float32 if "32" in str(dtype) or "16" in str(dtype) else np.float64


def merge(top_a, sums_a, top_b, sums_b, *, xp=None):
    r"""Two partial sums of the same queries taken at different shifts, merged at the
    larger: :math:`c = \max(c_a, c_b)`, :math:`\Sigma = \Sigma_a e^{c_a - c} + \Sigma_b
    e^{c_b - c}`. A side with shift :math:`-\infty` (no keys) adds nothing.

    ``top`` has the leading shape of ``sums`` (one shift per row, or one for a whole array
    of sums); its trailing dimensions broadcast.

    Examples
    --------
    >>> top, sums = merge(np.array([0.0]), np.array([[1.0]]), np.array([1.0]), np.array([[1.0]]))
    >>> top, sums.round(4)
    (array([1.]), array([[1.3679]]))
    """
    xp = array_namespace(sums_a, sums_b) if xp is None else xp
    top_a = xp.asarray(top_a)
    top_b = xp.asarray(top_b)
    top = xp.maximum(top_a, top_b)
    extra = (None,) * (sums_a.ndim - top.ndim)
    index = (...,) + extra
    a = _scale_of(top_a, top, 0, xp)
    b = _scale_of(top_b, top, 0, xp)
    return top, sums_a * a[index] + sums_b * b[index]


def softmax_weights(logits, *, exponent=0, removed=False, xp=None):
    """In place where allowed: ``exp(ℓ − max ℓ)`` (the logits in units of
    ``2**exponent``) normalized along the last axis, floored first; removed (−inf) entries
    weigh exactly 0, and a row with nothing left is all 0. Any array namespace (on numpy
    and on a torch tensor without ``requires_grad`` the logits are overwritten)."""
    xp = array_namespace(logits) if xp is None else xp
    if not is_numpy_namespace(xp):
        return _array_softmax_weights(logits, exponent, xp)
    top = shift_of(logits, xp=xp)
    gone = np.isneginf(logits) if removed else None
    with np.errstate(over="ignore", invalid="ignore"):
        np.subtract(logits, top, out=logits)
        if exponent:
            np.ldexp(logits, exponent, out=logits)
    np.maximum(logits, exp_floor(logits.dtype), out=logits)
    np.exp(logits, out=logits)
    if gone is not None:
        logits[gone] = 0.0
    total = np.sum(logits, axis=-1, keepdims=True)
    logits /= np.where(total > 0, total, 1.0)
    return logits


# Row-wise forms for callers that hold a whole row of logits at once: the bounded exponential
# of the bandwidth criterion, the tilt's normalized weights with their log-normalizer.


def exp_bounded(logits, lowest):
    """In place: :func:`exp_shifted` of logits ≤ 0 whose smallest entry is known to be at
    least ``lowest``: the floor (a pass over the array) is taken only if ``lowest`` lies
    below it, with the same result."""
    if lowest < exp_floor(logits.dtype):
        np.maximum(logits, exp_floor(logits.dtype), out=logits)
    return np.exp(logits, out=logits)


def log_normalized(logits):
    r"""In place (numpy): :math:`e^{\ell_j} / \sum_i e^{\ell_i}` along the last axis, and each
    row's log-normalizer :math:`\log \sum_j e^{\ell_j}`, shifted by the row maximum.

    Not floored: removed (−inf) entries weigh exactly 0 without a search for them, and a
    weight below :math:`e^{-700}` of the row's largest keeps its value. Every row needs a
    finite logit.
    """
    top = np.max(logits, axis=-1)
    np.subtract(logits, top[..., None], out=logits)
    with np.errstate(under="ignore"):
        np.exp(logits, out=logits)
    total = np.sum(logits, axis=-1)
    logits /= total[..., None]
    return np.log(total) + top, logits


# The shift alone, for logits that are scaled or tiled after it (the heads' unit logits).


def subtract_row_max(logits):
    """In place (numpy): the log-sum-exp shift alone, ``ℓ − max ℓ`` along the last axis:
    each row's largest logit becomes 0 before the row is scaled (a row without entries is
    left as it is)."""
    logits -= np.max(logits, axis=-1, keepdims=True, initial=-np.inf)
    return logits


# Shifts chosen apart from the sums: per row with a fallback (the near field), and one
# shift for several runs merged together.


def row_shift(logits, fallback=None, *, axis=-1, xp=None):
    r"""The shift of every row of ``logits``: its largest entry (``axis=None``: one shift,
    the largest of all).

    A row with no finite largest entry (no keys, every key removed) takes the shift of the
    same row of ``fallback`` (other logits of the same queries, such as a far field's), or
    stays :math:`-\infty`.
    """
    xp = array_namespace(logits) if xp is None else xp
    if axis is None:
        return xp.max(logits) if logits.size else -math.inf
    if logits.shape[axis] == 0:
        shape = list(logits.shape)
        del shape[axis]
        top = xp.full(tuple(shape), -math.inf, dtype=logits.dtype)
    else:
        top = xp.max(logits, axis=axis)
    if fallback is not None:
        none = ~xp.isfinite(top)
        if xp.any(none):
            top = xp.where(none, xp.max(fallback, axis=axis), top)
    return top


def rescaling(top, new_top, *, xp=None):
    r"""The factor :math:`e^{c - c'}` that takes sums taken at the shift ``top`` (:math:`c`)
    onto the shift ``new_top`` (:math:`c'`): 0 where ``top`` is :math:`-\infty` (nothing
    was summed). The shifts broadcast against each other (numpy by default)."""
    xp = np if xp is None else xp
    return _scale_of(xp.asarray(top), xp.asarray(new_top), 0, xp)


def merge_shifts(tops, *, xp=None):
    r"""The shift at which partial sums taken at the shifts ``tops`` merge, and each part's
    factor onto it: :math:`c = \max_i c_i` and :math:`e^{c_i - c}` (0 for a part whose
    shift is :math:`-\infty`: it summed nothing), as :func:`merge` for many parts at once.
    """
    xp = array_namespace(tops) if xp is None else xp
    top = xp.max(tops) if tops.shape[0] else xp.asarray(-math.inf)
    return top, _scale_of(tops, top, 0, xp)


def _array_softmax_weights(logits, exponent, xp):
    """The steps of :func:`softmax_weights` in any array namespace."""
    gone = logits == -math.inf
    top = shift_of(logits, xp=xp)
    if updatable(logits):
        logits -= top
    else:
        logits = logits - top
    if exponent:
        logits = ldexp(logits, exponent, xp)
    weights = xp.exp(xp.clip(logits, min=exp_floor(_numpy_dtype(logits.dtype))))
    weights = xp.where(gone, xp.zeros_like(weights), weights)
    total = xp.sum(weights, axis=-1, keepdims=True)
    return weights / xp.where(total > 0, total, xp.ones_like(total))


def times_two_to(a, exponent, xp):
    """``a · 2**exponent`` for an array of integral exponents within the float range (exact
    short of over- and underflow)."""
    if is_numpy_namespace(xp):
        return np.ldexp(a, exponent.astype(int))
    half = xp.floor(exponent / 2)
    two = xp.asarray(2.0, dtype=a.dtype, device=device_of(a))
    # In two halves: 2**exponent alone may lie beyond the range that a · 2**exponent is in.
    return a * xp.pow(two, half) * xp.pow(two, exponent - half)


def recount(unit, new_unit, *sums, xp):
    """Sums counted in units of ``2**unit`` recounted in units of ``2**new_unit`` (arrays of
    integral exponents, ``new_unit >= unit``, broadcasting against the sums): the rescaling
    of a running maximum in base two, exact short of underflow."""
    factor = times_two_to(xp.ones_like(unit), unit - new_unit, xp)
    return tuple(a * factor for a in sums)
