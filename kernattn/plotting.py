"""Figures for kernel smoothers and attention (matplotlib).

Every function takes ``ax=None`` (then draws on the current Axes, ``plt.gca()``) and returns
the Axes it drew on, so figures compose with ``plt.subplots``:

- :func:`plot_fit` — each estimator's fit on a 1-D task, with the data, the truth and the
  ``return_std`` band;
- :func:`plot_attention` — the attention weights as a heat map (queries × training points);
- :func:`plot_approximation_error` — random-feature error against the number of features;
- :func:`plot_runtime` — time against n on log-log axes, with the fitted slopes;
- :func:`plot_comparison` — a :func:`kernattn.compare` result as a bar chart.
"""

import inspect

import numpy as np
from sklearn.utils.validation import check_is_fitted

__all__ = [
    "plot_fit",
    "plot_attention",
    "plot_approximation_error",
    "plot_runtime",
    "plot_comparison",
]


def _axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        ax = plt.gca()
    return ax


def _named(estimators):
    if isinstance(estimators, dict):
        return dict(estimators)
    if hasattr(estimators, "predict"):
        estimators = [estimators]
    named = {}
    for estimator in estimators:
        name = base = type(estimator).__name__
        count = 1
        while name in named:
            count += 1
            name = f"{base}-{count}"
        named[name] = estimator
    return named


def _supports_return_std(estimator):
    try:
        return "return_std" in inspect.signature(estimator.predict).parameters
    except (TypeError, ValueError):
        return False


def plot_fit(estimators, X, y, *, truth=None, n_grid=400, show_std=True, ax=None):
    """Each fitted estimator's prediction on a 1-D task, over the data and the truth.

    Parameters
    ----------
    estimators : fitted regressor, list or dict of name to fitted regressor
        Fitted on one input feature.
    X : array_like of shape (n_samples, 1)
        The training inputs (drawn as points with ``y``).
    y : array_like of shape (n_samples,)
    truth : callable, optional
        The noiseless function, drawn as a dashed black line.
    n_grid : int
        Number of evenly spaced points the predictions are drawn on.
    show_std : bool or collection of str
        Shade ``prediction ± std`` for estimators whose ``predict`` takes ``return_std``
        (the weighted spread of the targets each query attends to): for all of them, for
        none, or only for the named ones (several overlapping bands blur into one).
    ax : matplotlib Axes, optional

    Returns
    -------
    ax : matplotlib Axes
        Each fit has its own color and dash pattern (solid, dashed, dash-dot, dotted, in
        turn), so a fit that coincides with an earlier one stays visible on top of it.
    """
    ax = _axes(ax)
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[1] != 1:
        raise ValueError(f"plot_fit draws 1-D tasks: X must have shape (n, 1); got {X.shape}")
    y = np.asarray(y, dtype=float).ravel()
    grid = np.linspace(X.min(), X.max(), n_grid)[:, None]
    ax.scatter(X[:, 0], y, s=10, color="0.6", alpha=0.7, label="data", zorder=1)
    if truth is not None:
        ax.plot(grid[:, 0], truth(grid[:, 0]), "k--", lw=1.5, label="truth", zorder=3)
    styles = ["-", "--", "-.", ":"]
    for i, (name, estimator) in enumerate(_named(estimators).items()):
        check_is_fitted(estimator)
        color = f"C{i}"
        shade = show_std if isinstance(show_std, bool) else name in show_std
        if shade and _supports_return_std(estimator):
            mean, std = estimator.predict(grid, return_std=True)
            ax.fill_between(grid[:, 0], mean - std, mean + std, color=color, alpha=0.15, lw=0)
        else:
            mean = estimator.predict(grid)
        style = styles[i % len(styles)]
        ax.plot(grid[:, 0], mean, style, color=color, lw=2, label=name, zorder=2)
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend(loc="best", fontsize=9)
    return ax


def _cell_edges(centers):
    """Edges of cells centered on sorted ``centers`` (midpoints, extended at both ends)."""
    centers = np.asarray(centers, dtype=float)
    if len(centers) == 1:
        return centers[0] + np.array([-0.5, 0.5])
    middle = (centers[1:] + centers[:-1]) / 2
    return np.concatenate([[2 * centers[0] - middle[0]], middle, [2 * centers[-1] - middle[-1]]])


def plot_attention(
    estimator, X, *, sort=True, sort_by=None, vmax=None, title=None, ax=None, **kwargs
):
    """Heat map of the attention weights: one row per query, one column per training point.

    Parameters
    ----------
    estimator : fitted kernattn estimator
        Anything with ``attention_weights(X)`` and ``X_fit_``.
    X : array_like of shape (n_queries, n_features)
        The queries.
    sort : bool
        Order the queries and the training points by their first feature (or by
        ``sort_by``). For a 1-D task the axes are then the inputs themselves (query x down,
        training x_i across): a smoother shows a band along the diagonal whose width is the
        bandwidth. Otherwise the axes count rows.
    sort_by : callable or pair of callables, optional
        Maps inputs of shape (n, n_features) to one number per row to sort by, e.g. a
        head's projection of the inputs; a pair ``(for_queries, for_keys)`` sorts the two
        axes differently (queries and keys have different projections). The first feature by
        default.
    vmax : float, optional
        Top of the color scale (give the same to several panels to compare them).
    title : str, optional
        Defaults to the estimator's class name.
    ax : matplotlib Axes, optional
    **kwargs
        Passed to ``attention_weights`` (e.g. ``head=0``).

    Returns
    -------
    ax : matplotlib Axes
        Its ``collections[-1]`` is the heat map (a ``QuadMesh``, for a color bar).
    """
    ax = _axes(ax)
    X = np.asarray(X, dtype=float)
    keys = np.asarray(estimator.X_fit_)
    weights = np.asarray(estimator.attention_weights(X, **kwargs))
    rows, columns = np.arange(len(X)), np.arange(len(keys))
    if sort:
        if sort_by is None:
            query_order = key_order = lambda U: U[:, 0]  # noqa: E731
        elif callable(sort_by):
            query_order = key_order = sort_by
        else:
            query_order, key_order = sort_by
        rows = np.argsort(np.asarray(query_order(X)).ravel(), kind="stable")
        columns = np.argsort(np.asarray(key_order(keys)).ravel(), kind="stable")
        weights = weights[rows][:, columns]
    if sort and sort_by is None and X.shape[1] == 1:
        x_edges, y_edges = _cell_edges(keys[columns, 0]), _cell_edges(X[rows, 0])
        xlabel, ylabel = "training point x_i", "query x"
    else:
        x_edges, y_edges = np.arange(len(keys) + 1) - 0.5, np.arange(len(X) + 1) - 0.5
        suffix = ""
        if sort:
            suffix = " (sorted by the first feature)" if sort_by is None else " (sorted)"
        xlabel, ylabel = "training point" + suffix, "query" + suffix
    # Without antialiasing, the seams between hundreds of narrow cells do not add up to a
    # moiré pattern; rasterized, a vector file stays small.
    ax.pcolormesh(
        x_edges,
        y_edges,
        weights,
        cmap="viridis",
        vmin=0,
        vmax=vmax,
        antialiased=False,
        rasterized=True,
    )
    ax.set_ylim(y_edges[-1], y_edges[0])  # the first query on top, as in a matrix
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title if title is not None else type(estimator).__name__)
    return ax


def _slope(x, y):
    """Least-squares slope of log y against log x."""
    keep = (np.asarray(x) > 0) & (np.asarray(y) > 0) & np.isfinite(y)
    if keep.sum() < 2:
        return None
    return float(np.polyfit(np.log(np.asarray(x)[keep]), np.log(np.asarray(y)[keep]), 1)[0])


def _curves(values, name):
    if isinstance(values, dict):
        return dict(values)
    return {name: values}


def plot_approximation_error(n_components, errors, *, reference=True, ax=None):
    """Random-feature approximation error against the number of features r (log-log).

    Parameters
    ----------
    n_components : array_like of shape (n_r,)
        The numbers of features r of the maps.
    errors : array_like or dict of str to array_like
        Per curve, shape (n_r,) or (n_r, n_seeds): with several seeds the median over the
        seeds is drawn (and its slope fitted), and the band from their 10th to their 90th
        percentile shaded (a band of positive errors, which a log axis draws faithfully;
        mean ± std would dive below zero).
    reference : bool
        Also draw a dotted :math:`r^{-1/2}` line (the Monte Carlo rate) through the first curve.
    ax : matplotlib Axes, optional

    Returns
    -------
    ax : matplotlib Axes
    """
    r = np.asarray(n_components, dtype=float)
    ax, first = _median_curves(ax, r, errors, "error", slice(None), _deciles, alpha=0.15)
    if reference and first is not None:
        ax.plot(r, first[0] * np.sqrt(r[0] / r), ":", color="0.4", label=r"$\propto r^{-1/2}$")
    return _log_log(ax, "number of random features r", "approximation error")


def plot_runtime(n_samples, times, *, slope_from=None, ax=None):
    """Time against the number of samples on log-log axes; the legend gives each slope.

    A slope of 1 is linear in n (linear attention), 2 quadratic (exact attention on n queries
    against n keys).

    Parameters
    ----------
    n_samples : array_like of shape (n_n,)
    times : array_like or dict of str to array_like
        Seconds per curve, shape (n_n,) or (n_n, n_repeats); ``NaN`` marks sizes that were
        skipped. With repeats, the median is drawn (and its slope fitted) and the band from
        the fastest to the slowest repeat shaded.
    slope_from : float, optional
        Fit the slopes on the sizes ``n >= slope_from`` only: at small n fixed costs (input
        checks, Python overhead) flatten every curve. All sizes by default.
    ax : matplotlib Axes, optional

    Returns
    -------
    ax : matplotlib Axes
    """
    n = np.asarray(n_samples, dtype=float)
    fitted = n >= slope_from if slope_from is not None else np.ones(len(n), dtype=bool)
    ax, _ = _median_curves(ax, n, times, "time", fitted, _extremes, alpha=0.2)
    return _log_log(ax, "number of samples n", "time (s)")


def _median_curves(ax, x, curves, name, fitted, band, alpha):
    """Draw every curve of ``curves`` (one array, or a dict of them by label; ``name`` labels
    one array) with :func:`_median_curve`, and where a curve has repeats shade the band
    ``band(values) = (low, high)`` around it with opacity ``alpha``; the axes and the first
    curve's median (``None`` without curves)."""
    ax = _axes(ax)
    first = None
    for i, (label, values) in enumerate(_curves(curves, name).items()):
        values, middle = _median_curve(ax, i, x, label, values, fitted)
        if values.shape[1] > 1:
            low, high = band(values)
            ax.fill_between(x, low, high, color=f"C{i}", alpha=alpha, lw=0)
        if first is None:
            first = middle
    return ax, first


def _deciles(values):
    """The 10th and 90th percentiles of each row: a band of positive values that a log axis
    draws faithfully (mean ± std would dive below zero)."""
    return np.percentile(values, [10, 90], axis=1)


def _extremes(values):
    """The least and the greatest value of each row."""
    return values.min(axis=1), values.max(axis=1)


def _median_curve(ax, i, x, label, values, fitted):
    """Draw a curve's median over its repeats (the columns of ``values``) against ``x`` in
    colour ``i``, labelled with its slope fitted on the points ``fitted``; its values as
    (len(x), n_repeats) and the median."""
    values = np.asarray(values, dtype=float).reshape(len(x), -1)
    middle = np.median(values, axis=1)
    slope = _slope(x[fitted], middle[fitted])
    text = label if slope is None else f"{label} (slope {slope:.2f})"
    ax.plot(x, middle, "o-", color=f"C{i}", label=text)
    return values, middle


def _log_log(ax, xlabel, ylabel):
    """Log-log axes with their labels and the legend."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=9)
    return ax


_METRICS = {
    "r2": ("r2_mean", "r2_std", "held-out R² (higher is better)"),
    "mse": ("mse_mean", "mse_std", "held-out MSE / best MSE on the task (lower is better)"),
    "log_loss": ("log_loss_mean", "log_loss_std", "held-out log-loss (lower is better)"),
    "accuracy": ("accuracy_mean", "accuracy_std", "held-out accuracy (higher is better)"),
    "fit_time": ("fit_time", None, "fit time per split (s)"),
    "predict_time": ("predict_time", None, "predict time per split (s)"),
    "time": (None, None, "fit + predict time per split (s)"),
}


#: The lowest R² :func:`plot_comparison` draws; worse scores are cut there and labelled.
_R2_FLOOR = -1.0


def _comparison_values(result, metric, mean_key, std_key):
    """A comparison's ``metric`` per (task, estimator), its standard deviation over the
    splits (0 where there is none) and each task's size."""
    tasks, names = result.tasks, result.estimators
    values = np.full((len(tasks), len(names)), np.nan)
    errors = np.zeros_like(values)
    sizes = {}
    for row in result.rows:
        i, j = tasks.index(row["task"]), names.index(row["estimator"])
        sizes.setdefault(row["task"], row["n_samples"])
        if metric == "time":
            values[i, j] = row["fit_time"] + row["predict_time"]
        else:
            values[i, j] = row[mean_key]
            errors[i, j] = row[std_key] if std_key else 0.0
    return values, errors, sizes


def _plot_times(ax, x, offsets, values, names):
    """Times as points on a log axis (bars would have no meaningful base)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for j, name in enumerate(names):
        ax.plot(
            x + offsets[j],
            values[:, j],
            marker="o",
            markersize=6,
            linestyle="none",
            label=name,
            color=f"C{j}",
        )
    ax.set_yscale("log")
    # Ticks at 1, 2, 5 × 10^k, written as plain seconds (0.02, not 2 × 10⁻²).
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(axis="y", which="major", color="0.85", lw=0.8)
    ax.set_axisbelow(True)
    ax.set_xlim(-0.5, len(x) - 0.5)


def _plot_bars(ax, metric, x, offsets, width, values, errors, names, label, std_key):
    """Scores as bars with ± one standard deviation (MSE relative to each task's best, R²
    cut at a floor); the axis label, with a note on cut bars."""
    if metric == "mse":
        # A perfect fit (MSE 0) would divide by zero: measure from the smallest positive MSE.
        best = np.nanmin(np.where(values > 0, values, np.nan), axis=1, keepdims=True)
        best = np.where(np.isfinite(best), best, 1.0)
        values, errors = values / best, errors / best
    floor = None
    if metric == "r2":
        # The axis reaches the worst score (with its error bar), down to -1 at most: a far
        # worse model would squash every other bar, so its bar is cut at -1, hatched and
        # labelled with its value.
        lowest = np.nanmin(values - errors) if np.isfinite(values).any() else 0.0
        floor = max(min(0.0, lowest - 0.05), _R2_FLOOR)
        errors[values < floor] = 0.0  # a cut bar's error bar would float at the floor
    for j, name in enumerate(names):
        heights = values[:, j]
        if floor is not None:
            heights = np.maximum(heights, floor)
        bars = ax.bar(
            x + offsets[j],
            heights,
            width,
            yerr=errors[:, j] if std_key else None,
            label=name,
            color=f"C{j}",
            capsize=2,
            error_kw={"lw": 0.8},
        )
        if floor is not None:
            _mark_cut_bars(
                ax, bars, np.flatnonzero(values[:, j] < floor), values[:, j], x + offsets[j], floor
            )
    if floor is not None:
        ax.set_ylim(floor, 1.0)
        ax.axhline(0.0, color="0.3", lw=0.8)
        if (values < floor).any():
            label += f"; bars cut at {floor:g}"
    if metric == "mse":
        ax.axhline(1.0, color="0.3", lw=0.8)
    if metric == "log_loss":
        ax.set_ylim(bottom=0.0)  # a log-loss is ≥ 0; its error bar may reach below
    if metric == "accuracy" and np.isfinite(values).any():
        # Accuracies of good classifiers differ by points near 1: the axis starts a tenth
        # below the lowest (with its error bar), at 0 at most.
        ax.set_ylim(max(0.0, np.floor(10 * np.nanmin(values - errors)) / 10 - 0.1), 1.0)
    return label


def _mark_cut_bars(ax, bars, cut, values, positions, floor):
    """Hatch the ``cut`` bars (R² below the floor) and label them with their value."""
    for i in cut:
        bars[i].set_hatch("//")
        bars[i].set_edgecolor("white")
        ax.annotate(
            f"R² = {values[i]:.2g}",
            (positions[i], floor),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=9,
            rotation=90,
            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "0.5", "lw": 0.5},
        )


def plot_comparison(result, metric=None, *, ax=None):
    """A :func:`kernattn.compare` result, one group per task (labelled with its size n).

    Parameters
    ----------
    result : ComparisonResult
    metric : {"r2", "mse", "log_loss", "accuracy", "fit_time", "predict_time", "time"}, optional
        ``None``: ``"r2"``, or ``"log_loss"`` for a comparison of classifiers (whose
        ``"log_loss"`` and ``"accuracy"`` are plain bars with ± one standard deviation).
        ``"r2"``: bars with ± one standard deviation over the splits; the axis extends down
        to the worst score, or to −1 if a score is worse than that, in which case the bar is
        hatched and labelled with its value. ``"mse"``: bars relative to the best estimator
        on each task (tasks have different scales). The times (``"time"`` is fit + predict):
        points on a log axis, where bars would have no meaningful base.
    ax : matplotlib Axes, optional

    Returns
    -------
    ax : matplotlib Axes
    """
    if metric is None:
        metric = "log_loss" if result.task_type == "classification" else "r2"
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {', '.join(map(repr, _METRICS))}; got {metric!r}")
    ax = _axes(ax)
    mean_key, std_key, label = _METRICS[metric]
    tasks, names = result.tasks, result.estimators
    values, errors, sizes = _comparison_values(result, metric, mean_key, std_key)
    width = 0.8 / max(len(names), 1)
    x = np.arange(len(tasks))
    offsets = [(j - (len(names) - 1) / 2) * width for j in range(len(names))]
    if metric in ("fit_time", "predict_time", "time"):
        _plot_times(ax, x, offsets, values, names)
    else:
        label = _plot_bars(ax, metric, x, offsets, width, values, errors, names, label, std_key)
    ax.set_xticks(x)
    ax.set_xticklabels([f"{task}\n(n={sizes[task]})" for task in tasks])
    ax.set_ylabel(label)
    # Outside the axes, on the right: bars near R² = 1 would hide under a legend inside.
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return ax
