"""Prediction on dask collections: a lazy dask array with one block per block of queries,
each computed on a worker from the fitted model (sent once, as a node of the graph).

A model whose training set is itself a dask collection (linear attention fitted on
partitions) keeps no keys in memory: its prediction runs in the stages of
:mod:`kernattn.linear._staged`, each a task — the near sums of every query block over every
training partition, the features' pass that names the rows needing the exact kernel, the
exact kernel's moments of those rows on every partition (merged at their shifts), and the
pass that finishes them.
"""

import copy

import dask
import dask.array as da
import numpy as np
from sklearn.utils.validation import check_is_fitted

from kernattn._engine.regressor import prediction_layout
from kernattn.distributed._collections import is_dataframe, query_array
from kernattn.distributed._graph import blocks, shared, task, tree
from kernattn.linear._near_field import NearFieldKernel
from kernattn.linear._staged import (
    add,
    exact_part,
    first_pass,
    merge_exact,
    near_part,
    query_cells,
    second_pass,
    sorted_part,
    union,
)

_TRAINING = ("X_fit_", "y_fit_", "sample_weight_")


def predict(model, X, return_std=False, **kwargs):
    """``model.predict`` on a dask collection: a lazy dask array. ``X`` that is not a dask
    collection (for a model fitted on one) is computed through the same graph and returned
    as numpy."""
    check_is_fitted(model)
    lazy = isinstance(X, da.Array) or is_dataframe(X)
    queries = query_array(model, X)
    remote = isinstance(getattr(model, "X_fit_", None), da.Array)
    sent = model
    if remote:
        # The model goes to the workers without its training set, which stays in its
        # partitions (a copy: the caller's model keeps it).
        sent = copy.copy(model)
        for name in _TRAINING:
            sent.__dict__.pop(name)
    node = shared(sent)
    target_shape, dtype = prediction_layout(model)
    t = int(np.prod(target_shape))
    width = 2 * t if return_std else t
    query_blocks = [Xb for (Xb,) in blocks(queries)]
    if remote:
        outputs = _in_stages(model, node, query_blocks, return_std)
    else:
        outputs = [task(_predict_block)(node, Xb, return_std, kwargs) for Xb in query_blocks]
    columns = da.concatenate(
        [
            da.from_delayed(out, shape=(int(rows), width), dtype=dtype)
            for out, rows in zip(outputs, queries.chunks[0], strict=True)
        ]
    )
    mean, std = columns[:, :t], columns[:, t:]
    if target_shape == ():
        mean, std = columns[:, 0], columns[:, -1]
    result = (mean, std) if return_std else mean
    if not lazy:
        result = dask.compute(*result) if return_std else result.compute()
    return result


def _predict_block(model, X, return_std, kwargs):
    prediction = model.predict(np.asarray(X), return_std=return_std, **kwargs)
    if not return_std:
        return prediction.reshape(len(prediction), -1)
    mean, std = prediction
    return np.hstack([mean.reshape(len(mean), -1), std.reshape(len(std), -1)])


def _second(pair):
    return pair[1]


def _in_stages(model, node, query_blocks, return_std):
    """The stages of a prediction by a model whose keys are a dask collection."""
    training = blocks(*(getattr(model, name) for name in _TRAINING))
    near = [None] * len(query_blocks)
    if isinstance(model.kernel_, NearFieldKernel):
        # Each training partition sorted by cell once, for every query block.
        keys = [task(sorted_part)(node, Xb, yb, wb) for Xb, yb, wb in training]
        cells = [task(query_cells)(node, Xb) for Xb in query_blocks]
        near = [tree([task(near_part)(node, c, part) for part in keys], add) for c in cells]
    first = [
        task(first_pass)(node, Xb, return_std, nb)
        for Xb, nb in zip(query_blocks, near, strict=True)
    ]
    asked = tree([task(_second)(f) for f in first], union)
    partials = [task(exact_part)(node, asked, Xb, yb, wb) for Xb, yb, wb in training]
    exact = tree(partials, merge_exact)
    return [
        task(second_pass)(node, Xb, f, asked, exact, return_std, nb)
        for Xb, f, nb in zip(query_blocks, first, near, strict=True)
    ]
