r"""``SoftmaxHeads``: the fitted kernel of every exact kernattn estimator.

A head compares a query :math:`x` with a key :math:`x'` through projections of their
standardized inputs :math:`u = (x - c)/\sigma`,

.. math::

    q = \sqrt{s}\, \mathrm{norm}(u W_q), \qquad k = \sqrt{s}\, \mathrm{norm}(u' W_k),

(``norm`` scales to unit length for the cosine similarity and is the identity otherwise, and
:math:`s` is the head's scale, the multiplier of the similarity) and makes the logit

====================  ==============================================================
similarity            logit :math:`\ell(q, k)`
====================  ==============================================================
``"dot"``             :math:`q^\top k` (:math:`= s\, (uW_q)^\top(u'W_k)`)
``"cosine"``          :math:`q^\top k` (:math:`= s \cos\angle(uW_q, u'W_k)`)
``"gaussian"``        :math:`-\tfrac12\|q - k\|^2 = q^\top k - \tfrac12\|k\|^2 - \tfrac12\|q\|^2`
``"epanechnikov"``    :math:`\log(1 - \|q - k\|^2)` inside the unit ball
``"tricube"``         :math:`3 \log(1 - \|q - k\|^3)` inside the unit ball
====================  ==============================================================

plus :math:`\log s_i` for the key's sample weight. The head's weights are the softmax of the
logits over the keys, its estimate the weighted mean of the values, and the heads' estimates
are mixed with ``head_weights`` (and ``head_bias``).

The Gaussian smoother with bandwidth :math:`h` is one head with :math:`c` the training mean,
:math:`\sigma = h`, :math:`W_q = W_k = I` and :math:`s = 1`: Gaussian Nadaraya–Watson *is*
softmax attention with a key bias :math:`-\tfrac12\|k\|^2` (the query's own
:math:`-\tfrac12\|q\|^2` cancels in the softmax; it is kept here so that the logits are never
positive, which lets the exact path skip the row maximum). A learned attention kernel is the
same object with learned :math:`W_q, W_k, s`.
"""

import threading

import numpy as np

from kernattn._core.blocks import query_block_size
from kernattn._core.numerics import power_of_two_scale
from kernattn._core.sums import (
    centered_sums,
    exp_floor,
    kernel_sums,
    shifted_exp,
    softmax_weights,
    subtract_row_max,
    underflowed,
)
from kernattn.kernels import OUTSIDE_SLOPE, log_kernel, squared_distances

#: Similarities whose logits depend on the distance ‖q − k‖ only (never positive).
RADIAL = ("gaussian", "epanechnikov", "tricube")
SIMILARITIES = ("dot", "cosine") + RADIAL

# A projection this large is recomputed in scaled form: its square, or its products with
# the keys, could overflow.
LARGE = 1e150
# A distant query more than this many times the keys' extent from the center is compared with
# the keys through qᵀk (the differences q − k would round the keys away).
_DIFFERENCE_REACH = 1e8
# Entries of the (rows × keys × head_dim) differences of a chunk of rows on the unit path.
_UNIT_ENTRIES = 2**18

# What :meth:`SoftmaxHeads._bind` computes per head from the keys, built on first use.
_BOUND = ("_inputs", "_keys", "_keys_aug", "_keys_sq", "_key_radius", "_unit_keys", "_unit_only")

# Added to ‖u‖² before the square root of the cosine normalization: a zero projection then
# has a zero (not NaN) direction and the normalization stays differentiable.
COSINE_EPS = 1e-12


def project(U, W, similarity):
    """Projections ``U @ W`` (``U`` itself for ``W=None``), unit length for ``"cosine"``.

    Returns the projections and, for ``"cosine"``, the norms they were divided by.
    """
    P = U if W is None else U @ W
    if similarity != "cosine":
        return P, None
    with np.errstate(over="ignore"):
        norm = np.sqrt(np.einsum("ij,ij->i", P, P) + COSINE_EPS)
    large = ~(norm < 1e150)
    if np.any(large):
        # ‖u‖² overflows beyond about 1e154: those rows are divided by their largest entry
        # (a power of two, exact) before the squares, where COSINE_EPS no longer counts.
        unit = power_of_two_scale(P[large], axis=1)
        scaled = P[large] / unit[:, None]
        norm[large] = np.sqrt(np.einsum("ij,ij->i", scaled, scaled)) * unit
    return P / norm[:, None], norm


def key_bias(K, similarity):
    """The key-only logit term of a dot product: ``-½‖k‖²`` for ``"gaussian"``, else 0."""
    if similarity == "gaussian":
        return -0.5 * np.einsum("ij,ij->i", K, K)
    return np.zeros(len(K), dtype=K.dtype)


class SoftmaxHeads:
    """A fitted multi-head softmax kernel bound to its keys (see the module docstring).

    Parameters
    ----------
    similarity : {"dot", "cosine", "gaussian", "epanechnikov", "tricube"}
    center, input_scale : ndarray of shape (n_features,)
        Inputs are standardized to ``(x - center) / input_scale`` before projecting.
    query_weights, key_weights : ndarray of shape (n_heads, n_features, head_dim) or None
        ``None``: one head whose projection is the identity.
    scale : ndarray of shape (n_heads,)
        Positive multipliers of the similarity.
    head_weights : ndarray of shape (n_heads,)
    head_bias : ndarray of shape (n_outputs,)
        Added to the mixture, in the centered target units of the estimator.
    keys : ndarray of shape (n_keys, n_features)
        The training inputs (positive sample weight only).
    log_sample_weight : ndarray of shape (n_keys,)
        ``log(s_i / max s)``, never positive.
    dtype : {numpy.float64, numpy.float32}
        The precision of the logits.
    """

    def __init__(
        self,
        *,
        similarity,
        center,
        input_scale,
        query_weights,
        key_weights,
        scale,
        head_weights,
        head_bias,
        keys,
        log_sample_weight,
        dtype=np.float64,
        warp=None,
        local=None,
    ):
        self.similarity = similarity
        self.center = np.asarray(center, dtype=float)
        self.input_scale = np.asarray(input_scale, dtype=float)
        self.query_weights = query_weights
        self.key_weights = key_weights
        self.scale = np.asarray(scale, dtype=float)
        self.head_weights = np.asarray(head_weights, dtype=float)
        self.head_bias = np.asarray(head_bias, dtype=float)
        self.dtype = np.dtype(dtype)
        self.log_sample_weight = np.asarray(log_sample_weight, dtype=float)
        self._lowest_log_sample_weight = float(self.log_sample_weight.min(initial=0.0))
        self._floor = exp_floor(self.dtype)
        self.warp = warp
        self.local = [None] * len(self.scale) if local is None else list(local)
        self._binding = _DeferredBinding(self, keys)

    def __getattr__(self, name):
        # The keys' per-head arrays (``_BOUND``) are built when a method first needs them
        # (a binned fit may never), once for this kernel and the copies that share them.
        binding = self.__dict__.get("_binding")
        if name not in _BOUND or binding is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        bound = binding.bound()
        self.__dict__.update(bound)
        return bound[name]

    def warped(self, X):
        """The inputs as the heads compare them: through the warp, if any."""
        X = np.asarray(X, dtype=float)
        return X if self.warp is None else self.warp.transform(X)

    def project(self, X, h, side="query"):
        """The scaled projections ``q`` (or ``k``) of head ``h`` for inputs ``X`` (warped
        first, if the kernel has a warp), float64: see :meth:`_project`."""
        return self._project(self.warped(X), h, side)

    def queries(self, X, h):
        """What :meth:`logits` takes: head ``h``'s queries of inputs ``X``, prepared."""
        return self._queries(self.warped(X), h)

    def unit_logits(self, X, h):
        """:meth:`_unit_logits` of inputs ``X`` (warped first)."""
        return self._unit_logits(self.warped(X), h)

    def with_local(self, local):
        """A copy with these local fits, one per head (``None``: the kernel average)."""
        out = object.__new__(SoftmaxHeads)
        out.__dict__.update(self.__dict__)
        out.local = list(local)
        return out

    @property
    def n_heads(self):
        return len(self.scale)

    @property
    def n_keys(self):
        return len(self.log_sample_weight)

    @property
    def nonpositive(self):
        """Whether the logits are never positive (radial similarities)."""
        return self.similarity in RADIAL

    def _project(self, X, h, side="query"):
        """The scaled projections ``q`` (or ``k``) of head ``h`` for inputs ``X``, float64.

        Rows whose projection overflows (a query near the largest float, or a tiny
        ``input_scale``) come out infinite, never NaN: they are recomputed from
        :meth:`project_scaled`, which is finite (a cosine head's are always finite).
        """
        X = np.asarray(X, dtype=float)
        weights = self.query_weights if side == "query" else self.key_weights
        with np.errstate(over="ignore", invalid="ignore"):
            U = (X - self.center) / self.input_scale
            P, _ = project(U, None if weights is None else weights[h], self.similarity)
            if self.scale[h] != 1.0:
                P = P * np.sqrt(self.scale[h])
        # One pass over (rows × head_dim), not over the keys.
        large = ~np.all(np.abs(P) < LARGE, axis=1)
        if np.any(large):
            unit, log_size = self._project_scaled(X[large], h, side)
            with np.errstate(over="ignore"):
                P[large] = unit * np.exp(log_size)[:, None]
        return P

    def _project_scaled(self, X, h, side="query"):
        """Head ``h``'s projections of ``X`` as ``exp(log_size) · unit``, overflow-free.

        ``unit`` has rows of largest entry in [1, 2) (or 0), computed from the inputs in
        units of their own magnitude and of the smallest ``input_scale``; ``log_size`` is
        the log of the factor (any size, also beyond the float range).

        Returns
        -------
        unit : ndarray of shape (n, head_dim)
        log_size : ndarray of shape (n,)
        """
        X = np.asarray(X, dtype=float)
        magnitude = power_of_two_scale(
            np.hstack([X, np.broadcast_to(self.center, X.shape)]), axis=1
        )
        A = X / magnitude[:, None] - self.center / magnitude[:, None]
        smallest = power_of_two_scale(self.input_scale.min())
        U = A * (smallest / self.input_scale)
        weights = self.query_weights if side == "query" else self.key_weights
        P = U if weights is None else U @ weights[h]
        if self.similarity == "cosine":
            # A direction does not depend on the size of the input (beyond COSINE_EPS).
            P, _ = project(P / power_of_two_scale(P, axis=1)[:, None], None, "cosine")
            return P * np.sqrt(self.scale[h]), np.zeros(len(P))
        unit = power_of_two_scale(P, axis=1)
        with np.errstate(divide="ignore"):
            log_size = np.log(magnitude) - np.log(smallest) + 0.5 * np.log(self.scale[h])
        return P / unit[:, None], log_size + np.log(unit)

    def _bind(self, X):
        """Per head, what every query block meets: the keys and their biases (the
        attributes ``_BOUND``, as a dict)."""
        # The inputs themselves, for the unit path's exact differences.
        bound = {"_inputs": X if self.nonpositive else None}
        bound.update({name: [] for name in _BOUND[1:]})
        for h in range(self.n_heads):
            K = self._project(X, h, "key")
            unit_keys, unit_only = self._bind_unit_keys(X, K, h)
            bound["_unit_keys"].append(unit_keys)
            bound["_unit_only"].append(unit_only)
            with np.errstate(over="ignore"):
                sq = np.einsum("ij,ij->i", K, K)
            bound["_keys"].append(K)
            bound["_keys_sq"].append(sq)
            with np.errstate(invalid="ignore"):
                bound["_key_radius"].append(np.sqrt(sq.max(initial=0.0)))
            aug = None
            if self.similarity in ("dot", "cosine", "gaussian"):
                # [q, −½‖q‖², 1] · [k, 1, −½‖k‖² + log s]: the logits in one product.
                with np.errstate(over="ignore", invalid="ignore"):
                    bias = key_bias(K, self.similarity) + self.log_sample_weight
                aug = np.hstack([K, np.ones((len(K), 1)), bias[:, None]])
                aug = np.ascontiguousarray(aug, dtype=self.dtype)
            bound["_keys_aug"].append(aug)
        return bound

    def _bind_unit_keys(self, X, K, h):
        """The keys in units of a power of two near their extent, for the unit path, with
        their log unit; and whether the head is on the unit path only.

        Keys whose squares could overflow (a tiny ``input_scale``) make every logit of
        the one-product path lose its meaning: such a head sends every query through the
        unit path.
        """
        if np.all(np.abs(K) < LARGE):
            unit = power_of_two_scale(K)
            return (K / unit, float(np.log(unit))), False
        unit, log_size = self._project_scaled(X, h, "key")
        log_unit = float(log_size.max(initial=0.0))
        return (unit * np.exp(log_size - log_unit)[:, None], log_unit), True

    def unit_only(self, h):
        """Whether head ``h``'s keys are too large for the one-product path."""
        return self._unit_only[h]

    def select(self, heads):
        """A copy with only ``heads`` (their mixture weights kept as they are)."""
        heads = np.asarray(heads)
        out = object.__new__(SoftmaxHeads)
        out.__dict__.update(self.__dict__)
        for name in ("query_weights", "key_weights"):
            value = getattr(self, name)
            setattr(out, name, None if value is None else value[heads])
        out.scale = self.scale[heads]
        out.head_weights = self.head_weights[heads]
        out.local = [self.local[h] for h in heads]
        for name in ("_keys", "_keys_aug", "_keys_sq", "_key_radius", "_unit_keys", "_unit_only"):
            setattr(out, name, [getattr(self, name)[h] for h in heads])
        return out

    def with_mixture(self, head_weights, head_bias):
        """A copy with another mixture of the same heads."""
        out = object.__new__(SoftmaxHeads)
        out.__dict__.update(self.__dict__)
        out.head_weights = np.asarray(head_weights, dtype=float)
        out.head_bias = np.asarray(head_bias, dtype=float)
        return out

    # ------------------------------------------------------------------ logits

    def _queries(self, X, h):
        """What :meth:`logits` takes: head ``h``'s queries, prepared, in ``dtype``."""
        Q = self._project(X, h, "query")
        # A projection beyond float32's range (or whose square overflows) becomes inf here:
        # its logits are not finite, and the caller redoes the row with unit_logits.
        with np.errstate(over="ignore", invalid="ignore"):
            if self._keys_aug[h] is None:
                return Q.astype(self.dtype, copy=False)
            if self.similarity == "gaussian":
                half_sq = -0.5 * np.einsum("ij,ij->i", Q, Q)
            else:
                half_sq = np.zeros(len(Q))
            return np.hstack([Q, half_sq[:, None], np.ones((len(Q), 1))]).astype(
                self.dtype, copy=False
            )

    def may_underflow(self, queries, h):
        """Whether a logit of these prepared queries can fall below the ``exp`` floor.

        For the Gaussian similarity −½‖q − k‖² ≥ −½(‖q‖ + max‖k‖)², so most blocks of
        queries inside the data cannot, and the flooring pass is skipped for them.
        """
        if self._keys_aug[h] is None:
            return True
        with np.errstate(invalid="ignore"):
            q_norm = np.sqrt(-2.0 * float(queries[:, -2].min(initial=0.0)))
        lowest = -0.5 * (q_norm + self._key_radius[h]) ** 2
        return lowest + self._lowest_log_sample_weight < self._floor

    def logits(self, queries, h, keys=slice(None), floor=False, out=None):
        """Logits ``ℓ(q, k_i) + log s_i`` of prepared ``queries`` against ``keys`` (a slice).

        With ``floor`` (for never-positive logits that :meth:`may_underflow`), logits below
        the ``exp`` floor are raised to it: numpy's ``exp`` is slow where it underflows.
        ``out``: a buffer of the block's shape and ``dtype`` to write to.
        """
        if self._keys_aug[h] is not None:
            logits = np.matmul(queries, self._keys_aug[h][keys].T, out=out)
        else:
            r2 = squared_distances(queries, self._keys[h][keys], K_sq=self._keys_sq[h][keys])
            logits = log_kernel(r2, self.similarity).astype(self.dtype, copy=False)
            logits += self.log_sample_weight[keys].astype(self.dtype)
            if out is not None:
                out[...] = logits
                logits = out
        if floor:
            np.maximum(logits, self._floor, out=logits)
        return logits

    def _unit_logits(self, X, h):
        """Logits up to a per-query constant, in float64, for the rows the one-product path
        cannot serve (their kernel underflowed, or something overflowed).

        The keys are taken in units of their extent ``F`` and the query as
        ``exp(log_size) · unit`` (:meth:`project_scaled`), so nothing overflows. For radial
        similarities the query's own −½‖q‖² is left out: it is the same for every key, but
        for a distant query it swamps the differences between keys. Within
        ``_DIFFERENCE_REACH`` key extents, the squared distances are summed from the
        differences themselves, ``Σ_j (q_j − k_j)²``: ties are kept, and a row's logits do
        not depend on the other rows computed with it. Farther out, those differences
        would round the keys away, and the logits come from ``qᵀk − ½‖k‖²``. Outside a
        compact support the log-kernel is −10⁶ r². The logits are shifted so that each
        row's largest is 0 before being multiplied by the (possibly huge) scale: a row too
        distant for floats to resolve gets its nearest key(s), never NaN.
        """
        unit_keys, log_unit = self._unit_keys[h]
        X = np.asarray(X, dtype=float)
        unit, log_size = self._project_scaled(X, h, "query")
        if self.similarity in ("dot", "cosine"):
            # q·k = exp(log_size + log_unit) · unit·k̃; the row maximum taken out first.
            logits = subtract_row_max(np.einsum("ij,kj->ik", unit, unit_keys))
            _scale_logits(logits, log_size + log_unit)
            logits += self.log_sample_weight
            return logits
        relative = log_size - log_unit
        within = relative <= np.log(_DIFFERENCE_REACH)
        logits = np.empty((len(X), self.n_keys))
        if np.any(within):
            logits[within] = self._unit_radial(
                X[within], h, unit[within], relative[within], unit_keys, log_unit
            )
        if not np.all(within):
            beyond = ~within
            shrink = np.exp(-relative[beyond])[:, None]
            # (q·k − ½‖k‖²)/(exp(log_size) F): the key term fades beyond the float range.
            distant = np.einsum("ij,kj->ik", unit[beyond], unit_keys)
            distant -= 0.5 * shrink * np.einsum("ij,ij->i", unit_keys, unit_keys)
            subtract_row_max(distant)
            _scale_logits(distant, log_size[beyond] + log_unit)
            if self.similarity != "gaussian":
                with np.errstate(over="ignore"):
                    distant *= 2.0 * OUTSIDE_SLOPE
            logits[beyond] = distant
        logits += self.log_sample_weight
        return logits

    def _unit_radial(self, X, h, unit, relative, unit_keys, log_unit):
        """Radial logits (without a per-row constant) from the exact differences with the
        keys: of the inputs, ``(x − x_i)/σ · W``, when queries and keys share the
        projection (a difference that ties in the inputs ties in the logits), else of the
        projections in key units (``exp(relative) · unit − k̃``)."""
        tied = self._inputs is not None and (
            self.query_weights is None
            or np.array_equal(self.query_weights[h], self.key_weights[h])
        )
        logits = np.empty((len(X), self.n_keys))
        log_factor = np.empty(len(X))
        step = query_block_size(len(X), unit_keys.size, n_arrays=2, cache=_UNIT_ENTRIES)
        smallest = power_of_two_scale(self.input_scale.min())
        W = None if self.query_weights is None else self.query_weights[h]
        for start in range(0, len(X), step):
            rows = slice(start, start + step)
            if tied:
                # In units of a power of two near the largest input (exact): x − x_i of
                # inputs near ±1e308 would overflow.
                magnitude = np.maximum(
                    power_of_two_scale(X[rows], axis=1), power_of_two_scale(self._inputs)
                )[:, None, None]
                difference = X[rows, None, :] / magnitude - self._inputs[None] / magnitude
                difference *= smallest / self.input_scale
                if W is not None:
                    difference = np.matmul(difference, W)
                log_factor[rows] = 2.0 * (np.log(magnitude[:, 0, 0]) - np.log(smallest))
                log_factor[rows] += np.log(self.scale[h])
            else:
                Q = unit[rows] * np.exp(relative[rows])[:, None]
                difference = Q[:, None, :] - unit_keys[None, :, :]
                log_factor[rows] = 2.0 * log_unit
            logits[rows] = np.einsum("ijk,ijk->ij", difference, difference)
        # logits holds r² / exp(log_factor); what matters is r² − min r² per row.
        nearest = logits.min(axis=1, keepdims=True, initial=np.inf)
        r2_nearest = _times_exp(nearest[:, 0], log_factor)
        logits -= nearest
        if self.similarity == "gaussian":
            _scale_logits(logits, log_factor, factor=-0.5)
            return logits
        inside = r2_nearest < 1.0
        if np.any(inside):
            # Some key within the support (the row underflowed only through tiny sample
            # weights): the log-kernel itself, shifted by its value at the nearest key.
            r2 = _times_exp(logits[inside] + nearest[inside], log_factor[inside, None])
            with np.errstate(over="ignore"):  # −10⁶ r² of a distant key: −inf, a weight of 0
                logits[inside] = (
                    log_kernel(r2, self.similarity)
                    - log_kernel(r2_nearest[inside], self.similarity)[:, None]
                )
        outside = ~inside
        if np.any(outside):
            part = logits[outside]
            _scale_logits(part, log_factor[outside], factor=-OUTSIDE_SLOPE)
            logits[outside] = part
        return logits

    def keys(self, h):
        """Head ``h``'s projected keys (float64)."""
        return self._keys[h]

    # ------------------------------------------------------------ the exact sums

    def sums(self, X, h, columns, squared=None, total=-1, left_out=None, keys=None):
        """``Σ_i exp(ℓ_i − c) C_i`` of head ``h`` over the keys for a block of queries
        ``X``, by the one reduction (:func:`kernattn._core.sums.kernel_sums`); ``columns`` (one
        row per key) in the precision of the sums.

        ``c`` is a per-query shift that keeps the largest term at most 1 (it cancels in
        every ratio of these sums). For never-positive logits there is no shift to wait
        for: the key tiles' sums simply add up, and only rows that underflowed are redone
        from :meth:`unit_logits`, as are rows whose projection or logits overflowed (a query
        near the largest float, or a float64 query beyond a float32 fit's range).

        ``total`` is the index of the column of ones among ``columns`` (the denominator,
        whose underflow marks a row to redo). ``squared`` (one row per key, its first
        column ones): also summed against the squared weights ``exp(2(ℓ_i − c))``, in the
        same pass, and appended after the plain sums; a row whose squared weights underflow
        is redone as well. ``left_out``: ``(rows, keys)`` pairs of block rows and keys that
        weigh nothing (a leave-one-out fit); the sums are then taken on the running maximum
        of the kept keys, and a row whose every key is left out sums to 0.

        ``keys``: an index array of the keys to sum over, in that order (default every key
        in its own order); a callable ``columns`` (see :func:`~kernattn._core.sums.kernel_sums`)
        then sees tiles of positions in it. Not with ``left_out``.
        """
        if keys is not None and left_out is not None:
            raise TypeError("keys and left_out cannot be combined")
        X = self.warped(X)
        dtype = getattr(columns, "dtype", np.float64)
        if self.unit_only(h):
            # Keys too large for the one product (a tiny input scale): every row takes the
            # unit path.
            weights = self._unit_weights(X, h, left_out)
            weights = weights if keys is None else weights[:, keys]
            return _sums_of_weights(weights, columns, squared).astype(dtype)
        queries = self._queries(X, h)
        shift = not self.nonpositive or left_out is not None
        floor = True if shift else self.may_underflow(queries, h)

        def logits(tile, out):
            return self.logits(queries, h, keys=tile if keys is None else keys[tile], out=out)

        _, sums = kernel_sums(
            logits,
            self.n_keys if keys is None else len(keys),
            columns,
            shift=shift,
            floor=floor,
            left_out=left_out,
            squared_columns=squared,
        )
        # One check per row, not per key.
        if not shift:
            redo = underflowed(sums[:, total])
            if squared is not None:
                redo |= underflowed(sums[:, columns.shape[1]])
        else:
            redo = ~np.all(np.isfinite(sums), 1)
        if np.any(redo):
            if left_out is not None:
                inside = np.isin(left_out[0], np.flatnonzero(redo))
                left_out = (
                    np.searchsorted(np.flatnonzero(redo), left_out[0][inside]),
                    left_out[1][inside],
                )
            weights = self._unit_weights(X[redo], h, left_out)
            weights = weights if keys is None else weights[:, keys]
            sums[redo] = _sums_of_weights(weights, columns, squared)
        return sums

    def moments(self, X, h, columns):
        """Head ``h``'s first and second moments ``E_w[v]``, ``E_w[v²]`` of a block of
        queries from the kernel sums of ``columns`` (``[v, v², 1]`` of the values, one row
        per key), float64."""
        sums = self.sums(X, h, columns).astype(np.float64, copy=False)
        t = (columns.shape[1] - 1) // 2
        return sums[:, :t] / sums[:, -1:], sums[:, t : 2 * t] / sums[:, -1:]

    def _unit_weights(self, X, h, left_out=None):
        """Weights (largest 1 per row) of rows from :meth:`unit_logits`, with the
        ``left_out`` pairs at 0 (a row with nothing left: all 0)."""
        logits = self._unit_logits(X, h)
        if left_out is not None:
            logits[left_out] = -np.inf
        with np.errstate(invalid="ignore"):
            weights = shifted_exp(logits)
        if left_out is not None:
            weights[left_out] = 0.0
            weights[~np.isfinite(weights)] = 0.0
        return weights

    def centered(self, X, h, values):
        """Head ``h``'s kernel moments of ``values`` about their own weighted mean for a
        block of queries (:func:`kernattn._core.sums.centered_sums`): the total weight ``W``
        (on the reduction's shift), the weighted mean ``m`` and ``M₂ = Σ_i w_i (v_i −
        m)²`` in float64; rows the one product cannot serve come from :meth:`unit_logits`."""
        values = np.asarray(values, dtype=np.float64)
        X = self.warped(X)
        if self.unit_only(h):
            return _moments_of(shifted_exp(self._unit_logits(X, h)), values)
        _, total, mean, m2 = self._centered_state(X, h, values)
        redo = underflowed(total) | ~np.all(np.isfinite(mean), axis=1)
        if np.any(redo):
            total[redo], mean[redo], m2[redo] = _moments_of(
                shifted_exp(self._unit_logits(X[redo], h)), values
            )
        return total, mean, m2

    def centered_state(self, X, h, values):
        """:meth:`centered` with the shift of the logits it was taken on, ``(c, W, m,
        M₂)``, and no unit path: the states of several sets of keys (the partitions of a
        training set) merge with :func:`kernattn._core.sums.merge_centered`."""
        return self._centered_state(self.warped(X), h, values)

    def _centered_state(self, X, h, values):
        queries = self._queries(X, h)

        def logits(keys, out):
            return self.logits(queries, h, keys=keys, out=out).astype(np.float64, copy=False)

        return centered_sums(logits, self.n_keys, np.asarray(values, dtype=np.float64))

    def weights(self, X, h):
        """Head ``h``'s normalized weights (rows sum to 1) of a block of queries against
        the keys."""
        X = self.warped(X)
        if self.unit_only(h):
            return softmax_weights(self._unit_logits(X, h))
        queries = self._queries(X, h)
        if not self.nonpositive:
            with np.errstate(over="ignore", invalid="ignore"):
                weights = shifted_exp(self.logits(queries, h))
        else:
            with np.errstate(over="ignore", invalid="ignore", under="ignore"):
                logits = self.logits(queries, h, floor=self.may_underflow(queries, h))
                weights = np.exp(logits, out=logits)
        redo = underflowed(weights.sum(axis=1))
        if np.any(redo):
            weights[redo] = shifted_exp(self._unit_logits(X[redo], h))
        weights /= weights.sum(axis=1, keepdims=True)
        return weights


def unbound_heads(
    similarity,
    center,
    input_scale,
    query_weights=None,
    key_weights=None,
    scale=None,
    head_weights=None,
):
    """Softmax heads with these parameters, bound to no keys: what linear attention's far
    field projects with (by default one head, the identity projection at scale 1)."""
    return SoftmaxHeads(
        similarity=similarity,
        center=center,
        input_scale=input_scale,
        query_weights=query_weights,
        key_weights=key_weights,
        scale=np.ones(1) if scale is None else scale,
        head_weights=np.ones(1) if head_weights is None else head_weights,
        head_bias=np.zeros(0),
        keys=np.zeros((0, len(center))),
        log_sample_weight=np.zeros(0),
    )


def _sums_of_weights(weights, columns, squared=None):
    """The sums of :meth:`SoftmaxHeads.sums` from a block of weights in memory."""
    if callable(columns):
        sums = np.asarray(columns(weights, slice(0, weights.shape[1])), dtype=np.float64)
    else:
        sums = weights @ columns.astype(np.float64, copy=False)
    if squared is None:
        return sums
    return np.hstack([sums, np.square(weights) @ squared.astype(np.float64, copy=False)])


def _moments_of(weights, values):
    """``(W, m, M₂)`` of values under unnormalized weights (a block in memory)."""
    total = weights.sum(axis=1)
    mean = weights @ values / total[:, None]
    m2 = np.stack(
        [
            np.einsum("ij,ij->i", weights, (values[:, o][None, :] - mean[:, o : o + 1]) ** 2)
            for o in range(values.shape[1])
        ],
        axis=1,
    )
    return total, mean, m2


def _scale_logits(logits, log_factor, factor=1.0):
    """In place: ``logits · factor · exp(log_factor)`` (per row) for logits ≤ 0 whose row
    maximum is 0, where the scale may be beyond the float range: a 0 stays 0 (the
    nearest keys), everything else may become −inf (a weight of 0), never NaN."""
    log_factor = np.broadcast_to(np.asarray(log_factor, dtype=float), (len(logits),))
    with np.errstate(over="ignore", invalid="ignore"):
        # In two halves: a tiny difference times a huge scale can be an ordinary number
        # even where the scale alone overflows.
        half = np.exp(0.5 * log_factor)[:, None]
        np.multiply(logits, half * factor, out=logits)
        np.multiply(logits, half, out=logits)
    logits[np.isnan(logits)] = 0.0


def _times_exp(a, log_factor):
    """``a · exp(log_factor)`` for ``a ≥ 0`` and any scale: 0 stays 0, overflow is inf."""
    with np.errstate(over="ignore", invalid="ignore"):
        half = np.exp(0.5 * log_factor)
        out = a * half * half
    return np.where(a == 0, 0.0, out)


class _DeferredBinding:
    """The keys of a :class:`SoftmaxHeads` and, once asked for, what its ``_bind`` makes
    of them: built once, under a lock (a prediction asks from several threads), and
    shared by the copies made before the build (``with_local``, ``with_mixture``).
    Pickled without the lock (and as built, when it was)."""

    def __init__(self, heads, keys):
        self._heads = heads
        self._keys = keys
        self._bound = None
        self._lock = threading.Lock()

    def bound(self):
        with self._lock:
            if self._bound is None:
                heads = self._heads
                self._bound = heads._bind(heads.warped(np.asarray(self._keys, dtype=float)))
                self._keys = None
            return self._bound

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()


def head_indices(heads, n_heads):
    """Head indices among ``n_heads``: all for ``None``; distinct integers in range otherwise."""
    H = n_heads
    if heads is None:
        return np.arange(H)
    keep = np.atleast_1d(np.asarray(heads))
    if (
        keep.ndim != 1
        or len(keep) == 0
        or not np.issubdtype(keep.dtype, np.integer)
        or np.any((keep < 0) | (keep >= H))
        or len(np.unique(keep)) != len(keep)
    ):
        raise ValueError(
            f"heads must be distinct integers in [0, {H - 1}] (the model has {H} "
            f"head(s)); got {heads!r}"
        )
    return keep
