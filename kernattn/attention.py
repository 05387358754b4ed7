r"""Attention as pure functions on arrays, with PyTorch's conventions.

Softmax attention returns, for every query, a weighted average of the values whose weights
are a softmax over the query's similarity (logit) with every key:

.. math::

    \mathrm{out}_i = \sum_j w_{ij} v_j, \qquad
    w_{ij} = \frac{\exp(s\, q_i^\top k_j + b_j + m_{ij})}
                  {\sum_l \exp(s\, q_i^\top k_l + b_l + m_{il})}

with scale :math:`s` (``1/\sqrt{d}`` by default), an optional key bias :math:`b` and an
optional mask :math:`m` (0 where a key takes part, :math:`-\infty` where it does not, or any
additive float). This is the Nadaraya–Watson estimate with kernel
:math:`\kappa(q, k) = \exp(s\, q^\top k + b_k)`. Linear attention replaces the kernel by an
explicit feature map, :math:`\kappa(q, k) = \phi(q)^\top \phi(k)`, so the sums over the keys
are taken once (or, causally, as running sums: an RNN).

The functions take the shapes of :func:`torch.nn.functional.scaled_dot_product_attention`:
queries (…, L, d), keys (…, S, d), values (…, S, d_v), with any leading batch and head
dimensions that broadcast. Any array library that ``array-api-compat`` knows (numpy, torch,
cupy, jax, ``array_api_strict``) goes in, and the result comes back in the same library, on
the same device, in the inputs' floating dtype (float32 stays float32; integers become the
library's default float; float16 and bfloat16 are computed in float32). On torch tensors the
results differentiate through autograd.

**A query with no key to attend to** — every key masked out, every key's bias −inf, a
causal row of an empty key set, or no keys at all — gets the output 0 and weights that are
all 0 (both sums of the Nadaraya–Watson ratio are 0; PyTorch's
``scaled_dot_product_attention`` gives the same). No queries (L = 0) give an empty result.
On every library the empty results keep the batch shape and the dtype, and on torch they
stay in the autograd graph (with zero gradients). No result is ever NaN.

Nothing here holds state. The sums go through the one reduction the estimators use
(:mod:`kernattn._core.sums`): keys in tiles with a running maximum, so that no (L × S) matrix
exists unless the weights are asked for, and the Gaussian smoother's prediction *is*
:func:`softmax_attention` with ``key_bias = -½‖k‖² + log s``.
"""

import math
import numbers
from types import SimpleNamespace

import numpy as np
from array_api_compat import (
    array_namespace,
    is_array_api_obj,
    is_cupy_namespace,
    is_numpy_namespace,
    is_torch_array,
    is_torch_namespace,
)
from array_api_compat import device as device_of
from array_api_compat import size as size_of

from kernattn._core.blocks import KEY_TILE, iter_query_blocks, map_query_blocks
from kernattn._core.sums import (
    constant,
    kernel_sums,
    ldexp,
    recount,
    softmax_weights,
    times_two_to,
    updatable,
)
from kernattn._core.sums import log_softmax as shifted_log_softmax

__all__ = [
    "attention_entropy",
    "effective_neighbors",
    "linear_attention",
    "log_softmax",
    "softmax",
    "softmax_attention",
]

# The array-API functions the computations call, checked up front so that a library that
# lacks one is named in a TypeError instead of failing half-way.
_NEEDED = (
    "abs",
    "astype",
    "clip",
    "concat",
    "exp",
    "isfinite",
    "log",
    "matmul",
    "matrix_transpose",
    "max",
    "min",
    "reshape",
    "sum",
    "take",
    "where",
)
# Logits are kept below 2**(maxexp - _MARGIN) in magnitude, where 2**maxexp is the float
# range (1000 for float64, 104 for float32): a logit minus its row maximum, or a sum of the
# dot product, the bias and the mask, cannot overflow.
_MARGIN = 24
# A (queries × keys) block of this many float64 entries (1 MiB) per thread stays in cache.
_CACHE_ENTRIES = 2**17
# Without a causal mask, torch's blocks on the CPU are this many times larger (within
# _LARGEST_CPU_BLOCK entries): each of a block's dozen operations then runs long enough that
# its dispatch and its threads' start cost little, which pays more than the cache (B = 4,
# H = 8, L = S = 1 024, d = 64: 1.15 times SDPA's time against 1.3 on one thread, 1.15
# against 1.35 on two). A causal block stays small: the keys past the diagonal are skipped
# block by block.
_UNMASKED_BLOCKS = 4
_LARGEST_CPU_BLOCK = 2**22
_LOG2E = math.log2(math.e)
# Causal linear attention: positions per block of the prefix sums. The block's (positions ×
# positions) products are exact, the state carries the rest; O(L · _PREFIX_BLOCK) extra work.
_PREFIX_BLOCK = 128


# ---------------------------------------------------------------- inputs


def _namespace(function, **arrays):
    """The array namespace of the arrays among ``arrays`` (numpy for lists and scalars), or
    a TypeError that names the arguments' libraries and any array-API function missing."""
    given = {name: a for name, a in arrays.items() if a is not None and is_array_api_obj(a)}
    try:
        xp = array_namespace(*given.values()) if given else array_namespace(np.empty(0))
    except TypeError:
        kinds = ", ".join(
            f"{name}: {type(a).__module__}.{type(a).__name__}" for name, a in given.items()
        )
        raise TypeError(
            f"{function} needs arrays of one library; got {kinds} (convert them to one "
            "library first)"
        ) from None
    missing = [name for name in _NEEDED if not hasattr(xp, name)]
    if missing:
        raise TypeError(
            f"{function} needs the array-API functions {', '.join(missing)}, which "
            f"{xp.__name__} lacks"
        )
    return xp


def _default_float(xp, device):
    if is_numpy_namespace(xp):
        return np.float64
    try:
        return xp.__array_namespace_info__().default_dtypes(device=device)["real floating"]
    except (AttributeError, TypeError):
        return xp.float64


def _as_real(name, A, xp, device, *, finite=True):
    """``A`` as an array of real floating numbers of ``xp``, or an error that names ``name``.

    A complex array is refused (casting would drop the imaginary part with only a warning);
    NaN or infinity is refused with ``finite`` (it would become a NaN answer); booleans and
    integers become the library's default float.
    """
    if is_numpy_namespace(xp):
        A = np.asarray(A)
        if A.dtype.kind == "c":
            raise TypeError(
                f"{name} must be real; got a complex array (pass its real part or modulus "
                "explicitly)"
            )
        if A.dtype.kind not in "biuf":
            try:
                A = A.astype(float)
            except (TypeError, ValueError):
                raise TypeError(
                    f"{name} must be an array of real numbers; got dtype {A.dtype}"
                ) from None
        if A.dtype.kind != "f":
            A = A.astype(float)
    else:
        if not is_array_api_obj(A):
            A = xp.asarray(A, device=device)
        if xp.isdtype(A.dtype, "complex floating"):
            raise TypeError(
                f"{name} must be real; got a complex array (pass its real part or modulus "
                "explicitly)"
            )
        if xp.isdtype(A.dtype, ("bool", "integral")):
            A = xp.astype(A, _default_float(xp, device))
        elif not xp.isdtype(A.dtype, "real floating"):
            raise TypeError(f"{name} must be an array of real numbers; got dtype {A.dtype}")
    if finite:
        _magnitude(name, A, xp)
    return A


def _magnitude(name, a, xp):
    """The largest ``|entry|`` of ``a`` (0 if empty), or a ValueError naming ``name`` if an
    entry is NaN or infinite: from the minimum and the maximum (NaN if an entry is), two
    reductions without a temporary array."""
    # Not ``a.size``: on a torch tensor that is a method, never 0.
    if size_of(a) == 0:
        return 0.0
    a = constant(a)
    low, high = float(xp.min(a)), float(xp.max(a))
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{name} contains NaN or infinite values; every entry must be finite")
    return max(abs(low), abs(high))


def _as_columns(value, n_keys):
    """``value`` as (…, S, d_v) (a vector of S values as one column), and whether it was a
    vector; an error naming the shape otherwise."""
    one_value = value.ndim == 1
    if one_value:
        value = value[:, None]
    if value.ndim < 2 or value.shape[-2] != n_keys:
        raise ValueError(
            f"value must have shape (..., S, d_v) or (S,) with S = {n_keys} keys; got shape "
            f"{tuple(value.shape) if not one_value else (value.shape[0],)}"
        )
    return value, one_value


def _float_dtypes(xp, *arrays):
    """The result's dtype (the arrays' promoted floating dtype) and the dtype to compute in
    (float32 for dtypes of fewer bits)."""
    dtype = xp.result_type(*(a.dtype for a in arrays))
    if xp.finfo(dtype).bits < 32:
        return dtype, xp.float32
    return dtype, dtype


def _check_scale(scale):
    """``scale`` as a float (None stays None), or an error that names it."""
    if scale is None:
        return None
    value = scale
    if is_array_api_obj(value) and not isinstance(value, (bool, np.bool_)):
        shape = getattr(value, "shape", None)
        dtype = str(getattr(value, "dtype", ""))
        if shape == () and ("int" in dtype or "float" in dtype) and "complex" not in dtype:
            value = float(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"scale must be a finite real number or None (1/√d); got {scale!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"scale must be a finite real number or None (1/√d); got {value}")
    return value


def _batch_shape(**shapes):
    """The broadcast of the arguments' batch shapes, or an error that lists them."""
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(
            f"the batch dimensions (all but the last two) must broadcast; got {listed}"
        ) from None


def _exponent(a, xp, finite_only=False):
    """The exponent ``e`` of a power of two with ``|a| < 2**e`` (0 for an empty or zero array;
    with ``finite_only``, over the finite entries)."""
    if size_of(a) == 0:
        return 0
    a = constant(a)
    if finite_only:
        a = xp.where(xp.isfinite(a), a, xp.zeros_like(a))
    largest = max(abs(float(xp.min(a))), abs(float(xp.max(a))))
    return math.frexp(largest)[1]


def _safe_exponent(xp, dtype):
    return int(math.log2(float(xp.finfo(dtype).max))) + 1 - _MARGIN


class _Flat:
    """An operand whose batch dimensions are flattened to one, read against the broadcast
    batch: which of its own entries each of the N entries of the broadcast batch uses."""

    def __init__(self, array, batch, core, xp):
        shape = tuple(array.shape)
        own = shape[: len(shape) - core]
        own = (1,) * (len(batch) - len(own)) + own
        self.core = shape[len(shape) - core :]
        self.array = xp.reshape(array, (math.prod(own),) + self.core)
        self.xp = xp
        if own == batch:
            self.kind, self.index = "same", None
        elif math.prod(own) == 1:
            self.kind, self.index = "one", None
        else:
            self.kind = "take"
            own_index = np.arange(math.prod(own)).reshape(own)
            self.index = np.broadcast_to(own_index, batch).ravel()

    def heads(self, heads, *core):
        """The entries of the batch slice ``heads`` (a leading 1 where all are the same),
        sliced by ``core`` in the trailing dimensions first (a mask's block)."""
        part = self.array[(slice(None),) + core] if core else self.array
        if self.kind == "same":
            return part[heads, ...]
        if self.kind == "one":
            return part
        index = self.index[heads]
        if np.all(index == index[0]):
            return part[int(index[0]) : int(index[0]) + 1, ...]
        if np.all(np.diff(index) == 1):
            return part[int(index[0]) : int(index[-1]) + 1, ...]
        xp = self.xp
        return xp.take(part, xp.asarray(index, device=device_of(part)), axis=0)


def _segments(start, stop, length):
    """Split the flattened (batch × query) rows ``start:stop`` into ``(heads, rows)``: whole
    heads together, partial ones apart."""
    while start < stop:
        head, row = divmod(start, length)
        if row == 0 and stop - start >= length:
            n = (stop - start) // length
            yield slice(head, head + n), slice(0, length)
            start += n * length
        else:
            end = min(stop, (head + 1) * length)
            yield slice(head, head + 1), slice(row, end - head * length)
            start = end


def _add(block, term, in_place):
    """``block + term``, in place when allowed and the sum has ``block``'s shape."""
    if in_place and np.broadcast_shapes(tuple(term.shape), tuple(block.shape)) == tuple(
        block.shape
    ):
        block += term
        return block
    return block + term


# ---------------------------------------------------------------- softmax


def _masked_logits(name, logits, mask, xp):
    """``logits`` (real, finite or −inf) with the entries where the boolean ``mask`` is
    False set to −inf."""
    device = device_of(logits) if is_array_api_obj(logits) else None
    logits = _as_real(name, logits, xp, device, finite=False)
    if size_of(logits) and bool(xp.any(xp.isnan(logits) | (logits == math.inf))):
        raise ValueError(f"{name} must be finite or -inf; got NaN or +inf")
    if mask is None:
        return logits
    mask = _as_mask(mask, xp, device)
    if not xp.isdtype(mask.dtype, "bool"):
        raise TypeError(f"mask must be a boolean array (True takes part); got dtype {mask.dtype}")
    try:
        np.broadcast_shapes(tuple(mask.shape), tuple(logits.shape))
    except ValueError:
        raise ValueError(
            f"mask must broadcast to the shape of the logits {tuple(logits.shape)}; got "
            f"{tuple(mask.shape)}"
        ) from None
    return xp.where(mask, logits, xp.full_like(logits, -math.inf))


def _as_mask(mask, xp, device):
    if is_array_api_obj(mask):
        return mask
    return np.asarray(mask) if is_numpy_namespace(xp) else xp.asarray(mask, device=device)


def softmax(logits, axis=-1, out=None, *, mask=None):
    """Numerically stable softmax: ``exp(s - max s) / sum exp(s - max s)``.

    Subtracting the maximum keeps ``exp`` from overflowing for large logits and from
    underflowing every entry to 0 (then 0/0) for very negative ones: the largest entry
    always becomes ``exp(0) = 1``. Shifted logits below −700 (−85 in float32) are raised to
    that before ``exp`` (``exp`` is several times slower on arguments that underflow), so a
    weight that would be smaller than about 1e-304 of the largest comes out as that, not as
    an exact 0; in a sum with the largest weight it is 0 all the same. A logit of ``-inf``
    (or a False in ``mask``) is different: it removes its entry, whose weight is exactly 0,
    and a row with nothing left gets weights that are all 0.

    Parameters
    ----------
    logits : array of real numbers, any array-API library
        Finite or ``-inf``, of any shape.
    axis : int
        The axis that sums to one.
    out : ndarray, optional
        For numpy logits: where to write the result (may be ``logits`` itself, for an
        in-place softmax).
    mask : boolean array, optional
        Broadcast against ``logits``: True takes part, False removes the entry.

    Returns
    -------
    weights : array of the shape, library and floating dtype of ``logits``
        Non-negative; every row sums to 1, or is all 0 where nothing takes part.

    Raises
    ------
    ValueError
        If a logit is NaN or ``+inf``.

    Examples
    --------
    >>> softmax([1000.0, 1000.0, 999.0]).round(4)
    array([0.4223, 0.4223, 0.1554])
    >>> softmax([[0.0, 1.0], [0.0, 1.0]], mask=[[True, True], [True, False]]).round(4)
    array([[0.2689, 0.7311],
           [1.    , 0.    ]])
    >>> softmax([-np.inf, -np.inf])
    array([0., 0.])
    """
    xp = _namespace("softmax", logits=logits, mask=mask)
    given = logits
    logits = _masked_logits("logits", logits, mask, xp)
    if out is not None and not is_numpy_namespace(xp):
        raise TypeError("out is for numpy logits; assign the result instead")
    moved = xp.moveaxis(logits, axis, -1)
    if not (out is given and logits is given):
        # The softmax works in place: on a copy, unless asked to overwrite the logits.
        moved = xp.asarray(moved, copy=True)
    weights = xp.moveaxis(softmax_weights(moved, removed=True, xp=xp), -1, axis)
    if out is None:
        return weights
    np.copyto(out, weights)
    return out


def log_softmax(logits, axis=-1, *, mask=None):
    """Log of :func:`softmax`, computed as ``logits - logsumexp(logits)``.

    A removed entry (``-inf``, or False in ``mask``) gives ``-inf``, and a row with nothing
    left gives ``-inf`` everywhere (the log of weights that are all 0), never NaN. NaN or
    ``+inf`` logits raise ``ValueError``.

    Examples
    --------
    >>> log_softmax([[0.0, 0.0], [-np.inf, -np.inf]])
    array([[-0.69314718, -0.69314718],
           [       -inf,        -inf]])
    >>> log_softmax([0.0, 0.0, 5.0], mask=[True, True, False])
    array([-0.69314718, -0.69314718,        -inf])
    """
    xp = _namespace("log_softmax", logits=logits, mask=mask)
    logits = _masked_logits("logits", logits, mask, xp)
    return shifted_log_softmax(logits, axis, xp=xp)


# ---------------------------------------------------------------- softmax attention


def _logit_units(query, key, scale, additive, xp, dtype, q_size, k_size):
    """Queries, scaled keys, additive terms and the exponent ``m`` such that the logits are
    ``(query @ key_scaledᵀ + additive) · 2**m``, every term below ``2**safe``.

    For ordinary inputs ``m = 0`` and this is ``query, scale · key, additive`` unchanged.
    When ``scale · qᵀk`` or an additive term could overflow (a scale of 1e300, features near
    1e200), the queries and keys are divided by powers of two and the logits are counted in
    units of ``2**m``: the differences to the row maximum that matter stay exact, and those
    that overflow when multiplied back by ``2**m`` are far below the ``exp`` floor, a weight
    of 0 anyway.
    """
    safe = _safe_exponent(xp, dtype)
    d = query.shape[-1]
    q_exp, k_exp = math.frexp(q_size)[1], math.frexp(k_size)[1]
    scale_exp = math.frexp(abs(scale))[1]
    # |scale · qᵀk| < 2**dot_exp, a sum of d products each below 2**(s + q + k).
    dot_exp = scale_exp + q_exp + k_exp + (d - 1).bit_length() if scale else 0
    add_exp = max(
        (_exponent(a, xp, finite_only=True) for a in additive if a is not None), default=0
    )
    largest = max(dot_exp, scale_exp + k_exp, add_exp)
    if largest <= safe:
        return query, key * scale, additive, 0
    m = max(0, dot_exp - safe, add_exp - safe)
    query = ldexp(query, -q_exp, xp)
    key_scaled = ldexp(key, -k_exp, xp) * math.ldexp(scale, q_exp + k_exp - m)
    additive = [None if a is None else ldexp(a, -m, xp) for a in additive]
    return query, key_scaled, additive, m


def _cache_entries(xp, device, causal=False):
    """Float64 entries of a (queries × keys) block for libraries other than numpy (whose
    blocks run on threads, see :mod:`kernattn._core.blocks`).

    torch on the CPU runs each operation on all its threads, each thread on its share of
    the rows: a block of about a MiB per thread keeps every share in that core's cache;
    without a causal mask, blocks ``_UNMASKED_BLOCKS`` times larger (at most
    ``_LARGEST_CPU_BLOCK`` entries) spend less on starting each operation. An accelerator
    wants large operations: blocks of 128 MiB, within ``working_memory``.
    """
    if is_cupy_namespace(xp) or getattr(device, "type", "cpu") != "cpu":
        return 2**24
    if getattr(device, "platform", "cpu") != "cpu":  # a jax device
        return 2**24
    threads = 1
    if is_torch_namespace(xp):
        import torch

        threads = torch.get_num_threads()
        if not causal:
            return min(_CACHE_ENTRIES * _UNMASKED_BLOCKS * threads, _LARGEST_CPU_BLOCK)
    return _CACHE_ENTRIES * threads


def _empty_attention(query, key, value, batch, dtype, xp):
    """The output (…, L, d_v) and weights (…, L, S) when L, S or the batch is 0: empty, or
    0 for S = 0 (a sum over no keys), as PyTorch's ``scaled_dot_product_attention`` gives.

    Both are products of the inputs rather than new zeros, so that on torch they stay in
    the autograd graph (their gradients are 0): ``out.sum().backward()`` works as for any
    other shape. A product over an empty dimension is exactly 0, never NaN.
    """
    weights = xp.matmul(query, xp.matrix_transpose(key))
    out = xp.matmul(weights, value)
    n_queries, n_keys, d_v = query.shape[-2], key.shape[-2], value.shape[-1]
    out = xp.broadcast_to(out, batch + (n_queries, d_v))
    weights = xp.broadcast_to(weights, batch + (n_queries, n_keys))
    return xp.astype(out, dtype), xp.astype(weights, dtype)


def _value_columns(value, xp, numpy):
    """The columns the weights are summed against: ``[v, 1]`` for numpy (one product
    gives the numerator and the denominator), the values alone elsewhere (the row sum is
    taken apart: torch's product with 65 columns is markedly slower than with 64)."""
    if not numpy:
        return value
    ones = xp.ones(value.shape[:-1] + (1,), dtype=value.dtype)
    return xp.concat([value, ones], axis=-1)


def softmax_attention(
    query,
    key,
    value,
    attn_mask=None,
    is_causal=False,
    scale=None,
    *,
    key_bias=None,
    return_weights=False,
):
    r"""Exact softmax attention, ``softmax(scale · query keyᵀ + key_bias + mask) value``.

    Row ``i`` of the output is the Nadaraya–Watson estimate at query ``i``: the values
    averaged with weights :math:`w_{ij} \propto \exp(\mathrm{scale}\, q_i^\top k_j + b_j
    + m_{ij})`. The arguments and shapes are those of
    :func:`torch.nn.functional.scaled_dot_product_attention`; the results agree with it to
    rounding. Keys are visited in tiles with a running maximum of the logits (the online
    softmax of FlashAttention, :func:`kernattn._core.sums.kernel_sums`), and queries in blocks
    bounded by scikit-learn's ``working_memory``, so no (L × S) matrix exists unless
    ``return_weights=True``.

    Any finite inputs give a finite answer: each output row is a weighted average of the
    values and lies within their range (per column), also for logits far beyond the float
    range (a scale of 1e300), where the weights become those of the largest logits. A query
    with no key to attend to gets 0 (weights all 0).

    Parameters
    ----------
    query : array of shape (..., L, d)
        Finite real numbers, any array-API library (numpy, torch, cupy, jax,
        array_api_strict). A query or key at infinity has no defined logit (∞ · 0, ∞ − ∞):
        NaN or ±inf in ``query`` or ``key`` raise ``ValueError``.
    key : array of shape (..., S, d)
    value : array of shape (..., S, d_v) or (S,)
        Finite real numbers. The leading (batch, head) dimensions of the three arrays, of
        ``attn_mask`` and of ``key_bias`` broadcast against each other.
    attn_mask : array broadcastable to (..., L, S), optional
        Boolean: True takes part (as in PyTorch), False removes the key for that query.
        Real floating: added to the logits (finite, or ``-inf`` to remove the key).
    is_causal : bool
        Query ``i`` attends to keys ``j <= i`` only: the top-left aligned lower triangle
        ``tril(ones(L, S))``, as in PyTorch (for L ≠ S too). Applies together with
        ``attn_mask``. Tiles of keys above the diagonal are skipped, not masked.
    scale : float, optional
        A finite real number that multiplies the dot products. ``None`` means
        :math:`1/\sqrt{d}`, which keeps the logits at unit variance when the entries of
        ``query`` and ``key`` are independent with mean 0 and variance 1 (then
        :math:`\mathrm{Var}(q^\top k) = d`). 0 gives every key that takes part the same
        weight; a negative scale favours the least similar keys.
    key_bias : array of shape (..., S), optional
        Added to every query's logit for that key: finite, or ``-inf`` to remove the key
        (its weight is then exactly 0). ``key_bias = -½‖k‖²`` with ``scale=1`` turns the dot
        product into the Gaussian kernel ``exp(-½‖q − k‖²)`` (the query-only term cancels in
        the softmax).
    return_weights : bool
        Also return the (..., L, S) weights.

    Returns
    -------
    out : array of shape (..., L, d_v), or (..., L) for a 1-D ``value``
        In the library, on the device and in the floating dtype of the inputs.
    weights : array of shape (..., L, S)
        Only when ``return_weights=True``. Rows are non-negative and sum to one (or are all 0
        for a query with no key to attend to).

    Raises
    ------
    TypeError
        ``scale`` is not a real number; an array is complex or not numeric; an integer
        ``attn_mask`` (ambiguous: pass booleans or additive floats); arrays of different
        libraries; a library without a function the computation needs (named).
    ValueError
        ``scale`` is NaN or infinite; NaN or infinity in ``query``, ``key`` or ``value``; NaN
        or ``+inf`` in ``key_bias`` or a float ``attn_mask``; shapes that do not match or
        broadcast.

    Examples
    --------
    >>> Q = np.array([[0.0], [1.0]])
    >>> K = np.array([[0.0], [1.0]])
    >>> out, w = softmax_attention(Q, K, np.array([1.0, 2.0]), scale=1.0, return_weights=True)
    >>> w.round(4)
    array([[0.5   , 0.5   ],
           [0.2689, 0.7311]])
    >>> softmax_attention(Q, K, np.array([1.0, 2.0]), is_causal=True, scale=1.0).round(4)
    array([1.    , 1.7311])
    """
    scale = _check_scale(scale)
    xp = _namespace(
        "softmax_attention",
        query=query,
        key=key,
        value=value,
        attn_mask=attn_mask,
        key_bias=key_bias,
    )
    problem = _attention_problem(query, key, value, attn_mask, key_bias, xp)
    if scale is None:
        scale = 1.0 / math.sqrt(problem.query.shape[-1])
    if problem.n_keys == 0 or problem.n_queries == 0 or math.prod(problem.batch) == 0:
        # No key to attend to: the sums are 0 (see the module docstring).
        p = problem
        out, weights = _empty_attention(p.query, p.key, p.value, p.batch, p.dtype, xp)
        out = out[..., 0] if p.one_value else out
        return (out, weights) if return_weights else out
    blocks = _AttentionBlocks(problem, scale, is_causal, return_weights)
    sums, weights = blocks.run()
    out = _averages(sums, blocks, problem)
    if not return_weights:
        return out
    batch, n_queries, n_keys = problem.batch, problem.n_queries, problem.n_keys
    return out, xp.astype(xp.reshape(weights, batch + (n_queries, n_keys)), problem.dtype)


def _attention_problem(query, key, value, attn_mask, key_bias, xp):
    """The arguments of :func:`softmax_attention` checked (an error naming the argument),
    as arrays of the floating dtype to compute in, with the batch shape and the values'
    range per column (a namespace of them)."""
    device = next((device_of(a) for a in (query, key, value) if is_array_api_obj(a)), None)
    query = _as_real("query", query, xp, device, finite=False)
    key = _as_real("key", key, xp, device, finite=False)
    value = _as_real("value", value, xp, device, finite=False)
    # The largest magnitudes (one pass each) check finiteness and size the logits' units.
    q_size, k_size = _magnitude("query", query, xp), _magnitude("key", key, xp)
    for name, array in (("query", query), ("key", key)):
        if array.ndim < 2:
            raise ValueError(
                f"{name} must have shape (..., {'L' if name == 'query' else 'S'}, d): at "
                f"least 2 dimensions; got shape {tuple(array.shape)}"
            )
    d, n_queries, n_keys = query.shape[-1], query.shape[-2], key.shape[-2]
    if key.shape[-1] != d:
        raise ValueError(
            f"query and key must have the same last dimension (d); got {d} and {key.shape[-1]}"
        )
    if d == 0:
        raise ValueError("query and key need at least one feature (d >= 1); got 0")
    value, one_value = _as_columns(value, n_keys)
    # Per column: a weighted average lies within the range of the values (see below).
    lowest, highest, v_size = None, None, 0.0
    if size_of(value):
        lowest = xp.min(value, axis=-2, keepdims=True)
        highest = xp.max(value, axis=-2, keepdims=True)
        v_size = _magnitude("value", xp.concat([lowest, highest], axis=-2), xp)
    bias = _checked_key_bias(key_bias, n_keys, xp, device)
    mask, additive_mask = _checked_mask(attn_mask, n_queries, n_keys, xp, device)
    arrays = [a for a in (query, key, value, bias, additive_mask) if a is not None]
    dtype, work = _float_dtypes(xp, *arrays)
    query, key, value = (xp.astype(a, work, copy=False) for a in (query, key, value))
    if bias is not None:
        bias = xp.astype(bias, work, copy=False)
    if additive_mask is not None:
        additive_mask = xp.astype(additive_mask, work, copy=False)
    batch = _batch_shape(
        query=tuple(query.shape[:-2]),
        key=tuple(key.shape[:-2]),
        value=tuple(value.shape[:-2]),
        key_bias=() if bias is None else tuple(bias.shape[:-1]),
        attn_mask=tuple(
            (mask if mask is not None else additive_mask).shape[:-2]
            if attn_mask is not None
            else ()
        ),
    )
    return SimpleNamespace(
        xp=xp,
        device=device,
        query=query,
        key=key,
        value=value,
        bias=bias,
        mask=mask,
        additive_mask=additive_mask,
        one_value=one_value,
        lowest=lowest,
        highest=highest,
        sizes=(q_size, k_size, v_size),
        dtype=dtype,
        work=work,
        batch=batch,
        n_queries=n_queries,
        n_keys=n_keys,
        d_v=value.shape[-1],
    )


def _checked_key_bias(key_bias, n_keys, xp, device):
    """``key_bias`` as real floats of shape (…, S), finite or −inf (None stays None)."""
    if key_bias is None:
        return None
    bias = _as_real("key_bias", key_bias, xp, device, finite=False)
    if bias.ndim == 0 or bias.shape[-1] != n_keys:
        raise ValueError(
            f"key_bias must have shape (..., S) with S = {n_keys} keys; got shape "
            f"{tuple(bias.shape)}"
        )
    if bool(xp.any(xp.isnan(bias) | (bias == math.inf))):
        raise ValueError("key_bias must be finite, or -inf to remove a key; got NaN or +inf")
    return bias


def _checked_mask(attn_mask, n_queries, n_keys, xp, device):
    """``attn_mask`` as ``(boolean mask, None)`` or ``(None, additive mask)`` of at least two
    dimensions, broadcasting to (…, L, S); ``(None, None)`` without one."""
    if attn_mask is None:
        return None, None
    mask = _as_mask(attn_mask, xp, device)
    if mask.ndim < 2:
        mask = xp.reshape(mask, (1,) * (2 - mask.ndim) + tuple(mask.shape))
    if not (mask.shape[-2] in (1, n_queries) and mask.shape[-1] in (1, n_keys)):
        raise ValueError(
            f"attn_mask must broadcast to (..., L, S) = (..., {n_queries}, {n_keys}); got "
            f"shape {tuple(mask.shape)}"
        )
    if xp.isdtype(mask.dtype, "bool"):
        return mask, None
    if not xp.isdtype(mask.dtype, "real floating"):
        raise TypeError(
            "attn_mask must be boolean (True takes part) or real floating (added to "
            f"the logits); got dtype {mask.dtype} (for a 0/1 mask pass mask == 1)"
        )
    if bool(xp.any(xp.isnan(mask) | (mask == math.inf))):
        raise ValueError("attn_mask must be finite, or -inf to remove a key; got NaN or +inf")
    return None, mask


class _AttentionBlocks:
    """The sums ``[Σ_j w_ij v_j, Σ_j w_ij]`` of softmax attention, by blocks of the flattened
    (batch × query) rows, each through the reduction (keys in tiles with a running maximum),
    or the weights of every row when they are asked for.

    Holds the operands with their batch dimensions flattened (:class:`_Flat`), in units
    where no logit and no weighted sum of the values can overflow (:func:`_logit_units`).
    """

    def __init__(self, problem, scale, is_causal, return_weights):
        p = problem
        xp = self.xp = p.xp
        self.numpy = numpy = is_numpy_namespace(xp)
        self.torch = is_torch_namespace(xp)
        arrays = (p.query, p.key, p.value, p.bias, p.additive_mask)
        self.grad = not all(a is None or updatable(a) for a in arrays)
        self.device, self.work = p.device, p.work
        self.n_queries, self.n_keys, self.d_v = p.n_queries, p.n_keys, p.d_v
        self.batch = p.batch
        self.is_causal, self.return_weights = is_causal, return_weights
        q_size, k_size, v_size = p.sizes
        # torch, in place, with nothing added to the dot products: logits in base 2, log₂ e
        # folded into the keys' scale (the reduction's exp2 then needs no product first).
        self.binary = (
            self.torch
            and not (self.grad or return_weights)
            and p.bias is None
            and p.additive_mask is None
        )
        if self.binary:
            scale = scale * _LOG2E
        query, key_scaled, (bias, additive_mask), self.unit_exponent = _logit_units(
            p.query, p.key, scale, [p.bias, p.additive_mask], xp, p.work, q_size, k_size
        )
        # Values near the float limit: a weighted sum rounding a few ulps above its largest
        # term would overflow, so average them in a smaller unit (a power of two: exact).
        value_exp = math.frexp(v_size)[1]
        safe = _safe_exponent(xp, p.work)
        self.value_exponent = value_exp - safe if value_exp > safe else 0
        value = p.value
        lowest, highest = (xp.astype(a, p.work, copy=False) for a in (p.lowest, p.highest))
        if self.value_exponent:
            value, lowest, highest = (
                ldexp(a, -self.value_exponent, xp) for a in (value, lowest, highest)
            )
        self.lowest, self.highest = lowest, highest
        self.Q = _Flat(query, p.batch, 2, xp)
        self.K = _Flat(key_scaled, p.batch, 2, xp)
        self.C = _Flat(_value_columns(value, xp, numpy), p.batch, 2, xp)
        self.B = None if bias is None else _Flat(bias, p.batch, 1, xp)
        self.M = None
        self.boolean_mask = p.mask is not None
        if p.mask is not None or additive_mask is not None:
            self.M = _Flat(p.mask if p.mask is not None else additive_mask, p.batch, 2, xp)
        self.mask_rows = self.M is not None and self.M.core[0] == p.n_queries
        self.mask_keys = self.M is not None and self.M.core[1] == p.n_keys
        # Whether a logit can be −inf (a key removed): only then are the removed keys looked
        # for; and whether a query can be left with no key (the causal mask always leaves
        # key 0).
        empty = p.mask is not None
        for additive in (bias, additive_mask):
            empty = empty or (additive is not None and bool(xp.any(additive == -math.inf)))
        self.empty = empty
        self.removed = empty or is_causal
        self.minus_inf = None
        # The operators (@, .mT) are the array API's and skip array-api-compat's wrappers,
        # whose overhead shows at a few hundred products per call; numpy 1.x arrays have no
        # .mT.
        self.transpose = (lambda a: np.swapaxes(a, -1, -2)) if numpy else (lambda a: a.mT)

    def logits(self, heads, rows, keys):
        """The logits of the batch slice ``heads`` and query rows ``rows`` against the keys
        ``keys``: the scaled dot products, the key bias, the mask and the causal mask."""
        xp, device = self.xp, self.device
        block = self.Q.heads(heads)[:, rows, :] @ self.transpose(self.K.heads(heads)[:, keys, :])
        in_place = updatable(block)
        if self.B is not None:
            block = _add(block, self.B.heads(heads)[:, None, keys], in_place)
        if self.M is not None:
            here = self.M.heads(
                heads,
                rows if self.mask_rows else slice(None),
                keys if self.mask_keys else slice(None),
            )
            if self.boolean_mask:
                block = self._remove(block, ~here, in_place)
            else:
                block = _add(block, here, in_place)
        if self.is_causal and keys.stop - 1 > rows.start:
            # Keys after the query (top-left aligned, as tril(ones(L, S))) are removed: the
            # keys before the block's first query are seen by all its queries, so only the
            # columns from there on (at most a square of the block's rows) are masked.
            first = max(keys.start, rows.start + 1)
            later = (
                xp.arange(first, keys.stop, device=device)[None, :]
                > xp.arange(rows.start, rows.stop, device=device)[:, None]
            )
            if in_place and is_torch_array(block):
                block[..., first - keys.start :].masked_fill_(later, -math.inf)
            else:
                seen = xp.zeros(
                    (rows.stop - rows.start, first - keys.start), dtype=xp.bool, device=device
                )
                block = self._remove(block, xp.concat([seen, later], axis=-1), in_place)
        return block

    def _remove(self, block, gone, in_place):
        """``block`` with −inf where ``gone`` is true (in place on torch when allowed)."""
        if (
            in_place
            and is_torch_array(block)
            and tuple(np.broadcast_shapes(tuple(gone.shape), tuple(block.shape)))
            == tuple(block.shape)
        ):
            return block.masked_fill_(gone, -math.inf)
        if self.minus_inf is None:
            self.minus_inf = self.xp.asarray(-math.inf, dtype=self.work, device=self.device)
        return self.xp.where(gone, self.minus_inf, block)

    def _column_of(self, columns, destination=None):
        """The weights against the value columns and 1: with numpy the columns hold the 1
        (one product); elsewhere the row sum is taken apart and appended. With a
        ``destination`` (torch, no gradient), the first tile's sums are written there
        (no concatenation, no copy into the result later)."""
        if self.numpy:
            return columns
        xp = self.xp
        fresh = [destination]

        def product(w, keys):
            into = fresh[0]
            fresh[0] = None
            if into is not None and tuple(w.shape[:-1]) == tuple(into.shape[:-1]):
                torch = _torch()
                torch.matmul(w, columns[:, keys, :], out=into[..., :-1])
                torch.sum(w, dim=-1, out=into[..., -1])
                return into
            return xp.concat([w @ columns[:, keys, :], xp.sum(w, axis=-1)[..., None]], axis=-1)

        return product

    def attend(self, flat_rows):
        """The sums ``[Σ w v, Σ w]`` of the flattened (batch × query) rows ``flat_rows``
        (and their weights): the division, the clip and the empty rows are the caller's,
        once for all the blocks."""
        xp, n_keys, d_v = self.xp, self.n_keys, self.d_v
        sums, weights = [], []
        for heads, rows in _segments(flat_rows.start, flat_rows.stop, self.n_queries):
            n_heads, n_rows = heads.stop - heads.start, rows.stop - rows.start
            columns = self.C.heads(heads)
            destination = None
            if self.out is not None:
                first = heads.start * self.n_queries + rows.start
                destination = xp.reshape(
                    self.out[first : first + n_heads * n_rows, :], (n_heads, n_rows, d_v + 1)
                )
            if self.return_weights:
                w = softmax_weights(
                    self.logits(heads, rows, slice(0, n_keys)),
                    exponent=self.unit_exponent,
                    removed=True,
                    xp=xp,
                )
                w = xp.broadcast_to(w, (n_heads, n_rows, n_keys))
                if self.numpy:
                    part = w @ columns
                else:
                    part = self._column_of(columns)(w, slice(0, n_keys))
                weights.append(xp.reshape(w, (n_heads * n_rows, n_keys)))
            else:
                _, part = kernel_sums(
                    lambda keys, buffer, heads=heads, rows=rows: self.logits(heads, rows, keys),
                    min(n_keys, rows.stop) if self.is_causal else n_keys,
                    self._column_of(columns, destination),
                    removed=self.removed,
                    exponent=self.unit_exponent,
                    tile=self.tile,
                    fresh=not self.numpy,
                    binary=self.binary,
                    xp=xp,
                )
            part = xp.broadcast_to(part, (n_heads, n_rows, d_v + 1))
            if destination is None:
                sums.append(xp.reshape(part, (n_heads * n_rows, d_v + 1)))
            elif part is not destination:
                destination[...] = part
        return sums, weights

    def run(self):
        """The sums of every row, shape (…, L, d_v + 1), and the weights (N · L, S) or None,
        the query blocks bounded by ``working_memory`` (on threads with numpy)."""
        xp, n_keys = self.xp, self.n_keys
        n_rows = math.prod(self.batch) * self.n_queries
        itemsize = xp.finfo(self.work).bits // 8
        if self.return_weights:
            self.tile = n_keys
            width = n_keys
        else:
            self.tile = KEY_TILE * 8 // itemsize
            width = min(n_keys, self.tile)
        # torch without a gradient: every block writes its sums into one result.
        self.out = None
        if self.torch and not self.return_weights and not self.grad:
            self.out = xp.empty((n_rows, self.d_v + 1), dtype=self.work, device=self.device)
        if self.numpy:
            kwargs = {} if self.return_weights else {"key_tile": self.tile}
            blocks = map_query_blocks(self.attend, n_rows, n_keys, itemsize=itemsize, **kwargs)
        else:
            cache = _cache_entries(xp, self.device, self.is_causal)
            rows = iter_query_blocks(n_rows, width, itemsize=itemsize, cache=cache)
            blocks = [self.attend(block) for block in rows]
        shape = self.batch + (self.n_queries, self.d_v + 1)
        if self.out is not None:
            return xp.reshape(self.out, shape), None
        sums = [part for block in blocks for part in block[0]]
        sums = sums[0] if len(sums) == 1 else xp.concat(sums, axis=0)
        sums = xp.reshape(sums, shape)
        if not self.return_weights:
            return sums, None
        weights = [part for block in blocks for part in block[1]]
        return sums, weights[0] if len(weights) == 1 else xp.concat(weights, axis=0)


def _torch():
    import torch

    return torch


def _averages(sums, blocks, problem):
    """The outputs from the sums ``[Σ w v, Σ w]``: their ratio, clipped to the values'
    range, 0 for a query with no key, in the values' unit and the result's dtype."""
    xp = problem.xp
    total = sums[..., -1:]
    if blocks.empty:
        out = sums[..., :-1] / xp.where(total > 0, total, xp.ones_like(total))
    else:
        out = sums[..., :-1] / total
    # A weighted average lies within the range of the values; clipping removes the few-ulp
    # excursions of rounding (the weights sum to 1 only up to rounding). In place where
    # allowed: a fresh array of the output's size costs its page faults again.
    if updatable(out) and is_torch_array(out):
        out.clamp_(min=blocks.lowest, max=blocks.highest)
    else:
        out = xp.clip(out, min=blocks.lowest, max=blocks.highest)
    if blocks.empty:
        # A query with no key to attend to: 0 (its sums are 0), not a clipped 0.
        out = xp.where(total > 0, out, xp.zeros_like(out))
    if blocks.value_exponent:
        out = ldexp(out, blocks.value_exponent, xp)
    out = xp.astype(out, problem.dtype, copy=False)
    return out[..., 0] if problem.one_value else out


# ---------------------------------------------------------------- linear attention


def _power_of_two(a, xp, axis):
    """The exponent ``e`` of a power of two just above ``max |a|`` along ``axis`` (kept
    dimensions; 0 where ``a`` is 0), as an array of ``a``'s dtype: dividing by ``2**e`` is
    exact. ``e`` is held inside the float range."""
    top = xp.max(xp.abs(a), axis=axis, keepdims=True)
    if is_numpy_namespace(xp):
        exponent = np.frexp(top)[1].astype(a.dtype)
    else:
        positive = top > 0
        exponent = xp.where(
            positive, xp.floor(xp.log2(xp.where(positive, top, xp.ones_like(top)))) + 1, 0.0
        )
    largest = int(math.log2(float(xp.finfo(a.dtype).max)))
    exponent = xp.clip(exponent, min=float(-largest), max=float(largest + 1))
    return exponent


def linear_attention(phi_q, phi_k, value, *, is_causal=False):
    r"""Linear attention with explicit features: the Nadaraya–Watson estimate with kernel
    :math:`\kappa(q, k) = \phi(q)^\top \phi(k)`.

    .. math::

        \mathrm{out}_i = \frac{\phi(q_i)^\top S}{\phi(q_i)^\top z}, \qquad
        S = \sum_j \phi(k_j) v_j^\top, \quad z = \sum_j \phi(k_j)

    The sums over the keys are computed once, so the cost is O((L + S) · r · d_v) for r
    features instead of O(L · S). With ``is_causal=True`` query ``i`` sees keys
    ``j <= i`` (top-left aligned, as :func:`softmax_attention`): :math:`S_i` and
    :math:`z_i` are running sums over the prefix — linear attention as an RNN with state
    :math:`(S, z)` (Katharopoulos et al., 2020), the sums ``partial_fit`` accumulates.
    They are taken by blocks of positions: within a block the (block × block) products
    with the causal mask, across blocks the carried state; never an L × L matrix.

    The ratio does not change when a query's features, or all the keys' features, are
    multiplied by a positive constant, so each query row, the keys (per batch entry; with
    ``is_causal`` a running scale, raised as larger keys arrive, the state rescaled) and
    each column of ``value`` are divided by a power of two near their largest entry before
    the sums: any finite non-negative features give a finite answer, within the range of
    ``value`` (per column), however large or small they are (causally, as long as the keys
    of one block of positions lie within the float range of each other).

    Parameters
    ----------
    phi_q : array of shape (..., L, r)
    phi_k : array of shape (..., S, r)
    value : array of shape (..., S, d_v) or (S,)
        All three finite real numbers, any array-API library; the leading dimensions
        broadcast. A query without keys (S = 0, or L > S causally is fine: later queries see
        every key) gets 0.
    is_causal : bool
        Query ``i`` sees keys ``j <= i`` only.

    Returns
    -------
    out : array of shape (..., L, d_v), or (..., L) for a 1-D ``value``
        In the library, device and floating dtype of the inputs.

    Raises
    ------
    TypeError
        An array is complex or not numeric, or arrays of different libraries.
    ValueError
        If a query's denominator :math:`\phi(q)^\top z` is not positive (signed features,
        such as random Fourier features, can make it so; or it underflowed): the ratio
        would be meaningless; if it is so close to 0 that the ratio overflows; NaN or
        infinity in an argument; mismatched shapes. Features computed as ``exp`` of
        log-features (positive random features, elu + 1) underflow for inputs of large
        norm (the positive map's :math:`e^{-\|u\|^2/2}` below about 1e-308 for
        :math:`\|u\|` above about 38): take them as :math:`\exp(\log\phi - c)`, ``c`` the
        largest log-feature of each query row for queries and of each feature over the
        keys for keys, with that per-feature constant added to the queries' log-features
        first (it cancels in :math:`\phi(q)^\top\phi(k)`); then every query has a
        feature of weight 1 whose key sum is at least 1, and no denominator is 0.

    Examples
    --------
    >>> phi = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> linear_attention(phi, phi, np.array([3.0, 5.0, 7.0]))
    array([5. , 6. , 5.5])
    >>> linear_attention(phi, phi, np.array([3.0, 5.0, 7.0]), is_causal=True)
    array([3. , 5. , 5.5])
    """
    xp = _namespace("linear_attention", phi_q=phi_q, phi_k=phi_k, value=value)
    phi_q, phi_k, value, one_value, dtype, batch = _linear_problem(phi_q, phi_k, value, xp)
    n_queries, n_keys, d_v = phi_q.shape[-2], phi_k.shape[-2], value.shape[-1]
    if n_keys == 0 or n_queries == 0 or math.prod(batch) == 0:
        out, _ = _empty_attention(phi_q, phi_k, value, batch, dtype, xp)
        return out[..., 0] if one_value else out
    # Powers of two: exact, so ordinary inputs give the same digits as the plain formula.
    value_exp = _power_of_two(value, xp, axis=-2)
    value = times_two_to(value, -value_exp, xp)
    phi_q = times_two_to(phi_q, -_power_of_two(phi_q, xp, axis=-1), xp)
    positive = bool(xp.min(phi_q) >= 0) and bool(xp.min(phi_k) >= 0)
    if is_causal:
        numerator, denominator = _causal_sums(phi_q, phi_k, value, xp)
    else:
        phi_k = times_two_to(phi_k, -_power_of_two(phi_k, xp, axis=(-2, -1)), xp)
        state = xp.matmul(xp.matrix_transpose(phi_k), value)
        z = xp.sum(phi_k, axis=-2)[..., None]
        numerator, denominator = xp.matmul(phi_q, state), xp.matmul(phi_q, z)
    _check_denominators(denominator, positive, xp)
    with np.errstate(over="ignore"):
        out = numerator / denominator
    if positive:
        # Non-negative features make every row a weighted average of the values: clip the
        # few-ulp excursions of rounding so that it provably stays within their range.
        out = xp.clip(
            out,
            min=xp.min(value, axis=-2, keepdims=True),
            max=xp.max(value, axis=-2, keepdims=True),
        )
    with np.errstate(over="ignore"):
        out = times_two_to(out, value_exp, xp)
    if not bool(xp.all(xp.isfinite(out))):
        raise ValueError(
            "linear attention overflowed: a denominator phi(q)ᵀ sum_j phi(k_j) is too close "
            "to 0 for signed features; use positive features or compute those rows exactly"
        )
    out = xp.astype(xp.broadcast_to(out, batch + (n_queries, d_v)), dtype)
    return out[..., 0] if one_value else out


def _linear_problem(phi_q, phi_k, value, xp):
    """The arguments of :func:`linear_attention` checked (an error naming the argument), in
    the floating dtype to compute in; the values as columns, whether they were a vector,
    the result's dtype and the batch shape."""
    device = next((device_of(a) for a in (phi_q, phi_k, value) if is_array_api_obj(a)), None)
    phi_q = _as_real("phi_q", phi_q, xp, device)
    phi_k = _as_real("phi_k", phi_k, xp, device)
    value = _as_real("value", value, xp, device)
    for name, array, length in (("phi_q", phi_q, "L"), ("phi_k", phi_k, "S")):
        if array.ndim < 2:
            raise ValueError(
                f"{name} must have shape (..., {length}, r): at least 2 dimensions; got shape "
                f"{tuple(array.shape)}"
            )
    if phi_q.shape[-1] != phi_k.shape[-1]:
        raise ValueError(
            "phi_q and phi_k must have the same number of features; got "
            f"{phi_q.shape[-1]} and {phi_k.shape[-1]}"
        )
    n_keys = phi_k.shape[-2]
    value, one_value = _as_columns(value, n_keys)
    dtype, work = _float_dtypes(xp, phi_q, phi_k, value)
    phi_q, phi_k, value = (xp.astype(a, work, copy=False) for a in (phi_q, phi_k, value))
    batch = _batch_shape(
        phi_q=tuple(phi_q.shape[:-2]), phi_k=tuple(phi_k.shape[:-2]), value=tuple(value.shape[:-2])
    )
    return phi_q, phi_k, value, one_value, dtype, batch


def _check_denominators(denominator, positive, xp):
    """A ValueError if a denominator of linear attention is not positive (with the likely
    cause for non-negative features, ``positive``)."""
    bad = ~(denominator > 0)
    n_bad = int(xp.sum(xp.astype(bad, xp.int64)))
    if n_bad and positive:
        # Non-negative features: the denominator is a sum of non-negative products, 0 only
        # where every product underflowed (or was 0 to begin with).
        raise ValueError(
            f"{n_bad} quer{'y has' if n_bad == 1 else 'ies have'} a linear-attention "
            "denominator phi(q)ᵀ sum_j phi(k_j) of 0: no feature is positive for both the "
            "query and the keys it sees, as happens when exp-based features (positive random "
            "features, elu + 1) underflow for inputs of large norm. Divide each key feature "
            "by its largest over the keys and multiply that into the query features before "
            "exponentiating (kernattn.torch.KernelAttention does, where the keys are not "
            "causal), scale the inputs down, or use softmax_attention"
        )
    if n_bad:
        raise ValueError(
            f"{n_bad} quer{'y has' if n_bad == 1 else 'ies have'} a non-positive "
            "linear-attention denominator phi(q)ᵀ sum_j phi(k_j); use positive features or "
            "compute those rows exactly"
        )


def _causal_sums(phi_q, phi_k, value, xp):
    """Numerators and denominators of causal linear attention by blocks of positions.

    The state ``(S, z)`` holds the sums over the keys before the block in units of
    ``2**c``, ``c`` the running exponent of the largest key seen; it is rescaled when a
    block raises ``c``. Within the block the products are taken with the causal mask.
    """
    n_queries, n_keys = phi_q.shape[-2], phi_k.shape[-2]
    device = device_of(phi_q)
    state, z, unit = None, None, None
    numerators, denominators = [], []
    for start in range(0, n_queries, _PREFIX_BLOCK):
        stop = min(start + _PREFIX_BLOCK, n_queries)
        q = phi_q[..., start:stop, :]
        num = den = None
        if start < n_keys:
            keys_stop = min(stop, n_keys)
            k, v = phi_k[..., start:keys_stop, :], value[..., start:keys_stop, :]
            block_unit = _power_of_two(k, xp, axis=(-2, -1))
            new_unit = block_unit if unit is None else xp.maximum(unit, block_unit)
            k = times_two_to(k, -new_unit, xp)
            later = (
                xp.arange(start, keys_stop, device=device)[None, :]
                > xp.arange(start, stop, device=device)[:, None]
            )
            products = xp.matmul(q, xp.matrix_transpose(k))
            products = xp.where(later, xp.zeros_like(products), products)
            num = xp.matmul(products, v)
            den = xp.sum(products, axis=-1)[..., None]
            if state is not None:
                state, z = recount(unit, new_unit, state, z, xp=xp)
            unit = new_unit
        if state is not None:
            carried_num, carried_den = xp.matmul(q, state), xp.matmul(q, z)
            num = carried_num if num is None else num + carried_num
            den = carried_den if den is None else den + carried_den
        if start < n_keys:
            update_state = xp.matmul(xp.matrix_transpose(k), v)
            update_z = xp.sum(k, axis=-2)[..., None]
            state = update_state if state is None else state + update_state
            z = update_z if z is None else z + update_z
        numerators.append(num)
        denominators.append(den)
    return xp.concat(numerators, axis=-2), xp.concat(denominators, axis=-2)


# ---------------------------------------------------------------- diagnostics


def attention_entropy(weights, axis=-1):
    r"""Entropy (nats) of attention weights along ``axis``, :math:`H = -\sum_j w_j \log w_j`.

    0 for a query that attends to one key, :math:`\log S` for uniform weights over S keys.
    Rows are normalized first (absolute values, so that signed weights count by size); a row
    of zeros (a query with no key) has entropy 0.

    Parameters
    ----------
    weights : array of shape (..., S), any array-API library
        For instance the weights :func:`softmax_attention` returns.
    axis : int
        The axis of the keys.

    Returns
    -------
    entropy : array of shape (...)

    Examples
    --------
    >>> attention_entropy(np.array([[0.5, 0.5], [1.0, 0.0]])).round(4)
    array([0.6931, 0.    ])
    """
    xp = _namespace("attention_entropy", weights=weights)
    device = device_of(weights) if is_array_api_obj(weights) else None
    weights = xp.abs(_as_real("weights", weights, xp, device))
    total = xp.sum(weights, axis=axis, keepdims=True)
    p = weights / xp.where(total > 0, total, xp.ones_like(total))
    terms = xp.where(p > 0, -p * xp.log(xp.where(p > 0, p, xp.ones_like(p))), xp.zeros_like(p))
    return xp.clip(xp.sum(terms, axis=axis), min=0.0)


def effective_neighbors(weights, axis=-1):
    r"""Effective number of keys a query averages, :math:`\exp(H)` of
    :func:`attention_entropy`: between 1 (one key gets all the weight) and S (uniform).

    Examples
    --------
    >>> effective_neighbors(np.array([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]]))
    array([4., 1.])
    """
    xp = _namespace("effective_neighbors", weights=weights)
    return xp.exp(attention_entropy(weights, axis=axis))
