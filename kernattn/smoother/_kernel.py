"""The smoother's fitted kernel: one head comparing the inputs centered on the training
mean and divided by the bandwidth, and the local polynomials it carries."""

import numpy as np

from kernattn._core.numerics import weighted_mean
from kernattn._engine.heads import SoftmaxHeads
from kernattn._local.fits import LocalPolynomials
from kernattn.smoother._binned.kernel import DeferredLocalPolynomials

__all__ = ["bandwidth_heads", "local_polynomials"]


def bandwidth_heads(profile, keys, sample_weight, bandwidth, n_outputs, log_sample_weight, dtype):
    """One head comparing (x − c)/h with the keys' (x_i − c)/h, ``c`` the keys' weighted
    mean: centered before scaling, as distances are translation invariant and their
    expansion ‖q‖² + ‖k‖² − 2qᵀk is not (data near 1e6 would lose every digit)."""
    return SoftmaxHeads(
        similarity=profile,
        center=weighted_mean(keys, sample_weight),
        input_scale=bandwidth,
        query_weights=None,
        key_weights=None,
        scale=np.ones(1),
        head_weights=np.ones(1),
        head_bias=np.zeros(n_outputs),
        keys=keys,
        log_sample_weight=log_sample_weight,
        dtype=dtype,
    )


def local_polynomials(kernel, value_columns, values, degree, line, sample_weight, binned):
    """The local polynomials of ``degree`` in the columns ``line`` about the queries: from
    every key, or on the binned tier built when a query first needs them
    (``value_columns``: the engine's deferred value columns)."""
    if binned:
        return DeferredLocalPolynomials(kernel, value_columns, values, degree, line, sample_weight)
    return LocalPolynomials(
        kernel.keys(0),
        value_columns.columns,
        values,
        degree,
        dims=line,
        sample_weight=sample_weight,
    )
