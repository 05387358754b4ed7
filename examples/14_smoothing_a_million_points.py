"""Smoothing a million points
==========================

**The question.** The most common use of a kernel smoother is a scatterplot smoother: one
input, many rows. Exact Nadaraya–Watson sums one kernel value per (query, row) pair —
10¹² of them to predict a million rows at themselves. How does ``KernelSmoother`` smooth a
million points in about a second, choose the bandwidth on all of them, and how close is
that to the exact smoother?

**What to look at.**

- Top left: a million noisy points of ``sin 2πx`` (a random 20 000 of them drawn), the
  local-linear fit at the leave-one-out and at the plug-in bandwidth, both on the binned
  tier (``algorithm="auto"`` chooses it), and the true curve. The inset shows the
  leave-one-out fit minus the true curve with its 95 % confidence band
  (``predict_interval``: the noise estimated from the residuals of all the rows, on the
  grid): a few thousandths wide, and it holds the true curve nearly everywhere.
- Top right: the test error against the true curve as the bandwidth varies, with the two
  selected bandwidths marked: both sit near the bottom of the curve.
- Bottom left: the binned estimate minus the exact one at random queries, relative to the
  spread of ``y``, against the bound the grid was chosen for (``binning_error_``).
- Bottom right: seconds to choose the bandwidth, fit, and predict at every training row,
  against the number of rows: the binned tier, the exact tier (at a given bandwidth, its
  cost grows like n²), and R KernSmooth's ``dpill`` + ``locpoly`` when ``Rscript`` and
  KernSmooth are installed.

Run ``python 14_smoothing_a_million_points.py [--out DIR]``; it writes
``14_smoothing_a_million_points.png``.

**Run time.** About 25 s on 2 cores (5 s with ``KERNATTN_SMOKE=1``).
"""

# %%
# Setup: the data and where the figure goes. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os
import shutil
import subprocess
import tempfile
import time

import matplotlib.pyplot as plt
import numpy as np

from kernattn import KernelSmoother

parser = argparse.ArgumentParser(description="Smoothing a million points.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"

N = 30_000 if SMOKE else 1_000_000
BINNED_SIZES = [3_000, 10_000, 30_000] if SMOKE else [10_000, 100_000, 1_000_000]
EXACT_SIZES = [1_000, 3_000] if SMOKE else [1_000, 3_000, 10_000, 30_000]
N_COMPARED = 100 if SMOKE else 400
NOISE = 0.3


def truth(x):
    return np.sin(2 * np.pi * x)


def sample(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=n)
    return x[:, None], truth(x) + NOISE * rng.normal(size=n)


X, y = sample(N, 0)
grid = np.linspace(0, 1, 401)[:, None]
test = np.random.default_rng(1).uniform(X.min(), X.max(), size=(20_000, 1))

# %%
# Two bandwidths chosen on all the rows: the leave-one-out error evaluated on binned sums
# (every row left out of its own fit, O(grid · log grid + n) per bandwidth), and the
# direct plug-in of Ruppert, Sheather and Wand (R KernSmooth's ``dpill``).
fits = {}
for selector in ("loo", "plugin"):
    start = time.perf_counter()
    model = KernelSmoother(bandwidth=selector, degree=1).fit(X, y)
    fitted = model.predict(X)  # the fitted curve at every training row
    seconds = time.perf_counter() - start
    fits[selector] = model
    print(
        f"{selector:6s}: h = {model.bandwidth_[0]:.5f} on the {model.algorithm_} tier "
        f"(grid {model.grid_shape_}, error bound {model.binning_error_:.1e}); "
        f"select + fit + predict {N:,} rows: {seconds:.2f} s; "
        f"residual sd {np.std(y - fitted):.3f}"
    )


# %%
# The 95 % confidence band of the leave-one-out fit's mean: the noise is estimated from the
# residuals of every training row, on the grid; each query sums the exact weights.
band_grid = np.linspace(0, 1, 201)[:, None]
start = time.perf_counter()
lower, upper = fits["loo"].predict_interval(band_grid)
covered = np.mean((lower <= truth(band_grid[:, 0])) & (truth(band_grid[:, 0]) <= upper))
print(
    f"95 % band: half-width {np.median(upper - lower) / 2:.1e} (median), holds the true "
    f"curve at {covered:.0%} of {len(band_grid)} points; {time.perf_counter() - start:.2f} s"
)


# %%
# The test error against the true curve over a range of bandwidths: each fit on the binned
# tier at a given bandwidth costs a fraction of a second.
def test_error(model):
    return float(np.mean((model.predict(test) - truth(test[:, 0])) ** 2))


h_loo = fits["loo"].bandwidth_[0]
bandwidths = h_loo * np.geomspace(0.25, 4.0, 9 if SMOKE else 17)
errors = [test_error(KernelSmoother(bandwidth=h, degree=1).fit(X, y)) for h in bandwidths]
best = int(np.argmin(errors))
for selector, model in fits.items():
    print(
        f"{selector:6s}: test error {test_error(model):.3e} "
        f"({test_error(model) / errors[best]:.3f} × the best of the grid, "
        f"h = {bandwidths[best]:.5f})"
    )

# %%
# Binned against exact at random queries: the exact local line sums every row (here a
# few hundred queries against all the rows).
model = fits["loo"]
queries = np.sort(np.random.default_rng(2).uniform(X.min(), X.max(), size=(N_COMPARED, 1)), 0)
exact = KernelSmoother(bandwidth=model.bandwidth_, degree=1, algorithm="exact").fit(X, y)
start = time.perf_counter()
exact_estimate = exact.predict(queries)
exact_seconds = time.perf_counter() - start
difference = (model.predict(queries) - exact_estimate) / np.std(y)
print(
    f"binned vs exact at {N_COMPARED} queries: largest |difference| / sd(y) = "
    f"{np.max(np.abs(difference)):.1e} (bound {model.binning_error_:.1e}); the exact "
    f"tier took {exact_seconds:.2f} s for them"
)


# %%
# Time against the number of rows: choose the bandwidth, fit and predict every training
# row. The exact tier at the binned fit's bandwidth (its own search would cost more).
def seconds_binned(n):
    Xn, yn = sample(n, 3)
    start = time.perf_counter()
    KernelSmoother(bandwidth="loo", degree=1, algorithm="binned").fit(Xn, yn).predict(Xn)
    return time.perf_counter() - start


def seconds_exact(n):
    Xn, yn = sample(n, 3)
    start = time.perf_counter()
    KernelSmoother(bandwidth=h_loo * (N / n) ** 0.2, degree=1, algorithm="exact").fit(
        Xn, yn
    ).predict(Xn)
    return time.perf_counter() - start


R_SCRIPT = r"""
suppressMessages(library(KernSmooth))
args <- commandArgs(trailingOnly = TRUE)
n <- as.integer(args[2])
x <- readBin(file.path(args[1], "x.bin"), "double", n)
y <- readBin(file.path(args[1], "y.bin"), "double", n)
t0 <- proc.time()[["elapsed"]]
fit <- locpoly(x, y, degree = 1, bandwidth = dpill(x, y), gridsize = 401L)
rows <- approx(fit$x, fit$y, xout = x)$y
cat(proc.time()[["elapsed"]] - t0, "\n")
"""


def seconds_kernsmooth(n):
    """dpill + locpoly + approx back to the rows in R, or None without R or KernSmooth."""
    if shutil.which("Rscript") is None:
        return None
    Xn, yn = sample(n, 3)
    with tempfile.TemporaryDirectory() as tmp:
        Xn[:, 0].astype("<f8").tofile(os.path.join(tmp, "x.bin"))
        yn.astype("<f8").tofile(os.path.join(tmp, "y.bin"))
        script = os.path.join(tmp, "run.R")
        with open(script, "w") as handle:
            handle.write(R_SCRIPT)
        run = subprocess.run(["Rscript", script, tmp, str(n)], capture_output=True, text=True)
    return float(run.stdout.split()[0]) if run.returncode == 0 else None


binned_seconds = [seconds_binned(n) for n in BINNED_SIZES]
exact_seconds = [seconds_exact(n) for n in EXACT_SIZES]
r_seconds = [seconds_kernsmooth(n) for n in BINNED_SIZES]
have_r = all(s is not None for s in r_seconds)
for n, s, r in zip(BINNED_SIZES, binned_seconds, r_seconds, strict=True):
    versus = f", KernSmooth {r:.2f} s" if r is not None else ""
    print(f"n = {n:>9,}: binned {s:.2f} s{versus}")
for n, s in zip(EXACT_SIZES, exact_seconds, strict=True):
    print(f"n = {n:>9,}: exact {s:.2f} s")
if not have_r:
    print("KernSmooth: skipped (Rscript or its KernSmooth package is not installed)")

# %%
# The figure.
fig, axes = plt.subplots(2, 2, figsize=(12, 8.5), layout="constrained")
(ax_fit, ax_h), (ax_diff, ax_time) = axes
shown = np.random.default_rng(4).choice(N, size=min(N, 20_000), replace=False)
ax_fit.scatter(X[shown, 0], y[shown], s=1, color="0.7", rasterized=True, label="data (sample)")
ax_fit.plot(grid[:, 0], truth(grid[:, 0]), color="k", lw=2.5, label="truth")
for (selector, model), color, style in zip(fits.items(), ("C0", "C1"), ("-", "--"), strict=True):
    ax_fit.plot(
        grid[:, 0],
        model.predict(grid),
        style,
        color=color,
        lw=1.5,
        label=f"local linear, h by {selector} = {model.bandwidth_[0]:.4f}",
    )
ax_fit.set(xlabel="x", ylabel="y", title=f"{N:,} points, smoothed on the binned tier")
ax_fit.set_ylim(top=3.4)
ax_fit.legend(fontsize=9, loc="lower left", markerscale=6)
inset = ax_fit.inset_axes([0.44, 0.72, 0.54, 0.26])
centre = truth(band_grid[:, 0])
inset.fill_between(
    band_grid[:, 0],
    lower - centre,
    upper - centre,
    color="C0",
    alpha=0.3,
    lw=0,
    label="95 % band",
)
inset.plot(
    band_grid[:, 0],
    fits["loo"].predict(band_grid) - centre,
    color="C0",
    lw=1,
    label="fit − truth",
)
inset.axhline(0, color="k", lw=0.8)
inset.tick_params(labelsize=7)
inset.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
inset.yaxis.get_offset_text().set_fontsize(7)
inset.legend(fontsize=7, loc="lower center", ncol=2)

ax_h.plot(bandwidths, errors, "o-", color="0.3", ms=4, label="binned fit at h")
for (selector, model), color in zip(fits.items(), ("C0", "C1"), strict=True):
    ax_h.axvline(model.bandwidth_[0], color=color, ls="--", label=f"h by {selector}")
ax_h.set_xscale("log")
ax_h.set_yscale("log")
ax_h.minorticks_off()
ticks = bandwidths[::4]
ax_h.set_xticks(ticks, [f"{t:.2g}" for t in ticks])
ax_h.set(
    xlabel="bandwidth h",
    ylabel="mean squared error against the true curve",
    title="Test error against the bandwidth",
)
ax_h.legend(fontsize=9)

bound = model.binning_error_
floor = 1e-3 * bound  # differences below this are drawn on it
ax_diff.semilogy(
    queries[:, 0],
    np.maximum(np.abs(difference), floor),
    ".",
    color="C2",
    ms=4,
    label=f"|binned − exact| / sd(y), drawn at {floor:.0e} where below",
)
ax_diff.axhline(bound, color="C3", ls=":", label=f"bound of the grid ({bound:.0e})")
ax_diff.set(
    xlabel="query x",
    ylabel="|difference| / sd(y)",
    title=f"Binned against exact at {N_COMPARED} queries (h by loo)",
    ylim=(0.5 * floor, 20 * bound),
)
ax_diff.legend(fontsize=9, loc="upper right")

ax_time.plot(BINNED_SIZES, binned_seconds, "o-", color="C0", label="binned: loo + fit + predict")
ax_time.plot(EXACT_SIZES, exact_seconds, "s-", color="C3", label="exact: fit + predict at h")
if have_r:
    ax_time.plot(BINNED_SIZES, r_seconds, "^-", color="C4", label="KernSmooth dpill + locpoly")
ax_time.set_xscale("log")
ax_time.set_yscale("log")
ax_time.set(
    xlabel="training rows n",
    ylabel="seconds",
    title="Time to smooth n rows and predict all of them",
)
ax_time.legend(fontsize=9, loc="upper left")
for ax in axes.ravel():
    ax.tick_params(labelsize=9)
path = os.path.join(args.out, "14_smoothing_a_million_points.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")
