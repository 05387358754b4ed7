r"""The estimators on Dask collections: fit and predict where the data live.

Imported only when a dask array or dataframe reaches ``fit`` or ``predict`` (dask is an
optional extra, ``pip install "kernattn[dask]"``).

**Fitting linear attention.** The key sums :math:`S = \sum_i s_i \phi(k_i) v_i^\top` and
:math:`z = \sum_i s_i \phi(k_i)` are sums over rows: the two passes of
:mod:`kernattn.linear._chunks` (statistics and a uniform sample, then the sums) run with the
partitions as chunks, each on the worker that holds it, and the partial results are merged
up a tree of at most ``SPLIT_EVERY`` parts per node. Only the merged statistics, the sample
(``n_subsample`` rows) and the sums (a few r × t arrays per head) reach the client.

**Predicting.** ``predict`` returns a dask array with one block per block of queries, each
computed on a worker from the fitted model, which is sent to the workers once (scattered
when a ``distributed`` client is running) — with its training set, for the exact estimators.
A linear-attention model fitted on a dask collection keeps no keys in memory; the queries
its features cannot serve (see :class:`~kernattn.LinearAttentionRegressor`) are computed
exactly against the training partitions where they live: every query block first predicts
with its features and names those rows (and those whose spread :math:`E_w[v^2] - E_w[v]^2`
cancels, which the in-memory model redoes from its keys); every training partition computes,
for those rows, the exact kernel's state :math:`(c, W, m, M_2)` — its largest logit
:math:`c`, :math:`W = \sum_i e^{\ell_i - c}`, the weighted mean :math:`m` of the values and
:math:`M_2 = \sum_i e^{\ell_i - c} (v_i - m)^2`; the states are merged up a tree with Chan
et al.'s update, the weights rescaled to the larger shift as in the online softmax; and the
query blocks finish those rows. The distributed model predicts what the in-memory model
fitted on the same data predicts, spreads included.
"""

import copy
import functools
import uuid
import warnings

import dask
import dask.array as da
import numpy as np
from joblib import parallel_config
from sklearn import config_context, get_config
from sklearn.utils.validation import check_is_fitted

from kernattn._blocks import iter_query_blocks
from kernattn._engine import KEY_TILE, WELL_CONDITIONED, fit_transaction
from kernattn.linear._chunks import (
    ChunkSummary,
    chunk_sums,
    finish_fit,
    merge_sums,
    sample_seed,
    start_fit,
    summarize,
)

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
    """The model (or any fitted object) as one node of the graph: scattered once when a
    distributed client runs (each worker then fetches it once), otherwise a single named
    task."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        client = None
    if client is not None:
        return dask.delayed(client.scatter(model, hash=False))
    return dask.delayed(model, name=f"kernattn-model-{uuid.uuid4().hex}", pure=False)


def _configured(function, config, *args):
    # One task, one thread: the cluster's workers are the parallelism (an estimator's own
    # n_jobs=None would start a thread per core in every worker).
    with config_context(**config), parallel_config(n_jobs=1):
        return function(*args)


def _task(function):
    """``function`` as a task of the graph, run on the worker under this thread's
    ``working_memory`` (scikit-learn's configuration is not sent to the workers by itself,
    and the query blocks of a prediction are sized from it) and on one thread (unless the
    estimator's ``n_jobs`` asks for more)."""
    config = {"working_memory": get_config()["working_memory"]}
    return dask.delayed(functools.partial(_configured, function, config), pure=True)


def _tree(parts, combine):
    """``combine`` applied up a tree of at most ``SPLIT_EVERY`` parts per node."""
    parts = list(parts)
    combine = _task(combine)
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


def fit_linear(estimator, X, y, sample_weight=None):
    """``LinearAttentionRegressor.fit`` on dask collections: both passes of
    :mod:`kernattn.linear._chunks` with the partitions as chunks, on the workers."""
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

        seed = sample_seed(estimator.random_state)
        starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]])
        parts = [
            _task(summarize)(Xb, yb, wb, int(start), [seed, i], estimator.n_subsample)
            for i, ((Xb, yb, wb), start) in enumerate(zip(_blocks(X, y, w), starts, strict=True))
        ]
        summary = _tree(parts, ChunkSummary.merge).compute()
        dtype = np.float32 if X.dtype == np.float32 else np.float64
        kernel = start_fit(estimator, summary, y.shape[1:], dtype)
        # The kernel (features, landmarks) goes to each worker once, not with every task.
        template = _model_on_workers(kernel)
        parts = [
            _task(chunk_sums)(template, Xb, yb, wb, summary.y_mean)
            for Xb, yb, wb in _blocks(X, y, w)
        ]
        finish_fit(estimator, kernel, _tree(parts, merge_sums).compute())
        # The training set stays where it is: the exact rows of predict are computed there.
        estimator.X_fit_ = X
        estimator.y_fit_ = y
        estimator.sample_weight_ = da.ones(n, chunks=X.chunks[0]) if w is None else w
    return estimator


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
        outputs = [_task(_predict_block)(model, Xb, return_std, kwargs) for Xb in blocks]
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


# Marks a model copy whose exact rows come from the partitions (its kernel keeps no keys).
_REMOTE_KEYS = "remote"


def _predict_with(model, X, return_std, exact_moments, exact_spread):
    """``model``'s prediction of ``X`` with the rows it would compute from its kept keys
    given instead: ``exact_moments(rows, h)`` → first and second moments of the rows its
    features cannot serve, ``exact_spread(rows, h, first)`` → ``Σ_i w_i (v_i − first)²``
    under the exact weights, for the rows whose spread cancels. Returns the prediction's
    columns and the rows asked for (distinct)."""
    model = copy.copy(model)
    model.kernel_ = copy.copy(model.kernel_)
    model.kernel_.exact = _REMOTE_KEYS
    asked = []

    def moments(rows, h):
        asked.append(np.array(rows))
        return exact_moments(rows, h)

    def accurate_spread(X, h, first, spread, second, kernel=None):
        # The in-memory rule (engine): rows whose E[v²] − E[v]² lost its digits.
        with np.errstate(invalid="ignore"):
            cancelled = ~(spread > WELL_CONDITIONED * second)
        redo = np.flatnonzero(np.any(cancelled, axis=1))
        if not len(redo):
            return spread
        asked.append(X[redo])
        spread = spread.astype(np.float64)
        exact = exact_spread(X[redo], h, first[redo])
        for o in range(spread.shape[1]):
            # Only the outputs that cancelled, as in memory.
            mine = cancelled[redo, o]
            spread[redo[mine], o] = exact[mine, o]
        return spread

    model._exact_moments = moments
    model._accurate_spread = accurate_spread
    with warnings.catch_warnings():
        # The features' fallback warning speaks of the in-memory keys; here they are remote.
        warnings.simplefilter("ignore", UserWarning)
        prediction = model.predict(np.asarray(X, dtype=float), return_std=return_std)
    asked = np.unique(np.vstack(asked), axis=0) if asked else np.zeros((0, X.shape[1]))
    return _columns(prediction, return_std), asked


def _first_pass(model, X, return_std):
    """A query block predicted with its features; the rows they cannot serve (and those
    whose spread cancels) get placeholders for now and are returned for the exact pass."""
    mean, second = model.kernel_.training_moments()

    def training_mean(rows, h):
        return np.tile(mean, (len(rows), 1)), np.tile(second, (len(rows), 1))

    def no_spread(rows, h, first):
        return np.zeros_like(first)

    return _predict_with(model, X, return_std, training_mean, no_spread)


def _union(*rows):
    return np.unique(np.vstack(rows), axis=0)


def _exact_partial(model, queries, X, y, w):
    """Per head, the exact-kernel state ``(c, W, m, M₂)`` of ``queries`` against one
    training partition: ``c`` the largest logit of each query here, ``W = Σ_i e^{ℓ_i − c}``,
    ``m`` the weighted mean of the values and ``M₂ = Σ_i e^{ℓ_i − c} (v_i − m)²``."""
    kernel = model.kernel_
    X = np.asarray(X, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(len(X), -1)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float).reshape(-1)
    active = w > 0
    X, Y, w = X[active], Y[active], w[active]
    values = (Y - model._y_offset) / model._value_scale
    exact = kernel.without_keys().bind(X, w).exact if len(queries) and len(X) else None
    out = []
    for h in range(kernel.n_heads):
        state = _empty_state(len(queries), values.shape[1])
        if exact is not None:
            width = min(KEY_TILE, exact.n_keys)
            for rows in iter_query_blocks(len(queries), width, cache=False):
                block = _exact_state(exact, queries[rows], h, values)
                for whole, part in zip(state, block, strict=True):
                    whole[rows] = part
        out.append(state)
    return out


def _empty_state(n, t):
    return np.full(n, -np.inf), np.zeros(n), np.zeros((n, t)), np.zeros((n, t))


def _exact_state(exact, queries, h, values):
    """The state ``(c, W, m, M₂)`` of a block of queries, merged key tile by key tile."""
    prepared = exact.queries(queries, h).astype(np.float64)
    state = _empty_state(len(queries), values.shape[1])
    for start in range(0, exact.n_keys, KEY_TILE):
        keys = slice(start, min(start + KEY_TILE, exact.n_keys))
        logits = exact.logits(prepared, h, keys=keys).astype(np.float64)
        top = logits.max(axis=1)
        weights = np.exp(logits - top[:, None])
        total = weights.sum(axis=1)
        mean = weights @ values[keys] / total[:, None]
        m2 = np.empty_like(mean)
        for o in range(values.shape[1]):
            # Σ e (v − m)² directly: E[v²] − m² would cancel where m is far from 0.
            deviation = values[keys, o][None, :] - mean[:, o : o + 1]
            m2[:, o] = np.einsum("ij,ij->i", weights * deviation, deviation)
        state = _merge_state(state, (top, total, mean, m2))
    return state


def _merge_state(a, b):
    r"""Two exact-kernel states of the same queries merged (Chan et al.'s update, with the
    weights of each taken out at its own shift): :math:`c = \max(c_a, c_b)`,
    :math:`W = W_a e^{c_a - c} + W_b e^{c_b - c}`, :math:`m = m_a + \delta W_b'/W`,
    :math:`M_2 = M_{2,a}' + M_{2,b}' + \delta^2 W_a' W_b'/W`."""
    top_a, total_a, mean_a, m2_a = a
    top_b, total_b, mean_b, m2_b = b
    top = np.maximum(top_a, top_b)
    with np.errstate(invalid="ignore"):
        # A state without keys (c = −inf) weighs nothing.
        scale_a = np.where(np.isfinite(top_a), np.exp(top_a - top), 0.0)
        scale_b = np.where(np.isfinite(top_b), np.exp(top_b - top), 0.0)
    total_a, total_b = total_a * scale_a, total_b * scale_b
    total = total_a + total_b
    share = np.divide(total_b, total, out=np.zeros_like(total), where=total > 0)[:, None]
    delta = mean_b - mean_a
    mean = mean_a + delta * share
    m2 = m2_a * scale_a[:, None] + m2_b * scale_b[:, None] + delta**2 * (total_a[:, None] * share)
    return top, total, mean, m2


def _merge_exact(*parts):
    """Per head, the partitions' exact-kernel states merged."""
    merged = []
    for pieces in zip(*parts, strict=True):
        state = pieces[0]
        for other in pieces[1:]:
            state = _merge_state(state, other)
        merged.append(state)
    return merged


def _second_pass(model, X, first, queries, exact, return_std):
    """A query block with its exact rows recomputed from the merged exact-kernel states."""
    columns, asked = first
    if not len(asked):
        return columns
    index = {key: i for i, key in enumerate(_row_keys(queries))}
    X = np.asarray(X, dtype=float)
    wanted = set(_row_keys(asked))
    rows = np.array([key in wanted for key in _row_keys(X)])

    training_mean, training_second = model.kernel_.training_moments()

    def state(block, h):
        # A row whose status differs between the passes by rounding (a ratio within an
        # ulp of its threshold) has no exact state: it keeps the features' placeholder.
        found = np.array([index.get(key, -1) for key in _row_keys(block)], dtype=int)
        _, total, mean, m2 = exact[h]
        mean, variance = mean[found], m2[found] / total[found, None]
        missing = found < 0
        mean[missing] = training_mean
        variance[missing] = training_second - training_mean**2
        return mean, variance

    def moments(block, h):
        mean, variance = state(block, h)
        return mean, variance + mean**2

    def spread(block, h, first):
        mean, variance = state(block, h)
        return variance + (mean - first) ** 2

    columns = columns.copy()
    columns[rows], _ = _predict_with(model, X[rows], return_std, moments, spread)
    return columns


def _predict_with_remote_keys(estimator, model, blocks, return_std):
    """The three stages of a prediction by a model whose keys are a dask collection."""
    first = [_task(_first_pass)(model, Xb, return_std) for Xb in blocks]
    queries = _tree([f[1] for f in first], _union)
    partials = [
        _task(_exact_partial)(model, queries, Xb, yb, wb)
        for Xb, yb, wb in _blocks(estimator.X_fit_, estimator.y_fit_, estimator.sample_weight_)
    ]
    exact = _tree(partials, _merge_exact)
    return [
        _task(_second_pass)(model, Xb, f, queries, exact, return_std)
        for Xb, f in zip(blocks, first, strict=True)
    ]
