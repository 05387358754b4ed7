r"""The split kernel of an in-memory fit: its cells, its far field's rank and its near field.

:class:`~kernattn.LinearAttentionRegressor` fitted on arrays in memory keeps its training
keys, so its near field (:mod:`kernattn.linear._near_field`) is chosen on all of them: the
cells are centered on random distinct training keys (:func:`cell_centers`), the keys are
sorted by cell, an error probe of sampled training rows is taken
(:class:`~kernattn.linear._near_search.ErrorProbe`), and, from the accuracy target ``tol``,
the far field's rank (:func:`~kernattn.linear._near_search.search_rank`, with
``n_components="auto"``) and the near cells
(:func:`~kernattn.linear._near_search.grow_near_cells`) are chosen. Where the split is
predicted to cost more than the exact weights (:func:`~kernattn.linear._cost.split_pays`),
it is given up. Plain settings in, the kernel and what was chosen out: the estimator warns
and records.
"""

from dataclasses import dataclass

import numpy as np

from kernattn._core.blocks import single_threaded_blas
from kernattn.feature_maps import NystroemFeatures
from kernattn.linear._cost import (
    ERROR_KEYS,
    ERROR_QUERIES,
    KEYS_PER_CELL,
    near_key_cap,
    split_cost,
    split_pays,
)
from kernattn.linear._near_field import NearFieldKernel
from kernattn.linear._near_search import ErrorProbe, grow_near_cells, search_rank


@dataclass
class SplitChoice:
    """What :func:`fit_near_field` chose.

    ``feature_map``: the far field's map chosen with the near field (``None``: the map
    the kernel was made with); ``errors``: the weight errors of the probe's rows at the near
    cells chosen; ``met``: whether their mean meets ``tol`` (``n_near_keys="auto"``);
    ``exact_weights``: whether the split was given up for the exact weights.
    """

    feature_map: object
    errors: np.ndarray
    met: bool
    exact_weights: bool


def cell_centers(kernel, X, rng):
    """The centers of the near field's cells: the projected keys of random distinct rows
    of ``X``, one per ``KEYS_PER_CELL`` rows (cells of equal expected size)."""
    keys = np.unique(X, axis=0) if len(X) <= 100_000 else X
    n_cells = max(1, len(X) // KEYS_PER_CELL)
    rows = rng.choice(len(keys), min(n_cells, len(keys)), replace=False)
    return np.unique(kernel.project(keys[np.sort(rows)], 0, "key"), axis=0)


def keys_within_reach(kernel, X):
    """Whether every projected key is finite and below 1e100 kernel units: beyond (a
    bandwidth near 1e-300) no distance is finite, and the far field serves alone."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.all(np.abs(kernel.project(X, 0, "key")) < 1e100))


def take_sums(kernel, X, values, sample_weight, dtype, rng, *, subsample, near_field, **settings):
    """Bind the training set to ``kernel`` and take its sums: with ``near_field`` (and keys
    within reach) as a split kernel whose near field is chosen by :func:`fit_near_field`
    (``settings``: its keyword arguments), else as the feature sums alone.

    Returns the kernel, the training rows drawn to measure it (``subsample(n, rng,
    ERROR_QUERIES)``) and the :class:`SplitChoice` (``None`` without a near field).
    """
    near_field = near_field and keys_within_reach(kernel, X)
    if near_field:
        kernel = NearFieldKernel(kernel, cell_centers(kernel, X, rng), 1)
    kernel.bind(X, sample_weight, dtype)
    choice = None
    # Many small products: BLAS threads would spin more than they compute.
    with single_threaded_blas():
        rows = subsample(len(X), rng, ERROR_QUERIES)
        if near_field:
            choice = fit_near_field(
                kernel, X, values, sample_weight, rng, rows, subsample=subsample, **settings
            )
        else:
            kernel.accumulate(X, values, sample_weight)
    return kernel, rows, choice


def tol_message(errors, tol, kernel):
    """The fit's warning where the weight ``errors`` measured with the most near keys that
    keep prediction linear are above ``tol`` on average."""
    return (
        f"the weight error measured at fit, {errors.mean():.3g}, is above tol="
        f"{tol:g} with the most near keys that keep prediction linear "
        f"({kernel.mean_near_keys:.0f} of {kernel.n_keys}); raise n_components or "
        "tol, or give n_near_keys"
    )


def fit_near_field(
    kernel, X, values, sample_weight, rng, rows, *, subsample, n_near, tol, n_subsample, rank
):
    """Sort the bound keys of the split ``kernel`` by cell, take its sums and choose its
    near field (and, with ``rank``, its far field's map first).

    Parameters
    ----------
    kernel : NearFieldKernel
        Bound to ``X`` and ``sample_weight``, its sums empty.
    X, values, sample_weight : ndarray
        The training keys, their centered values and their weights.
    rng : RandomState
        Draws the probe's key sample, the subsample of the candidate maps and their fits.
    rows : ndarray of int
        The training rows the weight error is measured on.
    subsample : callable
        ``subsample(n, rng)``: the rows the candidate maps are fitted on.
    n_near : int or "auto"
        Keys computed exactly per query, or ``"auto"``: the fewest near cells meeting
        ``tol`` (at most :func:`~kernattn.linear._cost.near_key_cap` keys), and the exact
        weights where the split does not pay.
    tol : float
    n_subsample : int
    rank : bool
        Choose the far field's rank with the near field (``n_components="auto"``).

    Returns
    -------
    choice : SplitChoice
    """
    kernel.sort_keys(X, values, sample_weight)
    n = kernel.n_keys
    cap = near_key_cap(n, n_subsample)
    probe = ErrorProbe(kernel, rows, ERROR_KEYS, rng.randint(2**31 - 1))
    first, feature_map = 1, None
    if rank:
        keys = subsample(len(X), rng)
        feature_map, first = _choose_rank(
            kernel, probe, X[keys], sample_weight[keys], rng, cap, tol, n_subsample
        )
        kernel.set_feature_map(feature_map)
    kernel.accumulate(X, values, sample_weight)
    probe.use_kernel()
    met = True
    if n_near == "auto":
        errors, met = grow_near_cells(kernel, probe, tol, cap, first)
    else:
        kernel.set_near_cells(int(np.ceil(n_near * kernel.n_cells / n)))
        errors = probe.errors()
    exact_weights = n_near == "auto" and not split_pays(kernel)
    if not exact_weights:
        kernel.precompute()
    return SplitChoice(feature_map, errors, met, exact_weights)


def _choose_rank(kernel, probe, X, sample_weight, rng, cap, tol, n_subsample):
    """The far field's map of the lowest predicted cost meeting ``tol`` (each candidate
    map fitted on the keys ``X``, a subsample) and the near cells to start from."""
    n = kernel.n_keys
    projected = kernel.far.project(X, 0, "key")

    def fit_map(r):
        if r == kernel.n_components:
            return kernel.feature_map
        return NystroemFeatures(r).fit(projected, sample_weight=sample_weight, random_state=rng)

    def cost_of(feature_map):
        return split_cost(
            n,
            feature_map.n_components_,
            kernel.mean_near_keys,
            kernel.n_near_cells,
            kernel.n_outputs,
        )

    return search_rank(kernel, probe, n, cap, fit_map, cost_of, tol, n_subsample)


def unserved_share(kernel, X_sample):
    """The share of the rows ``X_sample`` that the features of ``kernel`` cannot serve
    (computed exactly against every key at prediction); ``None`` for fewer than 10 rows."""
    if len(X_sample) < 10:
        return None
    unreliable = np.zeros(len(X_sample), dtype=bool)
    for h in range(kernel.n_heads):
        unreliable |= kernel.moments(X_sample, h)[2]
    return float(unreliable.mean())
