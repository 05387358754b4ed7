r"""Fitting linear attention in two passes over chunks of rows, wherever the rows are.

The key sums of :class:`~kernattn.LinearAttentionRegressor` are sums over rows, so any
split of the training set into chunks can be summed chunk by chunk, or on many workers and
added up. What the kernel needs from the data before the sums (the center, the bandwidth,
Nyström landmarks, the target offset) is taken in a first pass of the same shape, merged as
chunks are merged:

- the weighted mean and sum of squared deviations of every input and target column,
  combined pairwise as Chan, Golub & LeVeque (1979) combine them,
  :math:`\bar x = \bar x_a + \delta\, W_b/W`,
  :math:`M_2 = M_{2,a} + M_{2,b} + \delta^2 W_a W_b / W` (:math:`\delta = \bar x_b - \bar
  x_a`, :math:`W` the sums of weights): the center, Scott's bandwidth
  :math:`\sigma_j W^{-1/(d+4)}` and the target offset, as the in-memory fit computes them
  from all rows;
- a uniform sample of ``n_subsample`` rows without replacement: every row draws a uniform
  sampling key, each chunk keeps its ``n_subsample`` smallest and a merge keeps the smallest
  of both. What the in-memory fit computes on a subsample (the ``"loo"`` and
  ``"silverman"`` bandwidths, rescaled by Scott's factor :math:`(n_{sub}/n)^{1/(d+4)}`,
  Nyström landmarks, an attention model, a learned projection) is computed on it.

With ``n`` at most ``n_subsample`` the sample is the whole training set in its order, and
with Scott's rule or a given bandwidth the features are drawn as in memory: the two passes
give the in-memory fit up to the order of the sums. :func:`fit_chunks` runs both passes over
an iterable of chunks (from disk, for instance); the Dask path runs them on the workers.
"""

import copy
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from kernattn._blocks import effective_n_jobs, single_threaded_blas
from kernattn._engine import fit_transaction
from kernattn._numerics import has_spread, power_of_two_scale
from kernattn.bandwidth import resolve_bandwidth


class ChunkSummary:
    """What the first pass takes from the rows of positive weight: weighted means and
    sums of squared deviations of the inputs and targets, the largest weight and |input|,
    the target extremes, checks, and the rows with the smallest sampling keys."""

    def __init__(self, X, Y, w, start, seed, n_sample):
        self.n_rows = len(X)
        self.n_sample = n_sample
        self.bad_inputs = int(np.sum(~np.isfinite(X))) + int(np.sum(~np.isfinite(Y)))
        self.bad_weights = int(np.sum(~(w >= 0)) + np.sum(~np.isfinite(w)))
        if self.bad_inputs or self.bad_weights:
            # Reported by check_summary; nothing else is needed from a bad chunk.
            X, Y, w = X[:0], Y[:0], w[:0]
        active = np.flatnonzero(w > 0)
        X, Y, w = X[active], Y[active], w[active]
        self.total = w.sum()
        self.count = len(w)
        self.max_weight = w.max(initial=0.0)
        self.max_abs = np.max(np.abs(X), axis=0, initial=0.0)
        self.y_min = np.min(Y, axis=0, initial=np.inf)
        self.y_max = np.max(Y, axis=0, initial=-np.inf)
        self.x_mean, self.x_m2 = self._moments(X, w)
        self.y_mean, self.y_m2 = self._moments(Y, w)
        keys = np.random.default_rng(seed).random(len(w))
        keep = np.argsort(keys, kind="stable")[:n_sample]
        self.sample = (keys[keep], start + active[keep], X[keep], Y[keep], w[keep])

    def _moments(self, A, w):
        if not len(w):
            return np.zeros(A.shape[1]), np.zeros(A.shape[1])
        mean = w @ A / self.total
        return mean, w @ (A - mean) ** 2

    @staticmethod
    def merge(*parts):
        out = copy.copy(parts[0])
        for b in parts[1:]:
            a = out
            out = copy.copy(a)
            out.n_rows = a.n_rows + b.n_rows
            out.bad_inputs = a.bad_inputs + b.bad_inputs
            out.bad_weights = a.bad_weights + b.bad_weights
            out.count = a.count + b.count
            out.total = a.total + b.total
            out.max_weight = max(a.max_weight, b.max_weight)
            out.max_abs = np.maximum(a.max_abs, b.max_abs)
            out.y_min = np.minimum(a.y_min, b.y_min)
            out.y_max = np.maximum(a.y_max, b.y_max)
            for name in ("x", "y"):
                mean_a, m2_a = getattr(a, f"{name}_mean"), getattr(a, f"{name}_m2")
                mean_b, m2_b = getattr(b, f"{name}_mean"), getattr(b, f"{name}_m2")
                if not b.total:
                    mean, m2 = mean_a, m2_a
                elif not a.total:
                    mean, m2 = mean_b, m2_b
                else:
                    # Chan et al.'s pairwise update: no cancellation of large sums.
                    delta = mean_b - mean_a
                    mean = mean_a + delta * (b.total / out.total)
                    m2 = m2_a + m2_b + delta**2 * (a.total * b.total / out.total)
                setattr(out, f"{name}_mean", mean)
                setattr(out, f"{name}_m2", m2)
            joined = [np.concatenate(pair) for pair in zip(a.sample, b.sample, strict=True)]
            keep = np.argsort(joined[0], kind="stable")[: out.n_sample]
            out.sample = tuple(column[keep] for column in joined)
        return out


def summarize(X, y, w, start, seed, n_sample):
    """The :class:`ChunkSummary` of one chunk (rows ``start, start + 1, …`` of the whole),
    its sampling keys drawn from ``seed``."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(len(X), -1)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float).reshape(-1)
    return ChunkSummary(X, Y, w, start, seed, n_sample)


def chunk_sums(kernel, X, y, w, y_offset):
    """One partition's key sums: the rows of positive weight added to an empty copy."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(len(X), -1)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float).reshape(-1)
    active = w > 0
    part = kernel.without_keys().accumulate(X[active], Y[active] - y_offset, w[active])
    return part.key_sums, part.key_log_scale, part.key_radius, part.target_sums


def chunk_cell_sums(kernel, X, y, w, y_offset):
    """One partition's key sums and, per cell of the near field ``kernel`` (a
    :class:`~kernattn.linear._near_field.NearFieldKernel` without keys), its feature sums
    and key count: the rows of positive weight added to an empty copy."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(len(X), -1)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float).reshape(-1)
    active = w > 0
    part = copy.copy(kernel)
    part.far = kernel.far.without_keys()
    part.accumulate(X[active], Y[active] - y_offset, w[active])
    far = part.far
    sums = (far.key_sums, far.key_log_scale, far.key_radius, far.target_sums)
    return sums, part.cell_sums, part.cell_counts


def merge_cell_sums(*parts):
    """:func:`merge_sums` of the partitions' key sums, and their per-cell sums taken out at
    the same constant (one head), the key counts added."""
    sums, cell_sums, counts = parts[0]
    for other_sums, other_cells, other_counts in parts[1:]:
        scale, other_scale = sums[1][0], other_sums[1][0]
        top = max(scale, other_scale)
        with np.errstate(invalid="ignore"):
            a = np.exp(scale - top) if np.isfinite(scale) else 0.0
            b = np.exp(other_scale - top) if np.isfinite(other_scale) else 0.0
        cell_sums = cell_sums * a + other_cells * b
        sums = merge_sums(sums, other_sums)
        counts = counts + other_counts
    return sums, cell_sums, counts


def merge_sums(*parts):
    """Key sums of several partitions, each head's taken out at the largest constant."""
    sums, scale, radius, targets = parts[0]
    for other_sums, other_scale, other_radius, other_targets in parts[1:]:
        top = np.maximum(scale, other_scale)
        with np.errstate(invalid="ignore"):
            # exp(−inf − top) = 0: a partition without keys adds nothing.
            a = np.where(np.isfinite(scale), np.exp(scale - top), 0.0)
            b = np.where(np.isfinite(other_scale), np.exp(other_scale - top), 0.0)
        sums = sums * a[:, None, None] + other_sums * b[:, None, None]
        scale, radius, targets = top, np.maximum(radius, other_radius), targets + other_targets
    return sums, scale, radius, targets


def sample_seed(random_state):
    """A seed for the workers' sampling keys that leaves ``random_state`` untouched when it
    is an int (the kernel's own draws then match the in-memory fit's)."""
    if random_state is None or isinstance(random_state, np.random.RandomState):
        return int(check_random_state(random_state).randint(2**31 - 1))
    return int(random_state)


def check_summary(summary):
    """Raise for the bad entries the first pass counted."""
    if summary.bad_inputs:
        raise ValueError(
            f"Input contains NaN or infinity: {summary.bad_inputs} entries of X or y are not "
            "finite"
        )
    if summary.bad_weights:
        raise ValueError(
            f"sample_weight must be finite and non-negative; {summary.bad_weights} entries are not"
        )
    if not summary.count:
        raise ValueError("sample_weight must have at least one positive entry")


def start_fit(estimator, summary, target_shape, dtype, near_field=False):
    """After the first pass: check it, set the target offset and units, and make the
    kernel (empty sums) and the fitted attributes that describe it (``near_field``: the
    caller adds a near field, so no warning that there is none)."""
    check_summary(summary)
    estimator._dtype = np.dtype(dtype)
    estimator._target_shape = tuple(target_shape)
    estimator._y_offset = summary.y_mean
    # max|y − offset| from the extremes: the power of two the values are summed in.
    spread = np.maximum(summary.y_max - summary.y_mean, summary.y_mean - summary.y_min)
    estimator._value_scale = power_of_two_scale(spread[None, :], axis=0)
    _, order, X_s, Y_s, w_s = summary.sample
    rows = np.argsort(order, kind="stable")
    kernel = _kernel_from_sample(estimator, summary, X_s[rows], Y_s[rows], w_s[rows])
    if estimator._near_field() and not near_field:
        # The near field computes each query's nearest keys exactly from keys held in
        # memory; over chunks, as after partial_fit, the Nyström far field serves alone.
        warnings.warn(
            "fitted in chunks, LinearAttentionRegressor has no near field: the Nyström "
            "features alone (n_neighbors=0) approximate the kernel, which is coarser at "
            "small bandwidths; fit in memory or on a dask collection for the near field, "
            "or pass n_neighbors=0 to silence this",
            UserWarning,
            stacklevel=3,
        )
    return kernel


def finish_fit(estimator, kernel, sums):
    """After the second pass: the merged sums into the kernel (``None``: already set); no
    keys are kept."""
    if sums is not None:
        kernel.key_sums, kernel.key_log_scale, kernel.key_radius, kernel.target_sums = sums
    for name in ("X_fit_", "y_fit_", "sample_weight_", "_active", "_moments"):
        estimator.__dict__.pop(name, None)
    for name in ("weight_error_", "n_neighbors_"):
        # Attributes of a near field, which a chunked fit does not have.
        estimator.__dict__.pop(name, None)
    estimator._log_sample_weight = np.zeros(0)
    estimator._values = np.zeros((0, kernel.n_outputs))
    estimator.kernel_ = kernel
    return estimator


def _kernel_from_sample(estimator, summary, X_s, Y_s, w_s):
    """The kernel (empty sums) from the full-data statistics and the sample, with the
    estimator's fitted attributes that describe it."""
    d = len(summary.x_mean)
    for name in ("bandwidth_", "loo_error_", "attention_model_"):
        estimator.__dict__.pop(name, None)
    sub = clone(estimator)
    for name in ("_target_shape", "_y_offset", "_value_scale", "_dtype"):
        setattr(sub, name, getattr(estimator, name))
    gaussian = isinstance(estimator.kernel, str) and estimator.kernel == "gaussian"
    loo_error = None
    if gaussian:
        center = summary.x_mean if estimator.center is None else estimator.center
        bandwidth = estimator.bandwidth
        sigma = np.sqrt(summary.x_m2 / summary.total)
        if isinstance(bandwidth, str) and bandwidth == "scott":
            h = sigma * summary.total ** (-1.0 / (d + 4))
            # A constant feature gets 1, as in rule_of_thumb_bandwidth.
            bandwidth = np.where(has_spread(sigma, summary.max_abs), h, 1.0)
        elif isinstance(bandwidth, str):
            bandwidth, loo_error = resolve_bandwidth(
                bandwidth, X_s, Y_s, w_s, n_jobs=estimator.n_jobs
            )
            # Scott's rate: the bandwidth of the sample shrinks like n^(-1/(d+4)).
            bandwidth = bandwidth * (len(w_s) / summary.count) ** (1.0 / (d + 4))
        sub.set_params(center=center, bandwidth=bandwidth)
    kernel = sub._make_kernel(X_s, Y_s, w_s)
    kernel.weight_scale = float(summary.max_weight)
    for name, value in sub.__dict__.items():
        if name.endswith("_") and not name.startswith("_") and name not in sub.get_params():
            setattr(estimator, name, value)
    if loo_error is not None:
        estimator.loo_error_ = loo_error
    return kernel


def _chunk_arrays(chunk, i, n_features):
    """``(X, y, sample_weight)`` of one chunk, checked."""
    if not isinstance(chunk, tuple | list) or len(chunk) not in (2, 3):
        raise TypeError(
            f"every chunk must be a tuple (X, y) or (X, y, sample_weight); chunk {i} is a "
            f"{type(chunk).__name__}"
        )
    X = np.asarray(chunk[0])
    y = np.asarray(chunk[1])
    w = np.asarray(chunk[2], dtype=float).reshape(-1) if len(chunk) == 3 else None
    if X.ndim != 2 or not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise ValueError(f"X of chunk {i} must be a 2-D array of numbers; got shape {X.shape}")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"chunk {i} has {X.shape[1]} features; chunk 0 has {n_features}")
    if len(y) != len(X) or (w is not None and len(w) != len(X)):
        raise ValueError(
            f"chunk {i} has {len(X)} rows of X, {len(y)} of y"
            + ("" if w is None else f" and {len(w)} sample weights")
        )
    return X, y, w


def fit_chunks(estimator, chunks):
    """Fit a :class:`~kernattn.LinearAttentionRegressor` on chunks of rows, in two passes.

    Streams a training set that need not fit in memory (``numpy.memmap`` slices, files read
    one at a time) through ``estimator`` in two passes: the first takes the statistics and
    a uniform sample the kernel needs (the center, the bandwidth, Nyström landmarks; see
    :ref:`distributed`), the second adds every chunk's features to the key sums. The chunks
    are processed on the estimator's ``n_jobs`` threads and merged in order (the result
    does not depend on the number of threads); memory is that of ``n_jobs + 1`` chunks and
    of the sample (``n_subsample`` rows), whatever the number of rows.

    The result is the fit on the concatenated chunks up to the order of the sums (exactly
    so for ``n ≤ n_subsample`` or, with Scott's rule or a given bandwidth, for random
    feature maps), except that, as after ``partial_fit``, the keys are not kept: there is
    no near field (the Nyström features serve alone, as with ``n_neighbors=0``; a warning
    says so unless ``n_neighbors=0`` is given), the queries the features cannot serve get
    the weighted training mean (with a warning) and ``attention_weights`` is unavailable.
    Unlike a loop of ``partial_fit`` calls, nothing is fixed from the first chunk alone;
    ``partial_fit`` can add chunks afterwards.

    Parameters
    ----------
    estimator : LinearAttentionRegressor
        Fitted in place (an earlier fit is replaced; a failed fit leaves it as it was).
    chunks : iterable or callable
        Tuples ``(X, y)`` or ``(X, y, sample_weight)``, the same in both passes: an iterable
        that can be iterated twice (a list, a ``range``-like object), or a function of no
        arguments returning a fresh iterator each time it is called (a generator function).

    Returns
    -------
    estimator : LinearAttentionRegressor
        The fitted estimator.

    Examples
    --------
    >>> import numpy as np
    >>> from kernattn import LinearAttentionRegressor, fit_chunks
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(1500, 2))
    >>> y = np.sin(X[:, 0]) + X[:, 1]
    >>> def chunks():
    ...     for start in range(0, len(X), 500):
    ...         yield X[start : start + 500], y[start : start + 500]
    >>> model = LinearAttentionRegressor(n_neighbors=0, random_state=0)  # no near field
    >>> streamed = fit_chunks(model, chunks)
    >>> whole = LinearAttentionRegressor(n_neighbors=0, random_state=0).fit(X, y)
    >>> bool(np.allclose(streamed.predict(X[:5]), whole.predict(X[:5])))
    True
    """
    from kernattn.linear._regressor import LinearAttentionRegressor

    if not isinstance(estimator, LinearAttentionRegressor):
        raise TypeError(
            f"fit_chunks fits a LinearAttentionRegressor; got {type(estimator).__name__}"
        )
    if callable(chunks):
        make_iterator = chunks
    elif iter(chunks) is chunks:
        raise TypeError(
            "chunks is an iterator, which can be read only once; fit_chunks reads the "
            "chunks twice: pass a list, or a function returning a fresh iterator"
        )
    else:

        def make_iterator():
            return iter(chunks)

    with fit_transaction(estimator):
        estimator._validate_params()
        estimator._check_params()
        seed = sample_seed(estimator.random_state)
        threads = effective_n_jobs(estimator.n_jobs)
        first = {}

        def summaries(i, chunk):
            X, y, w = _chunk_arrays(chunk, i, first.get("d"))
            if not first:
                first.update(d=X.shape[1], target_shape=y.shape[1:], dtype=X.dtype)
            elif y.shape[1:] != first["target_shape"]:
                raise ValueError(
                    f"y of chunk {i} has shape {y.shape[1:]} per sample; chunk 0 had "
                    f"{first['target_shape']}"
                )
            return X, lambda start: summarize(X, y, w, start, [seed, i], estimator.n_subsample)

        summary = _reduce_chunks(make_iterator, summaries, ChunkSummary.merge, threads)
        if summary is None:
            raise ValueError("chunks gave no chunk: there is nothing to fit")
        d = first["d"]
        estimator.__dict__.pop("feature_names_in_", None)
        estimator.n_features_in_ = d
        dtype = np.float32 if first["dtype"] == np.float32 else np.float64
        kernel = start_fit(estimator, summary, first["target_shape"], dtype)

        def sums(i, chunk):
            X, y, w = _chunk_arrays(chunk, i, d)
            return X, lambda start: chunk_sums(kernel, X, y, w, summary.y_mean)

        n_rows = []
        total = _reduce_chunks(make_iterator, sums, merge_sums, threads, n_rows)
        if n_rows[0] != summary.n_rows:
            raise ValueError(
                f"the chunks gave {summary.n_rows} rows in the first pass and {n_rows[0]} in "
                "the second; they must be the same both times"
            )
        finish_fit(estimator, kernel, total)
    return estimator


def _reduce_chunks(make_iterator, prepare, merge, threads, n_rows=None):
    """``merge`` of the chunks' results, in chunk order, computed on ``threads`` threads.

    ``prepare(i, chunk)`` checks a chunk (in this thread, in order) and returns its inputs
    and the work to run on a thread, a function of the chunk's first row number. At most
    ``threads + 1`` chunks are held at once; merging in order makes the result independent
    of the number of threads.
    """
    result, start = None, 0
    pending = deque()
    with single_threaded_blas(), ThreadPoolExecutor(threads) as pool:
        for i, chunk in enumerate(make_iterator()):
            X, work = prepare(i, chunk)
            pending.append(pool.submit(work, start))
            start += len(X)
            del chunk, X, work
            while len(pending) > threads:
                part = pending.popleft().result()
                result = part if result is None else merge(result, part)
        while pending:
            part = pending.popleft().result()
            result = part if result is None else merge(result, part)
    if n_rows is not None:
        n_rows.append(start)
    return result
