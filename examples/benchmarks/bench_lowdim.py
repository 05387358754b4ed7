"""Benchmark: smoothing millions of points in one or two dimensions on binned sums.

Task: ``y = m(x) + N(0, 0.3²)``, x uniform; ``m(x) = sin(2πx)`` in 1-D and
``m(x) = sin(2πx₁) + cos(πx₂)`` in 2-D. Local-linear fits (Gaussian kernel, h its standard
deviation). Every figure is measured in this run:

1. the binned pipeline at 10⁵, 10⁶, 10⁷ rows (1-D) and 10⁶ rows (2-D): bandwidth by the
   binned leave-one-out search (log grid + refinement) and, in 1-D, by the direct plug-in
   (Ruppert, Sheather and Wand; KernSmooth's ``dpill``); the local-linear fit at the chosen
   bandwidth (binned sums at the estimate's tolerance, 1e-3); the prediction at every
   training row by interpolating the gridded sums. Seconds per stage, and the test error
   (mean squared error against the true curve on 10⁵ fresh uniform points) for each chosen
   bandwidth and for the best bandwidth of a log grid around it;
2. R KernSmooth's ``dpill`` + ``locpoly`` (401-point grid) + ``approx`` back to the rows,
   through ``Rscript`` (1-D only; skipped with a message without R or KernSmooth): seconds
   and test error;
3. the binned estimate against the exact local-linear estimate (every row within the
   kernel's float64 reach, 8.5 h) at 200 random training rows: the largest difference
   relative to sd(y), against the binning tolerance;
4. the chosen bandwidths over several seeds (``--seeds``, at 10⁵ and 10⁶ rows in 1-D);
5. ``predict_interval`` on the binned tier, whose noise estimate comes from the gridded
   sums beyond 20 000 rows (``--only-intervals`` for this part alone): at 30 000 rows
   against the exact tier (seconds, largest relative difference of the widths, pooled and
   local noise), and at 10⁶ rows the seconds for 201 intervals.

Targets: faster than KernSmooth at 10⁶ and 10⁷ rows in 1-D; 10⁷ rows in at most
30 s; 2-D 10⁶ rows in at most 30 s; the chosen bandwidth's test error within 10 % of the
grid's best, stable across seeds.

Measured (2 shared CPU cores, 23 GiB; R 4.2 with KernSmooth 2.23; seconds for bandwidth
selection + fit + prediction at every training row; test MSE as a multiple of the best of a
15-point grid 0.4–2.5 × the leave-one-out bandwidth):

=============  ===================  ===================  ====================
rows           binned, loo          binned, plug-in      KernSmooth
=============  ===================  ===================  ====================
1-D 10⁵        0.14 s, 1.007 ×      0.08 s, 1.001 ×      0.07 s, 1.000 ×
1-D 10⁶        0.82 s, 1.083 ×      0.55 s, 1.072 ×      1.22 s, 1.042 ×
1-D 10⁷        9.00 s, 1.025 ×      7.56 s, 1.020 ×      13.68 s, 1.138 ×
2-D 10⁶        12.42 s, 1.000 ×     —                    —
=============  ===================  ===================  ====================

Binned against exact at 200 training rows: max |Δ|/sd(y) = 8.1e-5, 6.8e-6, 2.5e-5 (1-D
10⁵, 10⁶, 10⁷) and 3.8e-5 (2-D 10⁶), against the grid's bound 1e-3. Targets: faster than
KernSmooth at 10⁶ and 10⁷ rows with either selector (1.5 times with the leave-one-out
search over every row, 1.8 to 2.2 times with the plug-in), met; 10⁷ rows in at most 30 s,
met (9.0 s); 2-D 10⁶ rows in at most 30 s, met (12.4 s; the search, on grids for 3e-2,
takes most of it; the fit's grid is 2958 × 1547; with the search on grids for 1e-2, the
same bandwidths to 0.2 %, about twice as long); the chosen bandwidth's test error is within
10 % of the grid's best everywhere, and over seeds (``--only-seeds``: seeds 1, 2 at 10⁵ rows
loo 1.016, 1.002 ×, plug-in 1.006, 1.013 ×; at 10⁶ rows loo 1.000, 1.046 ×, plug-in 1.001,
1.000 ×). Of the 10⁷-row leave-one-out fit's 7.4 s, ordering the rows (for fits that do not
depend on the order of the rows) takes 2 s, the search 1.9 s and the fit's binned sums
1.4 s; a binned fit builds the exact kernel's keys only when a method needs every weight.

Intervals (``--only-intervals``, local-linear, h = 0.02): at 30 000 rows the binned tier
took 0.01 s (pooled noise and local) against 9.2 s and 8.6 s on the exact tier, widths
within 1.3e-4 of the exact ones (relative; the same before the faster noise estimate below,
which moves them by 3e-7 there); at 10⁶ rows 201 intervals took 0.33–0.38 s. Measured
again on a slower 2-core machine, with the noise estimate taken at the grid's points (below):
0.01 s against 15–16 s, widths within 1.3e-4 as before; 201 intervals at 10⁶ rows 0.60–0.80 s
(0.81–0.90 s with the code before, alternating in the same session). With the noise level
and the variance's sums on the grid coarsened by two (below): 0.01 s against 16–18 s, widths
within 1.6e-4; 201 intervals at 10⁶ rows 0.39 s.

6. ``--only-checks`` (``--size`` for one size): the leave-one-out bandwidth's test MSE
   against the truth as a multiple of the best common rescaling of it (1-D ``sin 2πx``; 2-D
   a bump plus a ridge; noise 0.2; degrees 0 and 1; 10⁵ and 10⁶ rows), with fit and
   prediction seconds for 10⁵ queries; the binned estimate against the exact one on data
   with a gap (the largest error relative to the local spread of the targets, over the
   range and in the gap, against ``binning_error_``, and ``exact_cells_``); and seconds of
   ``predict`` and ``predict_interval`` for 1 000 queries at 10⁶ rows.

Measured with ``--only-checks`` (the same shared 2 cores, other work running; MSE ratio to
the best rescaling, seconds fit + predict 10⁵ queries): 1-D 10⁵ rows 1.001 (degree 0) and
1.015 (degree 1); 1-D 10⁶ rows 1.007 and 1.071 (0.66 s and 0.89 s); 2-D 10⁵ rows 1.000
(degree 0); 2-D 10⁶ rows 1.000 (degree 0) and 1.000 (degree 1), 49 s and 62 s (the binned
search and the fit's 3179 × 3033 grid; 15 s and 33 s alone on the machine). With a gap (10⁵
rows, h = 0.02 in 1-D, 0.05 in 2-D) the largest error over the range is 2.8e-4, 3.6e-4,
3.6e-4 of the local spread in 1-D at degrees 0–2 and 3.3e-4, 4.4e-4, 5.6e-4 in 2-D at
degrees 0–2, all below ``binning_error_`` (1e-3), the gap's cells computed exactly (a third
of the grid's); at degree 3 in 1-D 1.8e-4 (in the gap 3.7e-5). (It was 2.3e-2 at the data's
ends while the exact tier's local cubic took its monomials about the training center 25
bandwidths away and lost its cubic term to the rounding floor; the binned one was right.)

Intervals at 10⁶ rows (h = 0.02, local linear; 2 cores shared with other work, load 2–5,
four runs each): ``predict`` of 1 000 queries 0.001 s; ``predict_interval`` 0.22–0.34 s
(1-D) and 1.0–1.3 s (2-D, was 3.4–4.3 s in the same runs before the faster noise estimate)
on a fit's first call, which takes the noise estimate from the gridded sums at every row,
then 0.013 s and 0.05 s; the bootstrap (1 000 replicates, drawn from its normal limit with
the bootstrap's variance from the gridded sums) 0.12–0.19 s and 0.7–1.3 s on a fresh fit
(its residuals at every row; was 2.2–2.6 s in 2-D), then 0.012 s and 0.05 s, against 14 s
and 22 s for 20 queries and 200 replicates when it read every weight. The target (2 ×
``predict`` + 0.5 s) is met by every call after a fit's first noise estimate and by the
first calls in 1-D, not by the first calls in 2-D: of a first analytic call's 1.1 s about
a quarter is the FFTs (the grid is 1485 × 1485, more points than rows: the kernel sums of
the averaged noise at h and of the binned noise at h/√2 on the fit's grid, the squared weights'
at h/√2 on the grid coarsened by two), a third the gathers of gridded sums at the 10⁶ rows
(linear interpolation, the local solves) and the rest binning and locating rows. Since
then the noise estimate's fits, own weights and variance factors are interpolated at the
rows from grid points 0.15 bandwidths apart, the local noise is taken at the grid's points
and binned from them for the variance (no gather of its kernel averages at the rows, no
second pass of binning), and a pooled level reuses the squared weights' sums. On the slower
machine, alternating with the code before in the same runs (three each): first calls
0.21–0.43 s in 1-D (before 0.37–0.48 s) and 0.98–1.19 s in 2-D (1.33–1.57 s); a pooled call
after them 0.03 s (0.07–0.10 s) and 0.26–0.50 s (0.60–0.61 s); a fresh fit's first
bootstrap 0.13–0.33 s (0.24–0.31 s) and 0.80–0.97 s (1.10–1.14 s). The 2-D first calls stayed
above the target: what remained was the transforms of the noise's averages at h and of its
variance's sums at h/√2 on the 1485² grid, and binning two columns at the rows. Since then
the noise level and every interval's variance sums are taken on the fit's grid coarsened by
two (743², an error bound of 1.6 % on the variance at h/√2, below ``NOISE_TOLERANCE``'s 2 %;
the widths of 1 000 intervals moved by at most 0.15 % against the fit's own grid), one pass
over the rows on two threads takes the residuals and bins the noise's columns with each
block of rows located once, the wild bootstrap reads the squared residuals binned there,
and the fit keeps its inputs for the intervals. Alternating with the code before in the same
runs (three each, same machine): first analytic calls 0.11 s in 1-D (0.19–0.23 s) and
0.46 s in 2-D (1.27–1.29 s), within the target of 2 × ``predict`` (0.002 s) + 0.5 s (single
runs on the busy machine took up to 0.55 s); the calls after it 0.005 s and 0.013–0.015 s
(0.023–0.031 s, 0.061–0.062 s); a pooled call after a local one 0.01 s and 0.02 s
(0.03–0.05 s, 0.54–0.56 s); a fresh fit's first bootstrap 0.09–0.10 s and 0.35–0.48 s
(0.14 s, 0.90–0.94 s); a bootstrap after the analytic call 0.01 s and 0.08–0.14 s
(0.07–0.10 s, 0.62–0.66 s). With the
default ``working_memory`` (1 GiB), 2-D 10⁶ rows ``bandwidth="loo"`` fit + predict 10⁵
queries: 8.7 s (degree 0) and 20 s (degree 1, the fit's grid at 8e-3, where the automatic
tier once fell to the exact sums: 448 s to predict) with other work on the cores; alone on
them, after the binning and transforms above were made faster, 3.6 s and 7.0 s.

Run: ``python examples/benchmarks/bench_lowdim.py`` (``--quick`` for 10⁴–10⁵ rows only).
The binned pipeline is the estimator, ``KernelSmoother(bandwidth="loo" or "plugin",
degree=1, algorithm="binned")`` (``"auto"`` chooses the same tier at these sizes).
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import time
import warnings

import numpy as np
import sklearn

from kernattn import KernelSmoother

NOISE = 0.3


def curve(X):
    out = np.sin(2 * np.pi * X[:, 0])
    if X.shape[1] > 1:
        out = out + np.cos(np.pi * X[:, 1])
    return out


def task(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    y = curve(X) + NOISE * rng.normal(size=n)
    return X, y


def make_model(bandwidth):
    return KernelSmoother(bandwidth=bandwidth, degree=1, algorithm="binned")


def timed(function):
    start = time.perf_counter()
    out = function()
    return out, time.perf_counter() - start


def test_error(model, Q):
    return float(np.mean((model.predict(Q) - curve(Q)) ** 2))


def exact_local_linear(X, y, queries, h):
    """The exact local-linear estimate at ``queries``, summing every row within 8.5 h
    (beyond, the Gaussian is below float64's epsilon) along the first input."""
    order = np.argsort(X[:, 0])
    Xs, ys = X[order], y[order]
    reach = 8.5 * h[0]
    out = []
    for q in queries:
        lo, hi = np.searchsorted(Xs[:, 0], [q[0] - reach, q[0] + reach])
        u = (Xs[lo:hi] - q) / h
        k = np.exp(-0.5 * np.sum(u * u, axis=1))
        U = np.column_stack([np.ones(hi - lo), u])
        beta = np.linalg.solve((U * k[:, None]).T @ U, (U * k[:, None]).T @ ys[lo:hi])
        out.append(beta[0])
    return np.array(out)


R_SCRIPT = r"""
suppressMessages(library(KernSmooth))
args <- commandArgs(trailingOnly = TRUE)
dir <- args[1]; n <- as.integer(args[2]); m <- as.integer(args[3])
x <- readBin(file.path(dir, "x.bin"), "double", n)
y <- readBin(file.path(dir, "y.bin"), "double", n)
q <- readBin(file.path(dir, "q.bin"), "double", m)
t0 <- proc.time()[["elapsed"]]
h <- dpill(x, y)
t1 <- proc.time()[["elapsed"]]
fit <- locpoly(x, y, degree = 1, bandwidth = h, gridsize = 401L)
t2 <- proc.time()[["elapsed"]]
rows <- approx(fit$x, fit$y, xout = x)$y
t3 <- proc.time()[["elapsed"]]
writeBin(approx(fit$x, fit$y, xout = q, rule = 2)$y, file.path(dir, "pred.bin"))
cat(sprintf("%.17g %.6f %.6f %.6f\n", h, t1 - t0, t2 - t1, t3 - t2))
"""


def kernsmooth(x, y, queries):
    """dpill + locpoly + approx in R: (h, seconds per stage, test predictions), or None."""
    rscript = shutil.which("Rscript")
    if rscript is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        x.astype("<f8").tofile(os.path.join(tmp, "x.bin"))
        y.astype("<f8").tofile(os.path.join(tmp, "y.bin"))
        queries.astype("<f8").tofile(os.path.join(tmp, "q.bin"))
        script = os.path.join(tmp, "run.R")
        with open(script, "w") as f:
            f.write(R_SCRIPT)
        run = subprocess.run(
            [rscript, script, tmp, str(len(x)), str(len(queries))], capture_output=True, text=True
        )
        if run.returncode != 0:
            print("  KernSmooth failed:", run.stderr.strip().splitlines()[-1:])
            return None
        h, t_dpill, t_locpoly, t_approx = map(float, run.stdout.split())
        pred = np.fromfile(os.path.join(tmp, "pred.bin"), dtype="<f8")
    return h, (t_dpill, t_locpoly, t_approx), pred


def run_size(n, d, seed, rng_queries, r_available):
    X, y = task(n, d, seed)
    Q = rng_queries.uniform(size=(100_000, d))
    print(f"\n== {d}-D, n = {n:,} (seed {seed}) ==")
    rows = {}
    selectors = ["loo", "plugin"] if d == 1 else ["loo"]
    for selector in selectors:
        model = make_model(selector)
        _, t_fit = timed(lambda model=model: model.fit(X, y))
        _, t_rows = timed(lambda model=model: model.predict(X))
        h = np.atleast_1d(model.bandwidth_)
        rows[selector] = (h, t_fit, t_rows, test_error(model, Q), model)
    # Best bandwidth of a log grid (common factor) around the leave-one-out choice.
    base = rows["loo"][0]
    grid = [c * base for c in np.geomspace(0.4, 2.5, 15)]
    errors = [test_error(make_model(h).fit(X, y), Q) for h in grid]
    best = int(np.argmin(errors))
    best_h, best_err = grid[best], errors[best]
    for selector, (h, t_fit, t_rows, err, _) in rows.items():
        total = t_fit + t_rows
        print(
            f"  binned {selector:6s}: h = {np.array2string(h, precision=5)}  "
            f"select+fit {t_fit:6.2f} s  predict {n:,} rows {t_rows:5.2f} s  "
            f"total {total:6.2f} s  test MSE {err:.3e}  ({err / best_err:.3f} × grid best)"
        )
    print(
        f"  grid best: h = {np.array2string(best_h, precision=5)}  test MSE {best_err:.3e}"
        f"  (grid 0.4–2.5 × loo h, 15 points{', at an end' if best in (0, 14) else ''})"
    )
    # Binned against exact at 200 training rows, at the leave-one-out bandwidth.
    model = rows["loo"][4]
    subset = np.random.default_rng(seed + 1).choice(n, 200, replace=False)
    exact, t_exact = timed(lambda: exact_local_linear(X, y, X[subset], model.bandwidth_))
    diff = np.max(np.abs(model.predict(X[subset]) - exact)) / np.std(y)
    print(
        f"  binned vs exact at 200 rows: max |Δ| / sd(y) = {diff:.2e} (bound "
        f"{model.binning_error_:.2g}; grid {model.grid_shape_}; exact took {t_exact:.2f} s)"
    )
    result = {"rows": rows, "best": best_err}
    if d == 1:
        if r_available:
            out = kernsmooth(X[:, 0], y, Q[:, 0])
            if out is not None:
                h, stages, pred = out
                err = float(np.mean((pred - curve(Q)) ** 2))
                total = sum(stages)
                print(
                    f"  KernSmooth: h = {h:.5f}  dpill {stages[0]:6.2f} s  locpoly "
                    f"{stages[1]:5.3f} s  approx {stages[2]:5.2f} s  total {total:6.2f} s  "
                    f"test MSE {err:.3e}  ({err / best_err:.3f} × grid best)"
                )
                result["R"] = total
        else:
            print("  KernSmooth: skipped (Rscript or KernSmooth not installed)")
    return result


def intervals():
    """predict_interval on the binned tier against the exact tier, and at 10⁶ rows."""
    print("\n== predict_interval (local linear, h = 0.02) ==")
    X, y = task(30_000, 1, 0)
    queries = np.linspace(0.01, 0.99, 21)[:, None]
    binned = KernelSmoother(bandwidth=0.02, degree=1, algorithm="binned").fit(X, y)
    exact = KernelSmoother(bandwidth=0.02, degree=1, algorithm="exact").fit(X, y)
    for noise in ("global", "local"):
        (low_b, high_b), t_b = timed(lambda n=noise: binned.predict_interval(queries, noise=n))
        (low_e, high_e), t_e = timed(lambda n=noise: exact.predict_interval(queries, noise=n))
        diff = np.max(np.abs((high_b - low_b) / (high_e - low_e) - 1.0))
        print(
            f"  n = 30,000, noise={noise}: binned {t_b:.2f} s, exact {t_e:.2f} s; widths "
            f"differ by at most {diff:.1e} (relative)"
        )
    X, y = task(10**6, 1, 0)
    model = KernelSmoother(bandwidth=0.02, degree=1, algorithm="binned").fit(X, y)
    grid = np.linspace(0, 1, 201)[:, None]
    _, seconds = timed(lambda: model.predict_interval(grid))
    print(f"  n = 1,000,000: 201 intervals in {seconds:.2f} s")


def bump_and_ridge(X):
    """The 2-D surface of the accuracy check: a Gaussian bump at (0.3, 0.6) and a ridge
    along the diagonal."""
    bump = np.exp(-((X[:, 0] - 0.3) ** 2 + (X[:, 1] - 0.6) ** 2) / (2 * 0.1**2))
    ridge = 0.5 * np.exp(-((X[:, 0] - X[:, 1]) ** 2) / (2 * 0.05**2))
    return bump + ridge


def accuracy(n, d, degree, seed=0):
    """The selected bandwidth's test MSE against the truth, as a multiple of the best
    common rescaling of it (a 9-point log grid 0.5–2 ×, refined around its best), on
    ``sin 2πx`` (1-D) or the bump and ridge (2-D), noise 0.2; with fit and prediction
    seconds for 10⁵ queries."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    truth = (lambda Z: np.sin(2 * np.pi * Z[:, 0])) if d == 1 else bump_and_ridge
    y = truth(X) + 0.2 * rng.normal(size=n)
    Q = rng.uniform(size=(100_000, d))
    model = KernelSmoother(bandwidth="loo", degree=degree)
    _, t_fit = timed(lambda: model.fit(X, y))
    prediction, t_predict = timed(lambda: model.predict(Q))
    err = float(np.mean((prediction - truth(Q)) ** 2))
    h = model.bandwidth_

    def mse(c):
        fit = KernelSmoother(bandwidth=c * h, degree=degree, algorithm=model.algorithm_)
        return float(np.mean((fit.fit(X, y).predict(Q) - truth(Q)) ** 2))

    factors = np.geomspace(0.5, 2.0, 9)
    errors = [mse(c) for c in factors]
    k = int(np.argmin(errors))
    fine = np.geomspace(factors[max(k - 1, 0)], factors[min(k + 1, 8)], 5)
    best = min(min(errors), *(mse(c) for c in fine))
    print(
        f"  {d}-D n = {n:,} degree {degree}: h = {np.array2string(h, precision=5)} "
        f"({model.algorithm_}); fit {t_fit:.2f} s + predict 10⁵ queries {t_predict:.2f} s "
        f"= {t_fit + t_predict:.2f} s; test MSE {err:.3e} = {err / best:.3f} × best rescaling"
    )
    return err / best


def gap_errors(n, d, degree, seed=0):
    """Binned against exact on data with a gap (two clusters, 0.4 of the range apart
    along the first input): the largest error over queries spread over the whole range and
    over those in the gap, relative to the local spread of the targets (what
    ``binning_error_`` bounds), and the cells computed exactly."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    X[:, 0] = np.where(X[:, 0] < 0.5, 0.6 * X[:, 0], 0.4 + 0.6 * X[:, 0])
    y = np.sin(2 * np.pi * X[:, 0]) + 0.2 * rng.normal(size=n)
    h = np.full(d, 0.02 if d == 1 else 0.05)
    binned = KernelSmoother(bandwidth=h, degree=degree, algorithm="binned").fit(X, y)
    exact = KernelSmoother(bandwidth=h, degree=degree, algorithm="exact").fit(X, y)
    Q = rng.uniform(size=(300, d))
    Q[:100, 0] = rng.uniform(0.3, 0.7, size=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mean_b = binned.predict(Q)
        mean_e, spread = exact.predict(Q, return_std=True)
    # The local spread around the exact estimate: return_std's weighted sd of the targets
    # about it (floored as the grid's check floors it).
    error = np.abs(mean_b - mean_e) / np.maximum(spread, 1e-6 * np.std(y))
    gap = (Q[:, 0] > 0.3) & (Q[:, 0] < 0.7)
    cells = int(np.prod(np.array(binned.grid_shape_) - 1))
    print(
        f"  {d}-D n = {n:,} degree {degree} with a gap: max error / local spread "
        f"{error.max():.2e} (in the gap {error[gap].max():.2e}) against binning_error_ "
        f"{binned.binning_error_:.2e}; {binned.exact_cells_:,} of {cells:,} cells exact"
    )


def interval_timings(n, d, seed=0):
    """Seconds of predict and predict_interval for 1 000 queries on a binned local-linear
    fit: the first interval (which takes the noise estimate) and a second."""
    X, y = task(n, d, seed)
    model = KernelSmoother(bandwidth=np.full(d, 0.02), degree=1, algorithm="binned").fit(X, y)
    Q = np.random.default_rng(seed + 1).uniform(size=(1000, d))
    _, t_predict = timed(lambda: model.predict(Q))
    _, t_first = timed(lambda: model.predict_interval(Q))
    _, t_again = timed(lambda: model.predict_interval(Q))
    _, t_global = timed(lambda: model.predict_interval(Q, noise="global"))
    _, t_boot = timed(lambda: model.predict_interval(Q, method="bootstrap", random_state=0))
    _, t_boot_again = timed(lambda: model.predict_interval(Q, method="bootstrap", random_state=1))
    # A fresh fit's first bootstrap interval takes the residuals itself.
    fresh = KernelSmoother(bandwidth=np.full(d, 0.02), degree=1, algorithm="binned").fit(X, y)
    _, t_boot_first = timed(lambda: fresh.predict_interval(Q, method="bootstrap"))
    target = 2 * t_predict + 0.5
    print(
        f"  {d}-D n = {n:,}: predict 1 000 queries {t_predict:.3f} s; analytic interval "
        f"first {t_first:.2f} s (noise estimate), again {t_again:.3f} s, pooled noise "
        f"{t_global:.2f} s; bootstrap (1 000 replicates, the grid) first on a fresh fit "
        f"{t_boot_first:.2f} s, after the analytic {t_boot:.3f} s, again {t_boot_again:.3f} s "
        f"(target 2 × predict + 0.5 s = {target:.2f} s)"
    )


def extremes(args):
    """The checks of accuracy, gaps and intervals (``--only-checks``)."""
    sizes = [10**5] if args.quick else [10**5, 10**6]
    # The rescalings go down to half the selected bandwidth, whose 2-D binned sums need
    # more than the default 1 GiB of working memory.
    sklearn.set_config(working_memory=4096)
    print("\n== Bandwidth accuracy: test MSE against the truth, noise 0.2 ==")
    for d in (1, 2):
        for n in sizes:
            for degree in (0, 1):
                if args.size is None or args.size == n:
                    accuracy(n, d, degree)
    # One draw's leave-one-out bandwidth is a random variable: its error against the best
    # rescaling over several draws of the same design.
    n = sizes[-1] if args.size is None else args.size
    print(f"\n== 1-D local linear over seeds, n = {n:,} ==")
    ratios = [accuracy(n, 1, 1, seed) for seed in range(5)]
    print(
        f"  over 5 seeds: mean {np.mean(ratios):.3f}, geometric mean "
        f"{np.exp(np.mean(np.log(ratios))):.3f}, largest {np.max(ratios):.3f} × best rescaling"
    )
    print("\n== Binned against exact with a gap ==")
    for d in (1, 2):
        for degree in (0, 1, 2, 3) if d == 1 else (0, 1, 2):
            gap_errors(10**5, d, degree)
    print("\n== Interval timings ==")
    for d in (1, 2):
        for n in sizes:
            interval_timings(n, d)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10⁴ and 10⁵ rows only")
    parser.add_argument("--seeds", type=int, default=3, help="seeds at 10⁵ and 10⁶ rows")
    parser.add_argument("--only-2d", action="store_true", help="the 2-D size only")
    parser.add_argument("--only-seeds", action="store_true", help="the seeds section only")
    parser.add_argument(
        "--only-intervals", action="store_true", help="the predict_interval section only"
    )
    parser.add_argument(
        "--only-checks",
        action="store_true",
        help="bandwidth accuracy, binned against exact with a gap, interval timings",
    )
    parser.add_argument("--size", type=int, default=None, help="with --only-checks: one size")
    args = parser.parse_args()
    if args.only_checks:
        extremes(args)
        return
    if args.only_intervals:
        intervals()
        return
    r_available = (
        shutil.which("Rscript") is not None
        and subprocess.run(
            ["Rscript", "-e", "library(KernSmooth)"], capture_output=True
        ).returncode
        == 0
    )
    # The 2-D grid of bandwidths goes down to 0.4 times the selected one, whose binned sums
    # at the tolerance need more than the default 1 GiB of working memory.
    sklearn.set_config(working_memory=4096)
    rng = np.random.default_rng(12345)
    sizes_1d = [10**4, 10**5] if args.quick else [10**5, 10**6, 10**7]
    size_2d = 10**5 if args.quick else 10**6
    results = {}
    if args.only_seeds:
        pass
    elif not args.only_2d:
        for n in sizes_1d:
            results[1, n] = run_size(n, 1, 0, rng, r_available)
    if not args.only_seeds:
        results[2, size_2d] = run_size(size_2d, 2, 0, rng, r_available)
    if args.only_2d:
        return

    print("\n== Chosen bandwidths over seeds (1-D) ==")
    for n in sizes_1d[:2]:
        for seed in range(1, args.seeds):
            X, y = task(n, 1, seed)
            Q = rng.uniform(size=(100_000, 1))
            loo = make_model("loo").fit(X, y)
            plug = make_model("plugin").fit(X, y)
            grid = [c * loo.bandwidth_ for c in np.geomspace(0.4, 2.5, 15)]
            best = min(test_error(make_model(h).fit(X, y), Q) for h in grid)
            print(
                f"  n = {n:,} seed {seed}: loo h = {loo.bandwidth_[0]:.5f} "
                f"({test_error(loo, Q) / best:.3f} × best), plugin h = "
                f"{plug.bandwidth_[0]:.5f} ({test_error(plug, Q) / best:.3f} × best)"
            )

    if args.only_seeds:
        return
    intervals()
    print("\n== Targets ==")
    for n in sizes_1d[1:]:
        res = results[1, n]
        for selector in ("loo", "plugin"):
            _, t_fit, t_rows, err, _ = res["rows"][selector]
            total = t_fit + t_rows
            versus = f", KernSmooth {res['R']:.2f} s" if "R" in res else ""
            print(
                f"  1-D n = {n:,} {selector}: {total:.2f} s{versus}; "
                f"test MSE {err / res['best']:.3f} × grid best"
            )
    res = results[2, size_2d]
    _, t_fit, t_rows, err, _ = res["rows"]["loo"]
    print(
        f"  2-D n = {size_2d:,} loo: {t_fit + t_rows:.2f} s (target ≤ 30 s); "
        f"test MSE {err / res['best']:.3f} × grid best"
    )


if __name__ == "__main__":
    main()
