"""Random features: linear attention and what it costs
====================================================

**The question.** Linear attention replaces the softmax kernel by an explicit feature map,
``κ(q, k) ≈ φ(q)ᵀφ(k)``, so the sums over the keys are taken once and the cost is linear in n.
How many random features does the approximation need, which features are better, and when is
it faster than exact attention?

**The claim.** "The 'linear attention' line of work makes that connection explicit by swapping
softmax for an explicit feature map." With ``κ(q, k) ≈ φ(q)ᵀφ(k)``, the sums over the keys,
``Σ_i φ(k_i) y_iᵀ`` and ``Σ_i φ(k_i)``, are taken once, so the cost grows like n instead of
n². This example measures what the swap costs in accuracy and what it saves in time.

**What to look at.** In ``05_random_features.png`` (lines: the median over the seeds; bands:
from the 10th to the 90th percentile of the seeds, which stays positive on log axes):

- top left: the relative error of the kernel matrix φ(Q)φ(K)ᵀ against the kernel each map
  estimates (``feature_maps.kernel_approximation_error``). Positive features
  (FAVOR+, ``exp(ωᵀu − ½‖u‖²)``) have the larger error, and its spread from seed to seed is
  wide: their relative variance grows like exp(‖q + k‖²), so a few pairs dominate the matrix
  norm. Trigonometric features (random Fourier, ``[cos ωᵀu, sin ωᵀu]``) fall close to the
  Monte Carlo rate r^(−1/2) (dotted), and orthogonal rows ω sit below i.i.d. ones;
- top right: what the estimator uses, the normalized attention weights (total-variation
  distance to the exact Gaussian-kernel weights, averaged over the queries). There the maps
  are much closer than their kernels: every map ends at a few percent of the weight at
  r = 1 024;
- bottom left: the same weight error at a small bandwidth (inputs of norm about 2.6 in kernel
  units, 2 000 keys in 3-D), where the positive map's variance explodes and its error hardly
  falls with r. Generalized ("optimal") positive features damp it; Nyström features
  (``NystroemFeatures``: the kernel's values at r k-means landmarks of the keys, combined
  through the pseudo-inverse of their kernel matrix) do not depend on the norm at all, only
  on how close each point is to a landmark, and their error falls fastest (drawn up to
  r = 256, where it is already about 1e-2);
- bottom right: fit + predict time against n (n training points, n queries) for
  ``LinearAttentionRegressor`` and the exact ``KernelSmoother`` at the same bandwidth, on
  one thread so the slopes measure the work and not the thread scheduling; the median of 3
  repeats per size, the band from the fastest to the slowest. The exact smoother is timed up
  to n = 16 000 (beyond, it takes seconds per repeat), linear attention up to 128 000. The
  slopes are fitted from n = 4 000 on, where fixed costs no longer flatten the curves: close
  to 2 for the exact smoother (n queries against n keys) and close to 1 for linear attention.
  Linear attention is already faster at n = 2 000 and 10 to 20 times faster at 16 000; the
  printed lines give the measured slopes and ratios of this run.

Run ``python 05_random_features.py [--out DIR]``.

**Run time.** About 10 s on 2 cores (5 s with ``KERNATTN_SMOKE=1``).
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os
import time

import matplotlib.pyplot as plt
import numpy as np
from threadpoolctl import threadpool_limits

from kernattn import KernelSmoother, LinearAttentionRegressor, feature_maps
from kernattn.datasets import make_large
from kernattn.plotting import plot_approximation_error, plot_runtime

parser = argparse.ArgumentParser(description="Random features for linear attention.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"
# Every matrix here is small: BLAS threads would cost more than they save (on a busy machine,
# ten times more). One thread for the whole example.
threadpool_limits(limits=1)

# %%
# Queries and keys of moderate norm (the variance of positive features grows like
# exp(‖q‖² + ‖k‖²), which is why the estimators center and scale the inputs first).
rng = np.random.default_rng(0)
d = 4
Q = 0.5 * rng.normal(size=(100, d))
K = 0.5 * rng.normal(size=(300, d))
n_components = [8, 16, 32, 64, 128] if SMOKE else [8, 16, 32, 64, 128, 256, 512, 1024]
n_seeds = 3 if SMOKE else 8

# The exact Gaussian-kernel attention weights, softmax_j(−½‖q − k_j‖²).
logits = -0.5 * ((Q[:, None, :] - K[None, :, :]) ** 2).sum(axis=2)
exact = np.exp(logits - logits.max(axis=1, keepdims=True))
exact /= exact.sum(axis=1, keepdims=True)


def approximate_weights(feature_map, Q=Q, K=K):
    """Implied attention weights φ(q)ᵀφ(k_j) / Σ_l φ(q)ᵀφ(k_l) of the Gaussian kernel.

    Positive features estimate exp(qᵀk); the key factor exp(−½‖k‖²) turns that into the
    Gaussian kernel up to a per-query factor, which cancels in the ratio (as do the per-query
    and global key constants a stabilised feature map may subtract).
    """
    kernel = feature_map.transform(Q) @ feature_map.transform(K).T
    if isinstance(feature_map, Positive):
        kernel = kernel * np.exp(-0.5 * (K**2).sum(axis=1))
    return kernel / kernel.sum(axis=1, keepdims=True)


def errors_against_r(make_map):
    """Kernel and attention-weight errors, each of shape (len(n_components), n_seeds).

    The kernel error is ``kernel_approximation_error``'s ‖K̂ − K‖_F / ‖K‖_F against the kernel
    the map estimates (exp(qᵀk) for positive features, the Gaussian kernel for trigonometric
    ones); the weight error is the mean total-variation distance to the exact Gaussian-kernel
    attention weights, the same target for every map.
    """
    kernel_err = np.empty((len(n_components), n_seeds))
    weight_err = np.empty((len(n_components), n_seeds))
    for i, r in enumerate(n_components):
        for seed in range(n_seeds):
            feature_map = make_map(r).fit(np.zeros((1, d)), random_state=seed)
            report = feature_maps.kernel_approximation_error(Q, K, feature_map=feature_map)
            kernel_err[i, seed] = report["kernel_error"]
            weights = approximate_weights(feature_map)
            weight_err[i, seed] = 0.5 * np.abs(weights - exact).sum(axis=1).mean()
    return kernel_err, weight_err


Positive = feature_maps.PositiveRandomFeatures
Trigonometric = feature_maps.TrigonometricRandomFeatures
maps = {
    "positive, i.i.d.": lambda r: Positive(n_components=r, orthogonal=False),
    "positive, orthogonal": lambda r: Positive(n_components=r, orthogonal=True),
    "trigonometric, i.i.d.": lambda r: Trigonometric(n_components=r, orthogonal=False),
    "trigonometric, orthogonal": lambda r: Trigonometric(n_components=r, orthogonal=True),
}
kernel_errors, weight_errors = {}, {}
for name, make_map in maps.items():
    kernel_errors[name], weight_errors[name] = errors_against_r(make_map)
    print(
        f"{name:27s} r={n_components[-1]}: median kernel error "
        f"{np.median(kernel_errors[name][-1]):.4f}, median weight error "
        f"{np.median(weight_errors[name][-1]):.4f}"
    )

# %%
# A small bandwidth: wide inputs in kernel units, many keys. Nyström landmarks are chosen
# among the keys (k-means), so that map is fitted on them.
Q_wide = 1.5 * rng.normal(size=(200, 3))
K_wide = 1.5 * rng.normal(size=(500 if SMOKE else 2000, 3))
logits = -0.5 * ((Q_wide[:, None, :] - K_wide[None, :, :]) ** 2).sum(axis=2)
exact_wide = np.exp(logits - logits.max(axis=1, keepdims=True))
exact_wide /= exact_wide.sum(axis=1, keepdims=True)
wide_maps = {
    "positive, orthogonal": lambda r, seed: Positive(r).fit(K_wide, random_state=seed),
    # The variance-optimal parameter depends on the mean of ‖q + k‖² over the pairs.
    "optimal positive, orthogonal": lambda r, seed: Positive(r, A="optimal").fit(
        K_wide, queries=Q_wide, random_state=seed
    ),
    "Nyström (k-means landmarks)": lambda r, seed: feature_maps.NystroemFeatures(r).fit(
        K_wide, random_state=seed
    ),
}
# Nyström stops at r = 256: its error is near 1e-2 there and falls steeply, while k-means
# with r clusters and the r × r eigendecomposition would make larger r the slowest part of
# the example. NaN marks the sizes left out.
nystroem_r_max = 256
n_seeds_wide = 3 if SMOKE else 5
wide_errors = {}
for name, make_map in wide_maps.items():
    wide_errors[name] = np.full((len(n_components), n_seeds_wide), np.nan)
    for i, r in enumerate(n_components):
        if name.startswith("Nyström") and r > nystroem_r_max:
            continue
        for seed in range(n_seeds_wide):
            weights = approximate_weights(make_map(r, seed), Q_wide, K_wide)
            wide_errors[name][i, seed] = 0.5 * np.abs(weights - exact_wide).sum(axis=1).mean()
    at = {r: np.median(wide_errors[name][n_components.index(r)]) for r in (64, 128)}
    print(
        f"small bandwidth, {name:29s} median weight error: r=64 {at[64]:.4f}, r=128 {at[128]:.4f}"
    )

# %%
# Time against n: the same bandwidth for both, fit + predict on n queries, on one thread (the
# machine's other work and the thread pool's start-up would blur the slopes). The median of
# a few repeats, after one warm-up fit (the first call pays for imports and caches). The
# exact smoother stops at 16 000: its time grows like n².
exact_sizes = [500, 1000, 2000] if SMOKE else [1000, 2000, 4000, 8000, 16000]
sizes = exact_sizes + ([4000] if SMOKE else [32000, 64000, 128000])
slope_from = 1000 if SMOKE else 4000
n_repeats = 3
bandwidth = 0.5
models = {
    "LinearAttentionRegressor (r = 128)": lambda: LinearAttentionRegressor(
        feature_map="positive", n_components=128, bandwidth=bandwidth, random_state=0, n_jobs=1
    ),
    "KernelSmoother (exact)": lambda: KernelSmoother(
        kernel="gaussian", bandwidth=bandwidth, n_jobs=1
    ),
}
times = {name: np.full((len(sizes), n_repeats), np.nan) for name in models}
for i, n in enumerate(sizes):
    X, y, _ = make_large(2 * n, random_state=0)
    X_train, y_train, X_test = X[:n], y[:n], X[n:]
    for name, make_model in models.items():
        if name.startswith("KernelSmoother") and n not in exact_sizes:
            continue
        if i == 0:
            make_model().fit(X_train, y_train).predict(X_test)
        for repeat in range(n_repeats):
            start = time.perf_counter()
            make_model().fit(X_train, y_train).predict(X_test)
            times[name][i, repeat] = time.perf_counter() - start
    print(
        f"n = {n:6d}: " + ", ".join(f"{name} {np.median(t[i]):.3f} s" for name, t in times.items())
    )
medians = {name: np.median(t, axis=1) for name, t in times.items()}
exact_time = medians["KernelSmoother (exact)"]
linear_time = medians["LinearAttentionRegressor (r = 128)"]
for name, median in medians.items():
    keep = (np.array(sizes) >= slope_from) & np.isfinite(median)
    slope = np.polyfit(np.log(np.array(sizes)[keep]), np.log(median[keep]), 1)[0]
    print(f"{name}: time ∝ n^{slope:.2f} (fitted on n >= {slope_from})")
for n in exact_sizes:
    ratio = exact_time[sizes.index(n)] / linear_time[sizes.index(n)]
    print(f"n = {n:6d}: exact / linear time = {ratio:.1f}")

# %%
# The figure.
fig, axes = plt.subplots(2, 2, figsize=(14, 10), layout="constrained")
axes = axes.ravel()
plot_approximation_error(n_components, kernel_errors, ax=axes[0])
axes[0].set_ylabel("relative kernel error ‖K̂ − K‖ / ‖K‖")
axes[0].set_title("each map against its own kernel")
plot_approximation_error(n_components, weight_errors, ax=axes[1])
axes[1].set_ylabel("attention-weight error (total variation)")
axes[1].set_title("Gaussian-kernel attention weights")
plot_approximation_error(n_components, wide_errors, ax=axes[2])
axes[2].set_ylabel("attention-weight error (total variation)")
axes[2].set_title(f"small bandwidth: ‖u‖ ≈ 2.6, {len(K_wide)} keys, d = 3 ({n_seeds_wide} seeds)")
plot_runtime(sizes, times, slope_from=slope_from, ax=axes[3])
axes[3].set_ylabel(f"fit + predict time (s), median of {n_repeats}")
axes[3].set_title(
    f"n training points, n queries, d = 4, one thread; slopes fitted on n ≥ {slope_from}"
)
fig.suptitle(
    f"Linear attention: accuracy against r (median of {n_seeds} seeds, band 10th-90th "
    f"percentile; ‖u‖ ≈ 1, d = {d} unless marked), time against n"
)
path = os.path.join(args.out, "05_random_features.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")
