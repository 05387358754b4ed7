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
with its features and names those rows, every training partition computes their exact
:math:`\sum_i e^{\ell_i - c}\,[v_i, v_i^2, 1]` with its own shift :math:`c` (the largest of
its logits), the partial sums are merged up a tree as in the online softmax
(:math:`\Sigma = \Sigma_a e^{c_a - c} + \Sigma_b e^{c_b - c}`, :math:`c = \max(c_a, c_b)`),
and the query blocks finish those rows. The distributed model predicts what the in-memory
model fitted on the same data predicts.
"""

import copy
import functools
import uuid
import warnings

import dask
import dask.array as da
import numpy as np
from sklearn import config_context, get_config
from sklearn.utils.validation import check_is_fitted

from kernattn._blocks import iter_query_blocks
from kernattn._engine import KEY_TILE, fit_transaction
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


def _configured(function, config, *args):
    with config_context(**config):
        return function(*args)


def _task(function):
    """``function`` as a task of the graph, run on the worker under this thread's
    ``working_memory`` (scikit-learn's configuration is not sent to the workers by itself,
    and the query blocks of a prediction are sized from it)."""
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
            _task(summarize)(
                Xb, yb, wb, int(start), [seed, i], estimator.n_subsample
            )
            for i, ((Xb, yb, wb), start) in enumerate(zip(_blocks(X, y, w), starts, strict=True))
        ]
        summary = _tree(parts, ChunkSummary.merge).compute()
        dtype = np.float32 if X.dtype == np.float32 else np.float64
        kernel = start_fit(estimator, summary, y.shape[1:], dtype)
        parts = [
            _task(chunk_sums)(kernel, Xb, yb, wb, summary.y_mean)
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
        outputs = [
            _task(_predict_block)(model, Xb, return_std, kwargs)
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
    exact = kernel.without_keys().bind(X, w).exact if len(queries) and len(X) else None
    out = []
    for h in range(kernel.n_heads):
        top = np.full(len(queries), -np.inf)
        sums = np.zeros((len(queries), moments.shape[1]))
        if exact is not None:
            width = min(KEY_TILE, exact.n_keys)
            for rows in iter_query_blocks(len(queries), width, cache=False):
                top[rows], sums[rows] = _exact_sums(exact, queries[rows], h, moments)
        out.append((top, sums))
    return out


def _exact_sums(exact, queries, h, moments):
    """``(c, Σ_i e^{ℓ_i − c} moments_i)`` of a block of queries, key tile by key tile with
    the running maximum ``c`` (the sums rescaled when it grows)."""
    prepared = exact.queries(queries, h).astype(np.float64)
    top = np.full(len(queries), -np.inf)
    sums = np.zeros((len(queries), moments.shape[1]))
    for start in range(0, exact.n_keys, KEY_TILE):
        keys = slice(start, min(start + KEY_TILE, exact.n_keys))
        logits = exact.logits(prepared, h, keys=keys).astype(np.float64)
        new_top = np.maximum(top, logits.max(axis=1))
        with np.errstate(invalid="ignore"):
            sums *= np.where(np.isfinite(top), np.exp(top - new_top), 0.0)[:, None]
        top = new_top
        sums += np.exp(logits - top[:, None]) @ moments[keys]
    return top, sums


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
