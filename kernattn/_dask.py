r"""The estimators on Dask collections: fit and predict where the data live.

Imported only when a dask array or dataframe reaches ``fit`` or ``predict`` (dask is an
optional extra, ``pip install "kernattn[dask]"``).

**Fitting linear attention.** The key sums :math:`S = \sum_i s_i \phi(k_i) v_i^\top` and
:math:`z = \sum_i s_i \phi(k_i)` are sums over rows: the two passes of
:mod:`kernattn.linear._chunks` (statistics and a uniform sample, then the sums) run with the
partitions as chunks, each on the worker that holds it, and the partial results are merged
up a tree of at most ``SPLIT_EVERY`` parts per node. Only the merged statistics, the sample
(``n_subsample`` rows) and the sums (a few r × t arrays per head) reach the client.

**The near field.** With the default near field
(:class:`~kernattn.linear._near_field.NearFieldKernel`), the first pass samples
``max(n_subsample, MAX_CELLS)`` rows, about one per 50 of which become the cell centers, and
the second adds each partition's per-cell sums :math:`S_c, z_c` next to the totals, merged
at the same constant. ``n_neighbors="auto"`` takes the share of the keys that a near field
of the sample itself needs to meet ``tol``, and with ``n_components="auto"`` the rank
chosen with it (:func:`_near_share_on_sample`). At prediction,
every training partition, sorted by cell once, gives each query block the exact sums of its
keys in the queries' near cells (no shift: the logits are at most 0, so the partitions'
sums add up the tree), and the query block adds its far field and finishes as in memory.

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

**The smoother's leave-one-out search.** ``KernelSmoother(bandwidth="loo").fit`` on more than
4 000 rows searches on subsets of the queries, each against every key; on a dask array the
queries are drawn on the workers and every evaluation of the criterion sums the kernel over
each partition's keys where it lives, merged up a tree (:class:`PartitionedCriterion`); the
fitted smoother then holds its training rows in memory (see :func:`fit_smoother`).
"""

import copy
import functools
import time
import uuid
import warnings

import dask
import dask.array as da
import numpy as np
from joblib import parallel_config
from sklearn import config_context, get_config
from sklearn.base import clone
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from kernattn._blocks import iter_query_blocks, single_threaded_blas
from kernattn._engine import KEY_TILE, WELL_CONDITIONED, fit_transaction
from kernattn._local_linear import value_key_columns
from kernattn._numerics import EXP_FLOOR, has_spread, power_of_two_scale
from kernattn.bandwidth import (
    CRITERIA,
    constant_gradient_terms,
    search_criterion,
    select_bandwidth,
    subset_sizes,
)
from kernattn.feature_maps import NystroemFeatures
from kernattn.linear._chunks import (
    ChunkSummary,
    check_summary,
    chunk_cell_sums,
    chunk_sums,
    finish_fit,
    merge_cell_sums,
    merge_sums,
    sample_seed,
    start_fit,
    summarize,
)
from kernattn.linear._near_field import NearFieldKernel, _ErrorProbe, grow_near_cells
from kernattn.linear._regressor import (
    ERROR_KEYS,
    ERROR_QUERIES,
    KEYS_PER_CELL,
)

# Partial results merged per node of the reduction trees.
SPLIT_EVERY = 8
# Most cells of a near field fitted on partitions, and most cells × features: its per-cell
# sums (cells × features × moments) stay a few tens of MB (8 192 cells at 256 features).
# The centers are drawn with the sample.
MAX_CELLS = 8192
CELL_FEATURES = MAX_CELLS * 256


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
        near_field = estimator._near_field()
        # The near field's centers are drawn with the sample: more rows of it, whose first
        # n_subsample (the smallest sampling keys) are the sample of the kernel all the same.
        n_sample = estimator.n_subsample
        if near_field:
            n_sample = max(n_sample, MAX_CELLS)
        starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]])
        parts = [
            _task(summarize)(Xb, yb, wb, int(start), [seed, i], n_sample)
            for i, ((Xb, yb, wb), start) in enumerate(zip(_blocks(X, y, w), starts, strict=True))
        ]
        summary = _tree(parts, ChunkSummary.merge).compute()
        dtype = np.float32 if X.dtype == np.float32 else np.float64
        kernel = start_fit(
            estimator,
            _sample_prefix(summary, estimator.n_subsample),
            y.shape[1:],
            dtype,
            near_field,
        )
        near = _cell_kernel(kernel, summary) if near_field else None
        if near is None:
            # The kernel (features, landmarks) goes to each worker once, not with every task.
            template = _model_on_workers(kernel)
            parts = [
                _task(chunk_sums)(template, Xb, yb, wb, summary.y_mean)
                for Xb, yb, wb in _blocks(X, y, w)
            ]
            finish_fit(estimator, kernel, _tree(parts, merge_sums).compute())
        else:
            n = int(summary.count)
            if estimator.n_neighbors == "auto":
                # Before the sums: it may choose another map for the far field.
                share, weight_error = _near_share_on_sample(estimator, near, summary, seed)
                if near.n_cells * near.n_components > CELL_FEATURES:
                    # More features than the cells were drawn for: fewer, larger cells.
                    near = _cell_kernel(near.far, summary)
            else:
                share, weight_error = estimator.n_neighbors / n, None
            template = _model_on_workers(near)
            parts = [
                _task(chunk_cell_sums)(template, Xb, yb, wb, summary.y_mean)
                for Xb, yb, wb in _blocks(X, y, w)
            ]
            sums, cell_sums, counts = _tree(parts, merge_cell_sums).compute()
            far = near.far
            far.key_sums, far.key_log_scale, far.key_radius, far.target_sums = sums
            near.set_cell_sums(cell_sums, counts)
            # The near cells hold about that share of the keys.
            near.set_near_cells(int(np.ceil(share * near.n_cells)))
            # Every cell's far sums once: each query block only reads them.
            near.precompute()
            finish_fit(estimator, near, None)
            estimator.n_neighbors_ = near.mean_near_keys
            if weight_error is not None:
                estimator.weight_error_ = weight_error
        # The training set stays where it is: the exact rows of predict are computed there.
        estimator.X_fit_ = X
        estimator.y_fit_ = y
        estimator.sample_weight_ = da.ones(n, chunks=X.chunks[0]) if w is None else w
    return estimator


def _sample_prefix(summary, n_sample):
    """The summary with the ``n_sample`` rows of its sample that have the smallest sampling
    keys (the sample is sorted by them): the sample of a first pass that kept as many."""
    out = copy.copy(summary)
    out.n_sample = n_sample
    out.sample = tuple(column[:n_sample] for column in summary.sample)
    return out


def _cell_kernel(kernel, summary):
    """A near field on ``kernel`` (its sums empty) whose cell centers are the projected
    rows of the sample drawn on the workers, about one per ``KEYS_PER_CELL`` rows (at
    most ``MAX_CELLS``, and at most ``CELL_FEATURES`` cells × features); ``None`` when the
    keys lie beyond a finite distance (a bandwidth near 1e-300), where the far field serves
    alone, as in memory."""
    X_s = summary.sample[2]
    most = min(MAX_CELLS, CELL_FEATURES // max(kernel.n_components, 1))
    n_cells = max(1, min(summary.count // KEYS_PER_CELL, most, len(X_s)))
    with np.errstate(over="ignore", invalid="ignore"):
        centers = kernel.project(X_s[:n_cells], 0, "key")
    if not np.all(np.abs(centers) < 1e100):
        return None
    return NearFieldKernel(kernel, np.unique(centers, axis=0), 1)


def _near_share_on_sample(estimator, near, summary, seed):
    """``n_neighbors="auto"`` on partitions: the share of the keys the near field computes
    exactly, chosen on the sample drawn on the workers, and its measured weight error;
    with ``n_components="auto"``, the far field's map too (set on ``near``, whose sums
    must still be empty).

    The sample (up to ``MAX_CELLS`` uniform rows) gets a near field of its own, in memory,
    with cells of ``KEYS_PER_CELL`` sampled rows, and the in-memory search runs on it:
    for ``n_components="auto"``, for every candidate rank a Nyström map fitted on the
    sample and the fewest near cells meeting ``tol`` (the far sums estimated on the sampled
    keys), the pair of the lowest predicted cost kept
    (:meth:`LinearAttentionRegressor._split_cost`, at the full key count); then the fewest
    near cells whose mean weight error, measured with the map's own sums on
    ``ERROR_QUERIES`` sampled rows left out of their own sums, is within ``tol`` (at most
    the share of keys that keeps prediction linear). The split's weights over a region of
    the input space depend on the share of the keys it holds, not on their number, so the
    full near field takes the same share of its cells; its error is that measured on the
    sample (the full near field's is not).
    """
    _, _, X_s, Y_s, w_s = summary.sample
    n, n_s = int(summary.count), len(X_s)
    sample_far = near.far.empty()
    with np.errstate(over="ignore", invalid="ignore"):
        centers = sample_far.project(X_s[: max(1, n_s // KEYS_PER_CELL)], 0, "key")
    kernel = NearFieldKernel(sample_far, np.unique(centers, axis=0), 1).bind(X_s, w_s)
    values = Y_s - summary.y_mean
    # The sample is in a random order: its first rows are a uniform sample of it.
    rows = np.arange(min(ERROR_QUERIES, n_s))
    cap = estimator._near_key_cap(n) * n_s / n
    rng = check_random_state(seed)
    first = 1
    with single_threaded_blas():
        kernel.sort_keys(X_s, values, w_s)
        probe = _ErrorProbe(kernel, rows, ERROR_KEYS, rng.randint(2**31 - 1))
        searched = estimator.n_components == "auto" and isinstance(estimator.feature_map, str)
        if searched:
            feature_map, first = _rank_on_sample(estimator, kernel, probe, near, n, cap, rng)
            kernel.set_feature_map(feature_map)
            near.set_feature_map(feature_map)
            estimator.feature_maps_ = [feature_map]
            estimator.n_components_ = feature_map.n_components_
        kernel.accumulate(X_s, values, w_s)
        probe.use_kernel()
        errors, met = grow_near_cells(kernel, probe, estimator.tol, cap, first)
    if not met:
        warnings.warn(
            f"the weight error measured at fit on {n_s} sampled rows, {errors.mean():.3g}, "
            f"is above tol={estimator.tol:g} with the most near keys that keep prediction "
            "linear; raise n_components or tol, or give n_neighbors",
            UserWarning,
            stacklevel=4,
        )
    return kernel.mean_near_keys / kernel.n_keys, float(errors.mean())


def _rank_on_sample(estimator, kernel, probe, near, n, cap, rng):
    """The Nyström map of the lowest predicted cost meeting ``tol`` (the highest rank if
    none does) on the sample's near field ``kernel``, and its number of near cells there
    (``LinearAttentionRegressor._choose_rank`` on the sample, its costs at ``n`` keys)."""
    n_s = kernel.n_keys
    # The maps see n_subsample keys, as in memory: the first rows of the sample (uniform).
    near_data = kernel._near
    first_rows = near_data["order"] < estimator.n_subsample
    keys = near_data["keys"][first_rows]
    weights = np.exp(near_data["log_weight"][first_rows])
    t = kernel.n_outputs

    def fit_map(r):
        return NystroemFeatures(min(r, len(keys))).fit(
            keys, sample_weight=weights, random_state=rng
        )

    def cost_of(feature_map):
        share = kernel.mean_near_keys / n_s
        return estimator._split_cost(
            n, feature_map.n_components_, share * n, share * near.n_cells, t
        )

    return estimator._search_rank(kernel, probe, n, cap, fit_map, cost_of)


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
    model.kernel_ = kernel = copy.copy(model.kernel_)
    if isinstance(kernel, NearFieldKernel):
        # Its exact kernel is its far field's.
        kernel.far = copy.copy(kernel.far)
        kernel.far.exact = _REMOTE_KEYS
    else:
        kernel.exact = _REMOTE_KEYS
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


def _first_pass(model, X, return_std, near=None):
    """A query block predicted with its features (and its near field's sums ``near``, if
    any); the rows they cannot serve (and those whose spread cancels) get placeholders for
    now and are returned for the exact pass."""
    model = _with_near_sums(model, X, near)
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


def _second_pass(model, X, first, queries, exact, return_std, near=None):
    """A query block with its exact rows recomputed from the merged exact-kernel states."""
    columns, asked = first
    if not len(asked):
        return columns
    model = _with_near_sums(model, X, near)
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
    """The stages of a prediction by a model whose keys are a dask collection: the near
    field's sums (if any), the features, the exact rows."""
    training = _blocks(estimator.X_fit_, estimator.y_fit_, estimator.sample_weight_)
    near = [None] * len(blocks)
    if isinstance(estimator.kernel_, NearFieldKernel):
        # Each training partition sorted by cell once, for every query block.
        keys = [_task(_sorted_partition)(model, Xb, yb, wb) for Xb, yb, wb in training]
        cells = [_task(_query_cells)(model, Xb) for Xb in blocks]
        near = [
            _tree([_task(_near_partial)(model, c, part) for part in keys], _add) for c in cells
        ]
    first = [
        _task(_first_pass)(model, Xb, return_std, nb) for Xb, nb in zip(blocks, near, strict=True)
    ]
    queries = _tree([f[1] for f in first], _union)
    partials = [_task(_exact_partial)(model, queries, Xb, yb, wb) for Xb, yb, wb in training]
    exact = _tree(partials, _merge_exact)
    return [
        _task(_second_pass)(model, Xb, f, queries, exact, return_std, nb)
        for Xb, f, nb in zip(blocks, first, near, strict=True)
    ]


# ------------------------------------------------------------ the near field remote


def _sorted_partition(model, X, y, w):
    """One training partition's keys as the near field reads them (sorted by cell, with
    their values and log-weights; see :meth:`NearFieldKernel.sort_keys`); ``None`` when it
    has no row of positive weight."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(len(X), -1)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float).reshape(-1)
    active = w > 0
    if not active.any():
        return None
    kernel = copy.copy(model.kernel_)
    kernel._near = None
    kernel.sort_keys(X[active], Y[active] - model._y_offset, w[active])
    near = kernel._near
    # What NearFieldKernel.near_sums reads with buffers: the cells' first rows and the
    # table's two parts, contiguous.
    p = near["keys"].shape[1] + 2
    return {
        "start": near["start"],
        "head": np.ascontiguousarray(near["table"][:, :p]),
        "tail": np.ascontiguousarray(near["table"][:, p:]),
    }


def _query_cells(model, X):
    """A query block's projected queries, sorted by cell, with their order and the
    bounds of each cell's run."""
    Q, cells = model.kernel_.query_cells(np.asarray(X, dtype=float))
    order = np.argsort(cells, kind="stable")
    bounds = np.flatnonzero(np.r_[True, cells[order][1:] != cells[order][:-1], True])
    return Q[order], cells[order], order, bounds


def _near_partial(model, query_cells, part):
    r"""A query block's near sums over one training partition's keys: per query, the
    exact :math:`\sum_i s_i \kappa(q, k_i) [v_i, v_i^2, 1]` over the keys here that lie in
    the query's near cells (no shift: the partitions' sums add up)."""
    Q, cells, order, bounds = query_cells
    kernel = model.kernel_
    sums = np.zeros((len(Q), kernel.far.key_sums.shape[2]))
    if part is None:
        return sums
    kernel = copy.copy(kernel)
    kernel._near = part
    # Buffers for the near keys of every cell: a worker's allocator may map and unmap (and
    # fault in) every large array anew (dask's nanny sets MALLOC_TRIM_THRESHOLD_).
    counts = np.diff(part["start"])
    widest = counts[kernel.near_cells[cells[bounds[:-1]]]].sum(axis=1).max(initial=0)
    buffers = (np.empty((widest, part["head"].shape[1])), np.empty((widest, sums.shape[1])))
    with single_threaded_blas():
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            sums[order[start:stop]] = kernel.near_sums(Q[start:stop], cells[start], buffers)
    return sums


def _add(*parts):
    return functools.reduce(np.add, parts)


def _with_near_sums(model, X, near):
    """``model`` whose kernel gives the moments of the queries ``X`` (and any subset of
    their rows) from their near sums ``near`` and its far field, as the in-memory near
    field does (:meth:`NearFieldKernel.split_sums`); ``model`` itself when ``near`` is
    ``None``."""
    if near is None:
        return model
    kernel = copy.copy(model.kernel_)
    X = np.asarray(X, dtype=float)
    Q, cells, order, bounds = _query_cells(model, X)
    sums = np.empty_like(near)
    far_query = np.empty(len(X), dtype=bool)
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        rows = order[start:stop]
        far = kernel.far_field_sums(Q[start:stop], cells[start])
        sums[rows], far_query[rows] = kernel.join_sums(near[rows], far)
    first, second, unreliable = kernel.moments_of(sums, far_query)
    index = {key: i for i, key in enumerate(_row_keys(X))}

    def moments(rows, h):
        found = np.array([index[key] for key in _row_keys(rows)], dtype=int)
        return first[found], second[found], unreliable[found]

    kernel.moments = moments
    model = copy.copy(model)
    model.kernel_ = kernel
    return model


# ------------------------------------------------------------- the smoother's search


def fit_smoother(estimator, X, y, sample_weight=None):
    """``KernelSmoother.fit`` on dask collections.

    The leave-one-out search of the Gaussian local-constant smoother on continuous features,
    for more than 4 000 rows (a search on subsets of the queries), evaluates its criterion
    on the workers (:class:`PartitionedCriterion`); any other bandwidth is found as in
    memory. Then the training set is brought into memory and the smoother fitted there at
    that bandwidth: every method of the fitted smoother (``predict``,
    ``attention_weights``, ``predict_interval``, ``gradient``) reads its training rows.
    """
    with fit_transaction(estimator):
        estimator._validate_params()
        estimator._check_params()
        data = (X, y, sample_weight)
        frame = X
        selection = None
        unsupported = _unsupported_on_workers(estimator)
        if not unsupported:
            X = as_dask_array(X, "X", ndim=(2,)).rechunk({1: -1})
            y = _rows_like(y, X, "y")
            if y.ndim not in (1, 2):
                raise ValueError(f"y must have 1 or 2 dimensions; got {y.ndim}")
            w = _rows_like(sample_weight, X, "sample_weight")
            if subset_sizes(X.shape[0]):
                # Read three times (the first pass, the search's partitions, the rows
                # brought in): computed once, kept on the workers until the fit ends.
                X, y, w = dask.persist(X, y, w)
                data = (X, y, w)
                selection = search_on_workers(X, y, w, estimator.random_state, estimator.verbose)
        # The training set comes into memory: the smoother's every method reads its rows.
        X_local, y_local, w_local = dask.compute(*data)
        if _is_dataframe(frame) and not hasattr(X_local, "columns"):
            # Persisted as an array: the frame's column names back.
            import pandas as pd

            X_local = pd.DataFrame(X_local, columns=frame.columns)
        searched = isinstance(estimator.bandwidth, str) and estimator.bandwidth in CRITERIA
        if searched and unsupported and subset_sizes(len(X_local)):
            warnings.warn(
                f"KernelSmoother: {unsupported}; only the leave-one-out search of the "
                "Gaussian local-constant smoother (bandwidth='loo', kernel='gaussian', "
                "degree=0, continuous features) evaluates its criterion on the workers. "
                "This search runs in memory, on the training set brought from the "
                "partitions.",
                UserWarning,
                stacklevel=3,
            )
        if selection is None:
            return type(estimator).fit(estimator, X_local, y_local, w_local)
        fitted = clone(estimator).set_params(bandwidth=selection.bandwidth, verbose=0)
        fitted.fit(X_local, y_local, w_local)
        for name, value in fitted.__dict__.items():
            if name not in estimator.get_params():
                setattr(estimator, name, value)
        estimator._use_selection(selection)
    return estimator


def _unsupported_on_workers(estimator):
    """Why the estimator's bandwidth is not searched on the workers (``""``: it is)."""
    if not (isinstance(estimator.bandwidth, str) and estimator.bandwidth in CRITERIA):
        return "no search"
    reasons = []
    if estimator.bandwidth != "loo":
        reasons.append(f"bandwidth={estimator.bandwidth!r}")
    if estimator.kernel != "gaussian":
        reasons.append(f"kernel={estimator.kernel!r}")
    if estimator.degree != 0:
        reasons.append(f"degree={estimator.degree!r}")
    for name in ("categorical_features", "ordinal_features"):
        if getattr(estimator, name) is not None:
            reasons.append(f"{name} given")
    return ", ".join(reasons)


def search_on_workers(X, y, w, random_state=None, verbose=0):
    """The leave-one-out bandwidths of the Gaussian local-constant smoother, its criterion
    evaluated on the workers (dask arrays ``X``, ``y``, ``w`` with the same row chunks,
    ``w`` may be ``None``).

    A first pass over the partitions takes the statistics of the rows of positive weight
    (the center, Scott's bandwidth, the targets' spread; merged as in
    :mod:`kernattn.linear._chunks`) and a uniform sample of queries drawn on the workers
    (each row a uniform key, the smallest kept): its first 600 and then all 2 400 rows are
    the nested subsets of the in-memory search. The partitions, centered and with the
    left-out pairs of those queries, are kept on the workers (persisted) during the search;
    then :func:`~kernattn.bandwidth.search_criterion` runs the in-memory search's steps on
    a :class:`PartitionedCriterion`. Too few rows of positive weight for a search on
    subsets: the in-memory search, on the rows brought in.
    """
    started = time.perf_counter()

    def say(message):
        if verbose >= 1:
            print(
                f"[bandwidth='loo' on {X.numblocks[0]} partitions "
                f"{time.perf_counter() - started:7.2f} s] {message}"
            )

    n_sample = subset_sizes(X.shape[0])[-1]
    seed = sample_seed(random_state)
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]])
    parts = [
        _task(summarize)(Xb, yb, wb, int(start), [seed, i], n_sample)
        for i, ((Xb, yb, wb), start) in enumerate(zip(_blocks(X, y, w), starts, strict=True))
    ]
    summary = _tree(parts, ChunkSummary.merge).compute()
    check_summary(summary)
    sizes = subset_sizes(summary.count)
    if not sizes:
        # The rows of positive weight are few: the exact search, in memory.
        X, y, w = dask.compute(X, y, w)
        active = np.ones(len(X), dtype=bool) if w is None else w > 0
        Y = np.asarray(y, dtype=float).reshape(len(X), -1)[active]
        weight = None if w is None else w[active]
        return select_bandwidth(
            X[active], Y, weight, criterion="loo", random_state=random_state, verbose=verbose
        )
    say(
        f"first pass: {summary.count} rows, {sizes[-1]} queries sampled on the workers; "
        "the partitions stay there, centered, during the search"
    )
    criterion = PartitionedCriterion(X, y, w, summary)
    try:
        stages = [np.arange(size) for size in sizes]
        return search_criterion(criterion, criterion.scott, stages, "loo", "gaussian", verbose)
    finally:
        criterion.release()


class PartitionedCriterion:
    r"""The leave-one-out criterion of the Gaussian local-constant smoother on a subset of
    queries, its sums over the keys taken on the workers.

    For query :math:`i` with inputs :math:`q_i = x_i/h` (centered), the estimate and the
    gradient of the squared error with respect to :math:`\theta_f = \log h_f` need only
    kernel sums over the keys :math:`j` outside :math:`i`'s duplicate group,

    .. math::

        \sum_j e^{\ell_{ij} - c_i}\,[1,\; y_j,\; k_j,\; k_j^2,\; y_j k_j,\; y_j k_j^2],
        \qquad \ell_{ij} = -\tfrac12 \|q_i - k_j\|^2 + \log s_j,

    (:math:`k_j = x_j/h`): since :math:`\partial\ell_{ij}/\partial\theta_f = u_{ijf}^2`
    with :math:`u = q - k`, :math:`\sum_j e^{\ell_{ij}} u_{ijf}^2 [1, y_j]` expands in
    :math:`q_{if}^2`, :math:`q_{if}` and these sums (see
    :class:`kernattn.bandwidth._Criterion`). Every partition computes the sums of its own
    keys with its own shift :math:`c_i` (its largest logit for the query), the partitions'
    sums are merged up a tree at the larger shift (:math:`\Sigma = \Sigma_a e^{c_a - c} +
    \Sigma_b e^{c_b - c}`, the online softmax), and the client finishes: the estimate
    :math:`\bar y_i`, the squared error :math:`\sum_i s_i \|y_i - \bar y_i\|^2` and its
    gradient, scaled to the whole training set as in memory. Only the queries (2 400 rows
    at most) and their sums travel; the criterion is the in-memory one on the same queries
    up to the order of the additions.

    Parameters
    ----------
    X, y, w : dask arrays
        The training set, with the same row chunks (``w`` may be ``None``).
    summary : ChunkSummary
        The first pass over the partitions: the statistics and the sample of queries.
    """

    def __init__(self, X, y, w, summary):
        d = X.shape[1]
        self.n = int(summary.count)
        self.center = summary.x_mean
        sigma_x = np.sqrt(summary.x_m2 / summary.total)
        constant = ~has_spread(sigma_x, summary.max_abs)
        if np.all(constant):
            raise ValueError(
                "bandwidth='loo' needs at least 2 distinct training inputs; every row of X "
                "is the same. Give a bandwidth or use 'scott'."
            )
        # Scott's rule, as rule_of_thumb_bandwidth (a constant feature gets 1).
        self.scott = np.where(constant, 1.0, sigma_x * summary.total ** (-1.0 / (d + 4)))
        # The targets in the search's units: centered, divided by a power of two near
        # their total standard deviation (as in memory).
        sigma_y = np.sqrt(summary.y_m2 / summary.total)
        top = float(sigma_y.max(initial=0.0))
        spread = top * float(np.sqrt(np.sum((sigma_y / top) ** 2))) if top > 0 else 1.0
        self.y_scale = float(power_of_two_scale(spread))
        self.y_offset = summary.y_mean
        weight_unit = float(power_of_two_scale(summary.max_weight))
        self.total = summary.total / weight_unit
        _, _, X_q, Y_q, w_q = summary.sample
        self.queries = X_q - self.center
        self.query_values = (Y_q - self.y_offset) / self.y_scale
        self.query_weights = w_q / weight_unit
        self.query_log_weights = np.log(w_q / summary.max_weight)
        prepare = _task(_prepare_partition)
        parts = [
            prepare(Xb, yb, wb, self.center, self.y_offset, self.y_scale, summary.max_weight, X_q)
            for Xb, yb, wb in _blocks(X, y, w)
        ]
        self._parts = list(dask.persist(*parts))

    def release(self):
        """Let the workers drop the partitions kept for the search."""
        self._parts = []

    def in_target_units(self, value):
        with np.errstate(over="ignore", under="ignore"):
            return value * self.y_scale * self.y_scale

    def _sums(self, log_bandwidth, n_queries, factors=(1.0,), gradient=True, leave_out=True):
        """Per factor, the merged ``(c, Σ)`` of the first ``n_queries`` queries."""
        work = _task(_partition_sums)
        parts = [
            work(
                part,
                np.asarray(log_bandwidth, dtype=float),
                n_queries,
                tuple(factors),
                gradient,
                leave_out,
            )
            for part in self._parts
        ]
        return _tree(parts, _merge_partition_sums).compute()

    def _squared_error(self, log_bandwidth, rows, merged, gradient):
        """The scaled criterion (and its gradient) of the queries ``rows`` (a prefix)."""
        b = len(rows)
        t = self.query_values.shape[1]
        _, sums = merged
        S0 = sums[:, 0]
        ybar = sums[:, 1 : 1 + t] / S0[:, None]
        residual = self.query_values[:b] - ybar
        s = self.query_weights[:b]
        scale = self.n / b / self.total
        value = scale * (s @ np.einsum("ij,ij->i", residual, residual))
        if not gradient:
            return value
        Q = self.queries[:b] / np.exp(log_bandwidth)
        inner, _ = constant_gradient_terms(Q, sums, residual, ybar)
        return value, -2.0 * scale * ((s / S0) @ inner)

    def scaled_loss_and_grad(self, log_bandwidth, rows):
        (merged,) = self._sums(log_bandwidth, len(rows))
        return self._squared_error(log_bandwidth, rows, merged, gradient=True)

    def scaled_loss(self, log_bandwidth, rows):
        (merged,) = self._sums(log_bandwidth, len(rows), gradient=False)
        return self._squared_error(log_bandwidth, rows, merged, gradient=False)

    def scaled_grid_losses(self, bandwidth, factors, rows):
        log_bandwidth = np.log(bandwidth)
        merged = self._sums(log_bandwidth, len(rows), factors, gradient=False)
        return np.array([self._squared_error(log_bandwidth, rows, m, False) for m in merged])

    def effective_dof(self, log_bandwidth, rows):
        """tr(S) estimated from the queries ``rows``: each query's own weight
        :math:`s_i / \\sum_j s_j \\kappa_{ij}` (itself included), scaled to all rows."""
        ((top, sums),) = self._sums(log_bandwidth, len(rows), gradient=False, leave_out=False)
        own = np.exp(np.maximum(self.query_log_weights[: len(rows)] - top, EXP_FLOOR))
        return float(self.n / len(rows) * np.sum(own / sums[:, 0]))


def _prepare_partition(X, y, w, center, y_offset, y_scale, max_weight, queries):
    """One partition as the search reads it: its rows of positive weight centered, the
    values in the search's units, the log-weights, and the (query, key) pairs to leave
    out (a query and every key with its exact input)."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(len(X), -1)
    w = np.ones(len(X)) if w is None else np.asarray(w, dtype=float).reshape(-1)
    active = w > 0
    X, Y, w = X[active], Y[active], w[active]
    # The left-out pairs: candidates by the first input, then whole rows compared.
    left_queries, left_keys = [], []
    candidates = np.flatnonzero(np.isin(X[:, 0], queries[:, 0]))
    if len(candidates):
        index = {}
        for i, row in enumerate(map(tuple, queries)):
            index.setdefault(row, []).append(i)
        for j in candidates:
            for i in index.get(tuple(X[j]), ()):
                left_queries.append(i)
                left_keys.append(j)
    order = np.argsort(np.asarray(left_queries, dtype=int), kind="stable")
    left = (
        np.asarray(left_queries, dtype=int)[order],
        np.asarray(left_keys, dtype=int)[order],
    )
    return {
        "inputs": X - center,
        "values": (Y - y_offset) / y_scale,
        "log_weights": np.log(w / max_weight),
        "queries": queries - center,
        "left_out": left,
    }


def _partition_sums(part, log_bandwidth, n_queries, factors, gradient, leave_out):
    """Per factor ``c`` of the bandwidth, ``(c_i, Σ_i)`` of the first ``n_queries``
    queries against this partition's keys: the kernel sums of :class:`PartitionedCriterion`
    on the partition's own shift ``c_i`` (−inf where it has no key for the query)."""
    # One BLAS thread: the products are small, and threads of the local scheduler (or of
    # other tasks) already share the cores.
    with single_threaded_blas():
        return _kernel_sums(part, log_bandwidth, n_queries, factors, gradient, leave_out)


def _kernel_sums(part, log_bandwidth, n_queries, factors, gradient, leave_out):
    h = np.exp(log_bandwidth)
    queries = part["queries"][:n_queries]
    inputs, values = part["inputs"], part["values"]
    left_queries, left_keys = part["left_out"] if leave_out else (np.zeros(0, int),) * 2
    inside = left_queries < n_queries
    left_queries, left_keys = left_queries[inside], left_keys[inside]
    n_keys = len(inputs)
    out = []
    for factor in factors:
        K = inputs / (h * factor)
        Q = queries / (h * factor)
        if gradient:
            columns = [np.ones((n_keys, 1)), values, K, K**2]
            columns += [value_key_columns(values, K), value_key_columns(values, K**2)]
        else:
            columns = [np.ones((n_keys, 1)), values]
        columns = np.hstack(columns)
        # −½‖q − k‖² + log s in one product: [q, −½‖q‖², 1] · [k, 1, −½‖k‖² + log s].
        half_sq = -0.5 * np.einsum("ij,ij->i", Q, Q)
        Q_aug = np.hstack([Q, half_sq[:, None], np.ones((len(Q), 1))])
        K_aug = np.vstack(
            [K.T, np.ones(n_keys), -0.5 * np.einsum("ij,ij->i", K, K) + part["log_weights"]]
        )
        top = np.full(len(Q), -np.inf)
        sums = np.zeros((len(Q), columns.shape[1]))
        width = min(max(n_keys, 1), KEY_TILE)
        for rows in iter_query_blocks(len(Q), width, n_arrays=2):
            top[rows], sums[rows] = _tiled_kernel_sums(
                Q_aug[rows], K_aug, columns, left_queries, left_keys, rows.start
            )
        out.append((top, sums))
    return out


def _tiled_kernel_sums(Q_aug, K_aug, columns, left_queries, left_keys, first):
    """``(c, Σ_j e^{ℓ_j − c} columns_j)`` of a block of queries (rows ``first, …`` of the
    sample) over tiles of keys that stay in cache, on the running maximum ``c`` of their
    logits (the online softmax); the left-out pairs weigh nothing."""
    b = len(Q_aug)
    n_keys = K_aug.shape[1]
    mine = (left_queries >= first) & (left_queries < first + b)
    left_rows, left_cols = left_queries[mine] - first, left_keys[mine]
    top = np.full(b, -np.inf)
    sums = np.zeros((b, columns.shape[1]))
    buffer = np.empty((b, min(max(n_keys, 1), KEY_TILE)))
    for start in range(0, n_keys, KEY_TILE):
        stop = min(start + KEY_TILE, n_keys)
        logits = np.matmul(Q_aug, K_aug[:, start:stop], out=buffer[:, : stop - start])
        if len(left_rows):
            here = (left_cols >= start) & (left_cols < stop)
            logits[left_rows[here], left_cols[here] - start] = -np.inf
        new_top = np.maximum(top, logits.max(axis=1))
        # A row that has met only left-out keys has no shift yet (−inf): its sums are 0.
        shift = np.where(np.isfinite(new_top), new_top, 0.0)
        sums *= np.exp(np.where(np.isfinite(top), top, shift) - shift)[:, None]
        top = new_top
        logits -= shift[:, None]
        np.maximum(logits, EXP_FLOOR, out=logits)
        np.exp(logits, out=logits)
        if len(left_rows):
            # The floor would give a left-out pair exp(EXP_FLOOR), not 0.
            logits[left_rows[here], left_cols[here] - start] = 0.0
        sums += logits @ columns[start:stop]
    return top, sums


def _merge_partition_sums(*parts):
    """The partitions' ``(c, Σ)`` (per factor) merged at the larger shift."""
    merged = []
    for pieces in zip(*parts, strict=True):
        top, sums = pieces[0]
        for other_top, other_sums in pieces[1:]:
            new_top = np.maximum(top, other_top)
            with np.errstate(invalid="ignore"):
                # A side without keys for a query (c = −inf) adds nothing.
                a = np.where(np.isfinite(top), np.exp(top - new_top), 0.0)
                b = np.where(np.isfinite(other_top), np.exp(other_top - new_top), 0.0)
            sums = sums * a[:, None] + other_sums * b[:, None]
            top = new_top
        merged.append((top, sums))
    return merged
