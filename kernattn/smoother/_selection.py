"""The smoother's bandwidth and degree: a criterion searched on the exact or the binned
sums, on encoded mixed data, a rule, the plug-in or the given bandwidth, and the comparison
of degrees for ``degree="auto"``.

Plain settings in, values out: each selection returns the bandwidths, the degree and,
where a criterion was searched, its :class:`~kernattn.bandwidth._search.BandwidthSelection`
(the estimator reports it).
"""

import math
import warnings
from numbers import Integral

import numpy as np
from sklearn.utils import check_random_state

from kernattn._core.numerics import power_of_two_scale
from kernattn.bandwidth import (
    BANDWIDTH_RULES,
    CRITERIA,
    BandwidthWarning,
    check_observations,
    resolve_bandwidth,
    select_bandwidth,
)
from kernattn.bandwidth._criterion import Criterion
from kernattn.bandwidth._mixed import (
    MixedEncoding,
    mixed_bandwidth,
    resolve_feature_kinds,
    select_mixed_bandwidth,
)
from kernattn.bandwidth._search import BandwidthSelection, edge_message
from kernattn.smoother._binned.binning import bin_targets
from kernattn.smoother._binned.grid import make_grid
from kernattn.smoother._binned.moments import grid_sums
from kernattn.smoother._binned.plugin import plugin_bandwidth
from kernattn.smoother._binned.search import (
    COARSE_TOLERANCE,
    SEARCH_TOLERANCE,
    BinnedCriterion,
    search_bandwidth,
)
from kernattn.smoother._binned.statistics import row_statistics

__all__ = [
    "TRACE_ROWS",
    "binned_trace",
    "mixed_encoding",
    "rule_bandwidth",
    "select_binned",
    "select_exact",
    "select_mixed",
    "warn_lower_edge",
    "select_in_units",
]

#: ``effective_dof_`` on the binned tier sums the trace over at most this many rows.
TRACE_ROWS = 50_000
#: The leave-one-out comparison of degrees at a given bandwidth runs on at most this many
#: training rows (evenly spread in the order of their inputs), each against every key.
_COMPARISON_ROWS = 2400


def _searched(bandwidth):
    return isinstance(bandwidth, str) and bandwidth in CRITERIA


def select_in_units(X, Y, sample_weight, candidates, on_bins, params):
    """The bandwidth, the degree and the selection (its value in the targets' units),
    selected on the inputs and the targets each divided by a power of two near its largest
    magnitude (per feature for the inputs), then the bandwidth multiplied back (a given
    bandwidth is used as it is); ``on_bins``: searched on binned sums
    (:func:`select_binned`), otherwise on the exact ones (:func:`select_exact`).

    Dividing by a power of two is exact, so the selection does not depend on the units
    of ``X`` or ``y`` (to the last bit, short of the subnormal range), and data near the
    ends of the float range (2⁻¹⁰⁰⁰ or 2¹⁰⁰⁰ times ordinary ones) are searched in the
    time, and with the result, of ordinary ones: no square or sum overflows, none
    underflows. ``params``: the estimator's parameters.
    """
    method = params["bandwidth"] if isinstance(params["bandwidth"], str) else None
    if method is None:
        # A given bandwidth is in the units of X.
        x_unit, y_unit = np.ones(X.shape[1]), 1.0
    else:
        x_unit = power_of_two_scale(X, axis=0)
        y_unit = float(power_of_two_scale(Y))
        X, Y = X / x_unit, Y / y_unit
    settings = {name: params[name] for name in ("bandwidth", "kernel", "n_jobs")}
    if on_bins:
        h, degree, selection = select_binned(X, Y, sample_weight, candidates, **settings)
    else:
        h, degree, selection = select_exact(
            X,
            Y,
            sample_weight,
            candidates,
            random_state=params["random_state"],
            verbose=params["verbose"],
            **settings,
        )
    if selection is not None:
        if method == "aic":
            value = selection.value + 2.0 * math.log(y_unit)
        else:
            value = _times_square(selection.value, y_unit)
        selection = selection._replace(value=value)
    return h * x_unit, degree, selection


def select_exact(
    X, Y, sample_weight, candidates, *, bandwidth, kernel, n_jobs, random_state, verbose
):
    """The bandwidth, the degree and the selection (``None`` for a rule or a given
    bandwidth) on the exact sums (:func:`~kernattn.bandwidth.select_bandwidth`)."""
    if not _searched(bandwidth):
        h = rule_bandwidth(bandwidth, X, Y, sample_weight, kernel)
        if len(candidates) == 1:
            return h, candidates[0], None
        objectives = [
            Criterion(X, Y, sample_weight, kernel, degree=p, n_jobs=n_jobs) for p in candidates
        ]
        if objectives[0].n_groups < 2:
            # One distinct input: leaving it out leaves no key, and every error is 0/0.
            return h, candidates[0], None
        return h, _lowest_leave_one_out(objectives, np.log(h), candidates), None
    random_state = _paired_random_state(random_state, len(candidates))
    selections = [
        select_bandwidth(
            X,
            Y,
            sample_weight,
            kernel,
            criterion=bandwidth,
            degree=p,
            n_jobs=n_jobs,
            random_state=random_state,
            verbose=verbose,
        )
        for p in candidates
    ]
    return _lowest(selections, candidates)


def select_binned(X, Y, sample_weight, candidates, *, bandwidth, kernel, n_jobs):
    """The bandwidth, the degree and the selection on the binned sums: a criterion
    searched on them (:func:`~kernattn.smoother._binned.search.search_bandwidth`, every
    row, O(G log G + n) per bandwidth; ``effective_dof`` NaN, taken once the tier is
    known), the plug-in, a rule or the given bandwidth."""
    weights = None if np.all(sample_weight == sample_weight[0]) else sample_weight
    if _searched(bandwidth):
        # The penalties count the weights as observations (equal weights included).
        with np.errstate(over="ignore"):
            n_observations = float(np.sum(sample_weight))
        check_observations(bandwidth, n_observations)
        searches = [
            search_bandwidth(
                X,
                Y,
                weights,
                degree=p,
                criterion=bandwidth,
                tol=SEARCH_TOLERANCE if X.shape[1] == 1 else COARSE_TOLERANCE,
                n_jobs=n_jobs,
                n_observations=n_observations,
            )
            for p in candidates
        ]
        best = _first_lowest([search.value for search in searches])
        search = searches[best]
        top = search.factors[-1] * search.reference
        low = search.factors[0] * search.reference
        selection = BandwidthSelection(
            bandwidth=search.bandwidth,
            value=search.value,
            lower_edge=search.at_edge & (search.bandwidth <= low * 1.001),
            upper_edge=search.at_edge & (search.bandwidth >= top * 0.999),
            effective_dof=np.nan,
            n_queries=len(X),
        )
        return search.bandwidth, candidates[best], selection
    h = rule_bandwidth(bandwidth, X, Y, sample_weight, kernel)
    if len(candidates) == 1:
        return h, candidates[0], None
    # degree="auto" at a given bandwidth: the lower binned leave-one-out error.
    losses = []
    for p in candidates:
        criterion = BinnedCriterion(
            X,
            Y,
            weights,
            degree=p,
            criterion="loo",
            min_bandwidth=h,
            levels=0,
            tol=SEARCH_TOLERANCE,
            n_jobs=n_jobs,
        )
        losses.append(criterion(h, SEARCH_TOLERANCE))
    return h, candidates[_first_lowest(losses)], None


def select_mixed(encoding, X, Z, Y, sample_weight, candidates, params):
    """The bandwidths of mixed data (a continuous :math:`h` or a discrete :math:`\\lambda`
    per feature), the degree and the selection (``None`` for a rule or given bandwidths),
    with ``Z`` the encoded inputs (:mod:`kernattn.bandwidth._mixed`); ``params``: the
    estimator's parameters."""
    bandwidth, n_jobs = params["bandwidth"], params["n_jobs"]
    if isinstance(bandwidth, str) and bandwidth == "plugin":
        raise ValueError(
            "bandwidth='plugin' (the direct plug-in of local-linear regression) "
            "needs one continuous feature; categorical_features or "
            "ordinal_features were given"
        )
    if _searched(bandwidth):
        selections = [
            select_mixed_bandwidth(
                encoding,
                X,
                Z,
                Y,
                sample_weight,
                criterion=bandwidth,
                degree=p,
                n_jobs=n_jobs,
            )
            for p in candidates
        ]
        return _lowest(selections, candidates)
    h = mixed_bandwidth(bandwidth, encoding, X, sample_weight)
    degree = candidates[0]
    if len(candidates) > 1:
        scales = encoding.column_scales(h)
        objectives = [
            Criterion(
                Z,
                Y,
                sample_weight,
                "gaussian",
                degree=p,
                n_jobs=n_jobs,
                leave_out_duplicates=bool(np.any(~encoding.discrete)),
                line=encoding.line_columns(),
            )
            for p in candidates
        ]
        degree = _lowest_leave_one_out(objectives, np.log(scales), candidates)
    return h, degree, None


def mixed_encoding(categorical_features, ordinal_features, X, categories, kernel):
    """The encoding of the discrete features of the training inputs, or ``None``."""
    kinds = resolve_feature_kinds(categorical_features, ordinal_features, X.shape[1], categories)
    if not np.any(kinds != "continuous"):
        return None
    if kernel != "gaussian":
        raise ValueError(
            "categorical_features and ordinal_features need kernel='gaussian' (the "
            "product with the discrete kernels is a Gaussian of encoded inputs); got "
            f"kernel={kernel!r}"
        )
    return MixedEncoding(kinds, X)


def warn_lower_edge(bandwidth, lower, feature_names=None):
    """A ``BandwidthWarning`` naming the features whose selected bandwidth ended on the
    lower edge of the search (``lower``: a boolean per feature), if any; with their names
    where ``X`` had column names."""
    if not np.any(lower):
        return
    indices = np.flatnonzero(lower)
    if feature_names is None:
        features = indices.tolist()
    else:
        features = [f"{i} ({feature_names[i]})" for i in indices]
    warnings.warn(edge_message(bandwidth, features, "lower"), BandwidthWarning, stacklevel=3)


def rule_bandwidth(bandwidth, X, Y, sample_weight, kernel):
    """A rule's, the plug-in's or the given bandwidth, one per feature."""
    if isinstance(bandwidth, str) and bandwidth == "plugin":
        return _plugin(X, Y, sample_weight)
    rules = BANDWIDTH_RULES + CRITERIA[1:]
    return resolve_bandwidth(bandwidth, X, Y, sample_weight, kernel, rules=rules)[0]


def _plugin(X, Y, sample_weight):
    """The direct plug-in bandwidth of local-linear regression (KernSmooth's dpill)."""
    problems = []
    if X.shape[1] != 1:
        problems.append(f"one feature (X has {X.shape[1]})")
    if Y.shape[1] != 1:
        problems.append(f"one output (y has {Y.shape[1]})")
    if not np.all(sample_weight == sample_weight[0]):
        problems.append("no sample weights")
    if problems:
        raise ValueError(
            "bandwidth='plugin' (the direct plug-in of local-linear regression, "
            f"Ruppert, Sheather and Wand 1995) needs {', '.join(problems)}; use "
            "bandwidth='loo', 'aic' or 'gcv' instead"
        )
    return np.array([plugin_bandwidth(X[:, 0], Y[:, 0])])


def binned_trace(X, values, sample_weight, bandwidth, degree, binned=None, *, n_jobs=None):
    """tr S, the effective degrees of freedom at ``bandwidth``, from binned sums (those of
    ``binned``, the fit's :class:`~kernattn.smoother._binned.kernel.BinnedKernel`, or
    without it sums of the first column of ``values`` at the search's tolerance): summed
    over at most ``TRACE_ROWS`` rows evenly spread in the order of the inputs, scaled to
    all of them."""
    weights = None if np.all(sample_weight == sample_weight[0]) else sample_weight
    # In units of a power of two per input, as the binned sums are (exact).
    unit = power_of_two_scale(X, axis=0)
    X = X / unit
    if binned is None:
        values = values[:, :1]
        h = bandwidth / unit
        grid = make_grid(X, h, degree=degree, tol=SEARCH_TOLERANCE)
        sums = grid_sums(bin_targets(X, values, grid, weights), h, degree)
    else:
        sums = binned.sums
    rows = np.unique(np.linspace(0, len(X) - 1, min(len(X), TRACE_ROWS)).round())
    rows = rows.astype(int)
    w = None if weights is None else weights[rows]
    stats = row_statistics(sums, X[rows], values[rows], w, n_jobs=n_jobs)
    total = len(X) if weights is None else float(weights.sum())
    return stats.trace * total / stats.total


def _times_square(value, unit):
    """A squared error found in units of ``unit``, in the targets' units: ``inf`` where
    it is beyond the float range (targets near 2¹⁰⁰⁰ have squares near 2²⁰⁰⁰)."""
    with np.errstate(over="ignore"):
        return float(np.float64(value) * np.float64(unit) * np.float64(unit))


def _first_lowest(values):
    """The index of the lowest of ``values``; the first of equal ones (the lower degree)."""
    return int(np.argmin(np.asarray(values, dtype=float)))


def _lowest(selections, candidates):
    """The bandwidth, degree and selection of the lowest criterion value (one selection
    per degree of ``candidates``)."""
    best = _first_lowest([selection.value for selection in selections])
    return selections[best].bandwidth, candidates[best], selections[best]


def _lowest_leave_one_out(objectives, log_bandwidth, candidates):
    """The degree of ``candidates`` whose leave-one-out error at ``log_bandwidth`` is the
    lowest (one criterion object per degree), on at most ``_COMPARISON_ROWS`` rows."""
    n = objectives[0].n
    rows = None
    if n > _COMPARISON_ROWS:
        rows = np.unique(np.linspace(0, n - 1, _COMPARISON_ROWS).round().astype(int))
    losses = [objective.scaled_loss(log_bandwidth, rows) for objective in objectives]
    return candidates[_first_lowest(losses)]


def _paired_random_state(random_state, n_searches):
    """One random state for several bandwidth searches, so that each draws the same subsets
    of queries and their criteria compare on the same rows: an int as given, otherwise one
    seed drawn from it."""
    if n_searches == 1 or isinstance(random_state, Integral):
        return random_state
    return int(check_random_state(random_state).randint(2**31 - 1))
