r"""The estimators on Dask collections: fit and predict where the data live.

Imported only when a dask array or dataframe reaches ``fit`` or ``predict`` (dask is an
optional extra, ``pip install "kernattn[dask]"``).

**Fitting linear attention.** The key sums :math:`S = \sum_i s_i \phi(k_i) v_i^\top` and
:math:`z = \sum_i s_i \phi(k_i)` are sums over rows, so every partition computes its own on
the worker that holds it and the partial sums are added pairwise up a tree; only the sums (a
few r × t arrays per head) reach the client. What the kernel needs from the data is taken in
a first pass of the same shape:

- the weighted mean and variance of every input and target column, merged across partitions
  with the pairwise update of Chan, Golub & LeVeque (1979),
  :math:`\bar x = \bar x_a + \delta\, W_b/W`, :math:`M_2 = M_{2,a} + M_{2,b} +
  \delta^2 W_a W_b / W` (:math:`\delta = \bar x_b - \bar x_a`): the center, Scott's
  bandwidth :math:`\sigma_j W^{-1/(d+4)}` and the target offset, as the in-memory fit computes
  them from all rows;
- a uniform sample of ``n_subsample`` rows without replacement: every row draws a uniform
  key on its worker, each partition keeps its ``n_subsample`` smallest and the merge keeps the
  smallest overall. What the in-memory fit computes on a subsample (the ``"loo"`` and
  ``"silverman"`` bandwidths, rescaled by Scott's factor :math:`(n_{sub}/n)^{1/(d+4)}`,
  Nyström landmarks, an attention model, a learned projection) is computed on it.

With ``n`` at most ``n_subsample`` the sample is the whole training set in its order, and
with a bandwidth rule of Scott or a given bandwidth the features are drawn as in memory: the
fit is the in-memory fit up to the order of the sums.

**Predicting.** ``predict`` returns a dask array with one block per block of queries, each
computed on a worker from the fitted model, which is sent to the workers once (scattered
when a ``distributed`` client is running) — with its training set, for the exact estimators.
A linear-attention model fitted on a dask collection keeps no keys in memory; the queries
its features cannot serve (see :class:`~kernattn.LinearAttentionRegressor`) are computed
exactly against the training partitions where they live: every query block first predicts
with its features and names those rows, every training partition computes their exact
:math:`\sum_i e^{\ell_i - c}\,[v_i, v_i^2, 1]` with its own shift :math:`c` (the largest of
its logits), the partial sums are merged up a tree as in the online softmax
(:math:`\Sigma = \Sigma_a e^{c_a - c} + \Sigma_b e^{c_b - c}`, :math:`c = \max(c_a, c_b)`),
and the query blocks finish those rows. The distributed model predicts what the in-memory
model fitted on the same data predicts.
"""

import copy
import uuid
import warnings

import dask
import dask.array as da
import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from kernattn._engine import KEY_TILE, fit_transaction
from kernattn._numerics import power_of_two_scale
from kernattn.bandwidth import resolve_bandwidth

# Partial results merged per node of the reduction trees.
SPLIT_EVERY = 8


# ------------------------------------------------------------------ collections


def _is_dataframe(data):
    return hasattr(data, "to_dask_array")


def as_dask_array(data, name, ndim=None):
    """A dask array from a dask array, dataframe or series (row lengths computed)."""
    if _is_dataframe(data):
        data = data.to_dask_array(lengths=True)
    elif not isinstance(data, da.Array):
        raise TypeError(
            f"{name} must be a dask array or dataframe when another argument is one; got "
            f"{type(data).__name__}"
        )
    if np.isnan(data.shape[0]) or any(np.isnan(c) for c in data.chunks[0]):
        data = data.compute_chunk_sizes()
    if ndim is not None and data.ndim not in ndim:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndim))} dimensions; got {data.ndim}"
        )
    if not (np.issubdtype(data.dtype, np.number) or data.dtype == bool):
        raise ValueError(f"{name} must hold numbers; got dtype {data.dtype}")
    return data


def _rows_like(data, X, name):
    """``data`` (dask, numpy or None) as a dask array with the row chunks of ``X``."""
    if data is None:
        return None
    if not isinstance(data, da.Array) and not _is_dataframe(data):
        data = np.asarray(data)
        data = da.from_array(data, chunks=(X.chunks[0],) + data.shape[1:])
    data = as_dask_array(data, name)
    if data.shape[0] != X.shape[0]:
        raise ValueError(
            f"{name} has {data.shape[0]} rows; X has {X.shape[0]} (one per training sample)"
        )
    if data.chunks[0] != X.chunks[0]:
        data = data.rechunk((X.chunks[0],) + data.chunks[1:])
    return data


def _check_feature_names(estimator, X, reset):
    """Feature names of a dask dataframe, checked as scikit-learn checks a pandas one."""
    names = None
    if hasattr(X, "columns"):
        columns = list(X.columns)
        if all(isinstance(c, str) for c in columns):
            names = np.asarray(columns, dtype=object)
    if reset:
        estimator.__dict__.pop("feature_names_in_", None)
        if names is not None:
            estimator.feature_names_in_ = names
        return
    fitted = getattr(estimator, "feature_names_in_", None)
    if fitted is not None and names is not None and not np.array_equal(fitted, names):
        raise ValueError(
            "The feature names should match those that were passed during fit; got "
            f"{list(names)}, expected {list(fitted)}"
        )


def _query_array(estimator, X):
    """The queries as a float dask array of ``n_features_in_`` columns, one column chunk."""
    _check_feature_names(estimator, X, reset=False)
    if isinstance(X, np.ndarray) or not (isinstance(X, da.Array) or _is_dataframe(X)):
        X = np.asarray(X, dtype=float)
        X = da.from_array(X, chunks=(max(1, len(X)),) + X.shape[1:])
    X = as_dask_array(X, "X", ndim=(2,))
    d = estimator.n_features_in_
    if X.shape[1] != d:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} is expecting {d} "
            "features as input."
        )
    return X.rechunk({1: -1})


def _model_on_workers(model):
    """The model as one node of the graph: scattered once when a distributed client runs
    (each worker then fetches it once), otherwise a single named task."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        client = None
    if client is not None:
        return dask.delayed(client.scatter(model, hash=False))
    return dask.delayed(model, name=f"kernattn-model-{uuid.uuid4().hex}", pure=False)


def _tree(parts, combine):
    """``combine`` applied up a tree of at most ``SPLIT_EVERY`` parts per node."""
    parts = list(parts)
    combine = dask.delayed(combine, pure=True)
    while len(parts) > 1:
        parts = [combine(*parts[i : i + SPLIT_EVERY]) for i in range(0, len(parts), SPLIT_EVERY)]
    return parts[0]


def _blocks(*arrays):
    """Per row block, the delayed blocks of each array (``None`` stays ``None``)."""
    columns = []
    for a in arrays:
        if a is None:
            columns.append(None)
            continue
        blocks = a.to_delayed()
        columns.append(blocks.reshape(blocks.shape[0], -1)[:, 0])
    n = len(next(c for c in columns if c is not None))
    return [tuple(None if c is None else c[i] for c in columns) for i in range(n)]


# ------------------------------------------------------------------ fitting


class _Summary:
    """What the first pass takes from the rows of positive weight: weighted means and
    sums of squared deviations of the inputs and targets, the largest weight and |input|,
    the target extremes, checks, and the rows with the smallest sampling keys."""

    def __init__(self, X, Y, w, start, seed, n_sample):
        self.n_rows = len(X)
        self.n_sample = n_sample
        self.bad_inputs = int(np.sum(~np.isfinite(X))) + int(np.sum(~np.isfinite(Y)))
        self.bad_weights = int(np.sum(~(w >= 0)) + np.sum(~np.isfinite(w)))
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


def _summarize(X, y, w, start, seed, n_sample):
    X = np.asarray(X, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(len(X), -1)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float).reshape(-1)
    return _Summary(X, Y, w, start, seed, n_sample)


def _partition_sums(kernel, X, y, w, y_offset):
    """One partition's key sums: the rows of positive weight added to an empty copy."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(len(X), -1)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float).reshape(-1)
    active = w > 0
    part = kernel.without_keys().accumulate(X[active], Y[active] - y_offset, w[active])
    return part.key_sums, part.key_log_scale, part.key_radius, part.target_sums


def _merge_sums(*parts):
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


def _sample_seed(random_state):
    """A seed for the workers' sampling keys that leaves ``random_state`` untouched when it
    is an int (the kernel's own draws then match the in-memory fit's)."""
    if random_state is None or isinstance(random_state, np.random.RandomState):
        return int(check_random_state(random_state).randint(2**31 - 1))
    return int(random_state)


def fit_linear(estimator, X, y, sample_weight=None):
    """``LinearAttentionRegressor.fit`` on dask collections (see the module docstring)."""
    with fit_transaction(estimator):
        estimator._validate_params()
        estimator._check_params()
        frame = X
        X = as_dask_array(X, "X", ndim=(2,))
        X = X.rechunk({1: -1})
        y = _rows_like(y, X, "y")
        if y.ndim not in (1, 2):
            raise ValueError(f"y must have 1 or 2 dimensions; got {y.ndim}")
        w = _rows_like(sample_weight, X, "sample_weight")
        n, d = X.shape
        if n < 1 or d < 1:
            raise ValueError(f"X must have at least one row and one feature; got shape {X.shape}")
        _check_feature_names(estimator, frame, reset=True)
        estimator.n_features_in_ = d
        estimator._dtype = np.dtype(np.float32 if X.dtype == np.float32 else np.float64)

        seed = _sample_seed(estimator.random_state)
        n_sample = estimator.n_subsample
        starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]])
        parts = [
            dask.delayed(_summarize, pure=True)(Xb, yb, wb, int(start), [seed, i], n_sample)
            for i, ((Xb, yb, wb), start) in enumerate(zip(_blocks(X, y, w), starts, strict=True))
        ]
        summary = _tree(parts, _Summary.merge).compute()
        _check_summary(summary)

        _, order, X_s, Y_s, w_s = summary.sample
        rows = np.argsort(order, kind="stable")
        X_s, Y_s, w_s = X_s[rows], Y_s[rows], w_s[rows]
        t = len(summary.y_mean)
        estimator._target_shape = tuple(y.shape[1:])
        estimator._y_offset = summary.y_mean
        spread = np.maximum(summary.y_max - summary.y_mean, summary.y_mean - summary.y_min)
        estimator._value_scale = power_of_two_scale(spread[None, :], axis=0)
        kernel = _make_kernel(estimator, summary, X_s, Y_s, w_s)

        parts = [
            dask.delayed(_partition_sums, pure=True)(kernel, Xb, yb, wb, summary.y_mean)
            for Xb, yb, wb in _blocks(X, y, w)
        ]
        sums, scale, radius, targets = _tree(parts, _merge_sums).compute()
        kernel.key_sums, kernel.key_log_scale = sums, scale
        kernel.key_radius, kernel.target_sums = radius, targets

        for name in ("_active", "_moments"):
            estimator.__dict__.pop(name, None)
        estimator._log_sample_weight = np.zeros(0)
        estimator._values = np.zeros((0, t))
        # The training set stays where it is: the exact rows of predict are computed there.
        estimator.X_fit_ = X
        estimator.y_fit_ = y
        estimator.sample_weight_ = da.ones(n, chunks=X.chunks[0]) if w is None else w
        estimator.kernel_ = kernel
    return estimator


def _check_summary(summary):
    if summary.bad_inputs:
        raise ValueError(
            f"Input contains NaN or infinity: {summary.bad_inputs} entries of X or y are not "
            "finite"
        )
    if summary.bad_weights:
        raise ValueError(
            f"sample_weight must be finite and non-negative; {summary.bad_weights} entries "
            "are not"
        )
    if not summary.count:
        raise ValueError("sample_weight must have at least one positive entry")


def _make_kernel(estimator, summary, X_s, Y_s, w_s):
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
            bandwidth = np.where(sigma > 1e-12 * np.maximum(summary.max_abs, 1e-300), h, 1.0)
        elif isinstance(bandwidth, str):
            bandwidth, loo_error = resolve_bandwidth(
                bandwidth, X_s, Y_s, w_s, n_jobs=estimator.n_jobs
            )
            # Scott's rate: the bandwidth of the sample shrinks like n^(-1/(d+4)).
            bandwidth = bandwidth * (w_s.sum() / summary.total) ** (1.0 / (d + 4))
        sub.set_params(center=center, bandwidth=bandwidth)
    kernel = sub._make_kernel(X_s, Y_s, w_s)
    kernel.weight_scale = float(summary.max_weight)
    for name, value in sub.__dict__.items():
        if name.endswith("_") and not name.startswith("_") and name not in sub.get_params():
            setattr(estimator, name, value)
    if loo_error is not None:
        estimator.loo_error_ = loo_error
    return kernel


# ---------------------------------------------------------------- predicting


def predict(estimator, X, return_std=False, **kwargs):
    """``estimator.predict`` on a dask collection: a lazy dask array (see the module
    docstring). ``X`` that is not a dask collection (for a model fitted on one) is
    computed through the same graph and returned as numpy."""
    check_is_fitted(estimator)
    lazy = isinstance(X, da.Array) or _is_dataframe(X)
    queries = _query_array(estimator, X)
    on_dask = isinstance(getattr(estimator, "X_fit_", None), da.Array)
    model = estimator
    if on_dask:
        model = copy.copy(estimator)
        for name in ("X_fit_", "y_fit_", "sample_weight_"):
            model.__dict__.pop(name)
    model = _model_on_workers(model)
    t = int(np.prod(estimator._target_shape))
    width = 2 * t if return_std else t
    dtype = estimator._dtype
    blocks = [Xb for (Xb,) in _blocks(queries)]
    if not on_dask:
        outputs = [
            dask.delayed(_predict_block, pure=True)(model, Xb, return_std, kwargs)
            for Xb in blocks
        ]
    else:
        outputs = _predict_with_remote_keys(estimator, model, blocks, return_std)
    columns = da.concatenate(
        [
            da.from_delayed(out, shape=(int(rows), width), dtype=dtype)
            for out, rows in zip(outputs, queries.chunks[0], strict=True)
        ]
    )
    mean, std = columns[:, :t], columns[:, t:]
    if estimator._target_shape == ():
        mean, std = columns[:, 0], columns[:, -1]
    result = (mean, std) if return_std else mean
    if not lazy:
        result = dask.compute(*result) if return_std else result.compute()
    return result


def _columns(prediction, return_std):
    if not return_std:
        return prediction.reshape(len(prediction), -1)
    mean, std = prediction
    return np.hstack([mean.reshape(len(mean), -1), std.reshape(len(std), -1)])


def _predict_block(model, X, return_std, kwargs):
    return _columns(model.predict(np.asarray(X), return_std=return_std, **kwargs), return_std)


def _row_keys(X):
    """One hashable key per row (its bytes)."""
    X = np.ascontiguousarray(X, dtype=float)
    return [row.tobytes() for row in X]


def _predict_with(model, X, return_std, exact_moments):
    """``model``'s prediction of ``X`` with its exact rows given by ``exact_moments(X, h)``,
    and the rows it asked for."""
    model = copy.copy(model)
    asked = []

    def moments(rows, h):
        asked.append(np.array(rows))
        return exact_moments(rows, h)

    model._exact_moments = moments
    with warnings.catch_warnings():
        # The features' fallback warning speaks of the in-memory keys; here they are remote.
        warnings.simplefilter("ignore", UserWarning)
        prediction = model.predict(np.asarray(X, dtype=float), return_std=return_std)
    asked = np.vstack(asked) if asked else np.zeros((0, X.shape[1]))
    return _columns(prediction, return_std), asked


def _first_pass(model, X, return_std):
    """A query block predicted with its features; the rows they cannot serve get the
    training mean for now and are returned (distinct) for the exact pass."""
    kernel = model.kernel_

    def training_mean(rows, h):
        mean, second = kernel.training_moments()
        return np.tile(mean, (len(rows), 1)), np.tile(second, (len(rows), 1))

    columns, asked = _predict_with(model, X, return_std, training_mean)
    return columns, np.unique(asked, axis=0)


def _union(*rows):
    return np.unique(np.vstack(rows), axis=0)


def _exact_partial(model, queries, X, y, w):
    """Per head, ``(c, Σ_i e^{ℓ_i − c} [v_i, v_i², 1])`` of ``queries`` against one
    training partition (``c`` the largest logit of each query here)."""
    kernel = model.kernel_
    X = np.asarray(X, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(len(X), -1)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float).reshape(-1)
    active = w > 0
    X, Y, w = X[active], Y[active], w[active]
    values = (Y - model._y_offset) / model._value_scale
    moments = np.hstack([values, values**2, np.ones((len(values), 1))])
    out = []
    for h in range(kernel.n_heads):
        top = np.full(len(queries), -np.inf)
        sums = np.zeros((len(queries), moments.shape[1]))
        if len(queries) and len(X):
            exact = kernel.without_keys().bind(X, w).exact
            prepared = exact.queries(queries, h).astype(np.float64)
            for start in range(0, exact.n_keys, KEY_TILE):
                keys = slice(start, min(start + KEY_TILE, exact.n_keys))
                logits = exact.logits(prepared, h, keys=keys).astype(np.float64)
                new_top = np.maximum(top, logits.max(axis=1))
                with np.errstate(invalid="ignore"):
                    sums *= np.where(np.isfinite(top), np.exp(top - new_top), 0.0)[:, None]
                top = new_top
                sums += np.exp(logits - top[:, None]) @ moments[keys]
        out.append((top, sums))
    return out


def _merge_exact(*parts):
    """Per head, partial exact sums merged at the largest shift (the online softmax)."""
    merged = []
    for pieces in zip(*parts, strict=True):
        top, sums = pieces[0]
        for other_top, other_sums in pieces[1:]:
            new_top = np.maximum(top, other_top)
            with np.errstate(invalid="ignore"):
                a = np.where(np.isfinite(top), np.exp(top - new_top), 0.0)
                b = np.where(np.isfinite(other_top), np.exp(other_top - new_top), 0.0)
            sums = sums * a[:, None] + other_sums * b[:, None]
            top = new_top
        merged.append((top, sums))
    return merged


def _second_pass(model, X, first, queries, exact, return_std):
    """A query block with its exact rows recomputed from the merged exact sums."""
    columns, asked = first
    if not len(asked):
        return columns
    t = model.kernel_.n_outputs
    index = {key: i for i, key in enumerate(_row_keys(queries))}
    X = np.asarray(X, dtype=float)
    wanted = set(_row_keys(asked))
    rows = np.array([key in wanted for key in _row_keys(X)])

    def moments(block, h):
        sums = exact[h][1][[index[key] for key in _row_keys(block)]]
        return sums[:, :t] / sums[:, -1:], sums[:, t : 2 * t] / sums[:, -1:]

    columns = columns.copy()
    columns[rows], _ = _predict_with(model, X[rows], return_std, moments)
    return columns


def _predict_with_remote_keys(estimator, model, blocks, return_std):
    """The three stages of a prediction by a model whose keys are a dask collection."""
    first = [dask.delayed(_first_pass, pure=True)(model, Xb, return_std) for Xb in blocks]
    queries = _tree([f[1] for f in first], _union)
    partials = [
        dask.delayed(_exact_partial, pure=True)(model, queries, Xb, yb, wb)
        for Xb, yb, wb in _blocks(estimator.X_fit_, estimator.y_fit_, estimator.sample_weight_)
    ]
    exact = _tree(partials, _merge_exact)
    return [
        dask.delayed(_second_pass, pure=True)(model, Xb, f, queries, exact, return_std)
        for Xb, f in zip(blocks, first, strict=True)
    ]
