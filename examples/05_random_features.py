"""Random features: linear attention and what it costs
====================================================

**The question.** Linear attention replaces the softmax kernel by an explicit feature map,
``κ(q, k) ≈ φ(q)ᵀφ(k)``, so the sums over the keys are taken once and the cost is linear in n.
How many random features does the approximation need, which features are better, and when is
it faster than exact attention?

**What to look at.** In ``05_random_features.png``:

- left: the relative error of the kernel matrix φ(Q)φ(K)ᵀ against the kernel each map
  estimates (``feature_maps.kernel_approximation_error``). The positive map's error is large
  and erratic from seed to seed: its relative variance grows like exp(‖q + k‖²), so a few
  pairs dominate the matrix norm;
- middle: the error of the attention weights (total-variation distance between each query's
  approximate and exact Gaussian-kernel weights, averaged over queries and seeds) against the
  number of features r. Positive features (FAVOR+, ``exp(ωᵀu − ½‖u‖²)``) against trigonometric
  (random Fourier, ``[cos ωᵀu, sin ωᵀu]``), i.i.d. against orthogonal rows ω. Monte Carlo
  error falls like r^(−1/2) (dotted); orthogonal rows should sit lower. What the estimator
  uses are these normalized weights, and there the maps are much closer than their kernels;
- third: the same weight error at a small bandwidth, inputs of norm about 2.6 in kernel
  units (2 000 keys in 3-D), where the positive map's variance explodes. Generalised
  ("optimal") positive features damp it; Nyström features (``NystroemFeatures``: the kernel's
  values at r k-means landmarks of the keys, combined through the pseudo-inverse of their
  kernel matrix) do not depend on the norm at all, only on how close each point is to a
  landmark, and their error falls fast as r grows;
- right: fit + predict time against n (as many queries as training points) for
  ``LinearAttentionRegressor`` and the exact ``KernelSmoother`` at the same bandwidth, on
  log-log axes: slopes near 1 and 2. Where the lines cross, linear attention starts to win.

Run ``python 05_random_features.py [--out DIR]``.
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os
import time

import matplotlib.pyplot as plt
import numpy as np

from kernattn import KernelSmoother, LinearAttentionRegressor, feature_maps
from kernattn.datasets import make_large
from kernattn.plotting import plot_approximation_error, plot_runtime

parser = argparse.ArgumentParser(description="Random features for linear attention.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"

# %%
# Queries and keys of moderate norm (the variance of positive features grows like
# exp(‖q‖² + ‖k‖²), which is why the estimators center and scale the inputs first).
rng = np.random.default_rng(0)
d = 4
Q = 0.5 * rng.normal(size=(100, d))
K = 0.5 * rng.normal(size=(300, d))
n_components = [8, 16, 32, 64, 128] if SMOKE else [8, 16, 32, 64, 128, 256, 512, 1024]
n_seeds = 3 if SMOKE else 10

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
        f"{name:27s} r={n_components[-1]}: kernel error {kernel_errors[name][-1].mean():.4f}, "
        f"weight error {weight_errors[name][-1].mean():.4f}"
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
wide_errors = {}
for name, make_map in wide_maps.items():
    wide_errors[name] = np.empty((len(n_components), n_seeds))
    for i, r in enumerate(n_components):
        for seed in range(n_seeds):
            weights = approximate_weights(make_map(r, seed), Q_wide, K_wide)
            wide_errors[name][i, seed] = 0.5 * np.abs(weights - exact_wide).sum(axis=1).mean()
    print(
        f"small bandwidth, {name:29s} r={n_components[-1]}: weight error "
        f"{wide_errors[name][-1].mean():.4f}"
    )

# %%
# Time against n: the same bandwidth for both, fit + predict on n queries. The best of a few
# repeats, after one warm-up fit (the first call pays for imports and caches).
sizes = [500, 1000, 2000] if SMOKE else [1000, 2000, 4000, 8000, 16000, 32000]
bandwidth = 0.5
models = {
    "LinearAttentionRegressor (r = 128)": lambda: LinearAttentionRegressor(
        feature_map="positive", n_components=128, bandwidth=bandwidth, random_state=0
    ),
    "KernelSmoother (exact)": lambda: KernelSmoother(bandwidth=bandwidth),
}
times = {name: [] for name in models}
for n in sizes:
    X, y, _ = make_large(2 * n, random_state=0)
    X_train, y_train, X_test = X[:n], y[:n], X[n:]
    for name, make_model in models.items():
        if n == sizes[0]:
            make_model().fit(X_train, y_train).predict(X_test)
        best = np.inf
        for _ in range(3 if n <= 4000 else 1):
            start = time.perf_counter()
            make_model().fit(X_train, y_train).predict(X_test)
            best = min(best, time.perf_counter() - start)
        times[name].append(best)
    print(f"n = {n:6d}: " + ", ".join(f"{name} {t[-1]:.3f} s" for name, t in times.items()))

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
axes[2].set_title(f"small bandwidth: ‖u‖ ≈ 2.6, {len(K_wide)} keys, d = 3")
plot_runtime(sizes, times, ax=axes[3])
axes[3].set_ylabel("fit + predict time (s), best of repeats")
axes[3].set_title(f"n training points, n queries, d = 4, bandwidth {bandwidth}")
fig.suptitle(
    f"Linear attention: accuracy against r ({n_seeds} seeds; band ± std; ‖u‖ ≈ 1, d = {d}, "
    "unless marked), time against n"
)
path = os.path.join(args.out, "05_random_features.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")
