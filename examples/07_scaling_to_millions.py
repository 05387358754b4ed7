"""Scaling to millions: exact, Nyström and random-feature attention as n grows
===========================================================================

**The question.** Exact attention compares every query with every key: predicting m queries
from n training rows costs O(m·n). Linear attention replaces the kernel by features,
``κ(q, k) ≈ φ(q)ᵀφ(k)``, and costs O((m + n)·r). How do time and accuracy of the three
behave as n grows from ten thousand to millions of rows — and what does each buy?

**Setup.** Gaussian inputs in 8 dimensions, a smooth target of three of them and noise of
standard deviation 0.5 (the task of ``benchmarks/bench_linear.py``), the Gaussian kernel at
bandwidths chosen once by leave-one-out on 2 000 rows (narrow on the relevant features, wide
on the others). ``KernelSmoother`` is the exact smoother; ``LinearAttentionRegressor``
approximates it with Nyström features alone (r landmarks from the data, ``n_near_keys=0``:
no exact near field, which needs the keys in memory) or positive random features (FAVOR+),
r = 64 each. Each fits n rows and predicts 20 000 held-out queries; the
exact smoother predicts 200 of them and its time is scaled to 20 000 (it is linear in the
number of queries). Accuracy is the mean squared error against the noise-free target on
those 200 queries, for all three.

With ``--scheduler ADDRESS`` (a running ``distributed`` scheduler, for instance
``tcp://127.0.0.1:8786``) the training rows are generated in partitions on the cluster's
workers, the linear estimators are fitted there (each partition's sums on its worker) and
all three predict there; the sizes then go one step further.

**What to look at.** In ``07_scaling_to_millions.png``: left, time against n on log-log
axes — slope 1 for the exact smoother (m fixed, n growing), nearly flat and then slope 1 for
linear attention, whose fixed costs (landmarks, the features of the queries) dominate
at small n; the gap is the speed-up. Right, the error against n: the exact smoother improves
as n grows until the bias of its fixed bandwidth dominates; Nyström stays a few times above
it — its r landmarks, not the data, limit the resolution; positive random features at this
small bandwidth in 8 dimensions stay far off, near the variance of the target — their
variance grows like exp(‖q + k‖²).

Run ``python 07_scaling_to_millions.py [--out DIR] [--scheduler ADDRESS]``.

**Run time.** About 20 s on 2 cores (5 s with ``KERNATTN_SMOKE=1``).
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter

from kernattn import KernelSmoother, LinearAttentionRegressor

parser = argparse.ArgumentParser(description="Exact and linear attention as n grows.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
parser.add_argument("--scheduler", default=None, help="address of a dask scheduler")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"

D = 8
SIZES = [2_000, 10_000, 50_000] if SMOKE else [10_000, 100_000, 1_000_000, 2_000_000]
if args.scheduler is not None and not SMOKE:
    SIZES.append(10_000_000)
N_TEST = 2_000 if SMOKE else 20_000
N_EXACT = 100 if SMOKE else 200
PARTITION = 250_000
# Leave-one-out bandwidths of this task on 2 000 rows (KernelSmoother(bandwidth="loo")).
BANDWIDTH = np.array([0.32, 0.36, 0.44, 500.0, 500.0, 2.3, 500.0, 500.0])
MODELS = {
    "exact (KernelSmoother)": KernelSmoother(bandwidth=BANDWIDTH),
    "Nyström, r = 64": LinearAttentionRegressor(
        feature_map="nystroem", n_components=64, n_near_keys=0, bandwidth=BANDWIDTH, random_state=0
    ),
    "positive random features, r = 64": LinearAttentionRegressor(
        feature_map="positive", n_components=64, bandwidth=BANDWIDTH, random_state=0
    ),
}


def target(X):
    return np.sin(0.7 * X[:, 0] + 0.5 * X[:, 1]) + 0.25 * X[:, 2] ** 2 / (1 + 0.25 * X[:, 2] ** 2)


def make_rows(seed, n):
    """(n, 10): the inputs, the noisy target and the noise-free one."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    f = target(X)
    return np.column_stack([X, f + 0.5 * rng.standard_normal(n), f])


def local_rows(n, first_seed):
    sizes = [min(PARTITION, n - s) for s in range(0, n, PARTITION)]
    return np.vstack([make_rows(first_seed + i, size) for i, size in enumerate(sizes)])


# %%
# Where the work runs: this process, or the workers of a cluster.
client = None
if args.scheduler is not None:
    import dask.array as da
    from distributed import Client

    client = Client(args.scheduler)
    client.run(lambda: __import__("kernattn.linear"))  # imports are not part of the times
    print(f"cluster: {len(client.scheduler_info()['workers'])} workers at {args.scheduler}")

    def cluster_rows(n, first_seed):
        """The same rows as local_rows, generated in partitions on the workers."""
        sizes = [min(PARTITION, n - s) for s in range(0, n, PARTITION)]

        def block(seeds, block_info=None):
            return make_rows(int(seeds[0]), sizes[block_info[None]["chunk-location"][0]])

        seeds = da.from_array(first_seed + np.arange(len(sizes)), chunks=1)
        return da.map_blocks(
            block, seeds, chunks=(tuple(sizes), (D + 2,)), new_axis=1, dtype=float
        )


test = local_rows(N_TEST, first_seed=10**6)
X_test, f_test = test[:, :D], test[:, D + 1]
exact_rows = slice(0, N_EXACT)


def fit_predict(model, n, rows):
    """Seconds to fit the n training rows and predict N_TEST queries (the exact model
    predicts N_EXACT, its prediction time scaled), and the predictions of the first
    N_EXACT queries."""
    exact = isinstance(model, KernelSmoother)
    queries = X_test[exact_rows] if exact else X_test
    if exact and client is not None and n > 2_000_000:
        return None, None  # the exact smoother would gather 10 million rows here
    with warnings.catch_warnings():
        # Queries far from every landmark are computed exactly (and counted in the time).
        warnings.simplefilter("ignore", UserWarning)
        start = time.perf_counter()
        if client is None:
            model.fit(rows[:, :D], rows[:, D])
        elif exact:
            # The exact smoother keeps its training set: it is gathered here, and sent to
            # the workers once with the model.
            table = rows.compute()
            model.fit(table[:, :D], table[:, D])
        else:
            model.fit(rows[:, :D], rows[:, D])
        fitted = time.perf_counter()
        if client is None:
            prediction = model.predict(queries)
        else:
            prediction = model.predict(da.from_array(queries, chunks=PARTITION // 10)).compute()
    predict_seconds = time.perf_counter() - fitted
    if exact:
        predict_seconds *= N_TEST / N_EXACT
    return fitted - start + predict_seconds, prediction[exact_rows]


# %%
# Run every model at every size.
seconds = {name: [] for name in MODELS}
errors = {name: [] for name in MODELS}
print(f"{'n':>10}  " + "  ".join(f"{name:>34}" for name in MODELS))
for n in SIZES:
    cells = []
    # The rows, generated once per size (here, or on the workers: a lazy dask array).
    rows = local_rows(n, first_seed=0) if client is None else cluster_rows(n, first_seed=0)
    for name, model in MODELS.items():
        time_taken, prediction = fit_predict(model, n, rows)
        if time_taken is None:
            seconds[name].append(np.nan)
            errors[name].append(np.nan)
            cells.append(f"{'(not run)':>34}")
            continue
        error = float(np.mean((prediction - f_test[exact_rows]) ** 2))
        seconds[name].append(time_taken)
        errors[name].append(error)
        cells.append(f"{time_taken:>9.2f} s{'*' if 'exact' in name else ' '}  MSE {error:.4f}")
        cells[-1] = f"{cells[-1]:>34}"
    print(f"{n:>10,}  " + "  ".join(cells))
print(
    f"* fit, and predict of {N_EXACT} queries scaled to {N_TEST}; MSE against the noise-free "
    f"target on those {N_EXACT} queries for all three"
)
exact_name, nystroem_name = list(MODELS)[:2]
ratio = np.array(seconds[exact_name]) / np.array(seconds[nystroem_name])
print("speed-up of Nyström over exact:", "  ".join(f"{r:.1f}x" for r in ratio))

# %%
# The figure.
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=110)
markers = ["o", "s", "^"]
for name, marker in zip(MODELS, markers, strict=True):
    left.loglog(SIZES, seconds[name], marker + "-", label=name)
    right.semilogx(SIZES, errors[name], marker + "-", label=name)
left.set_xlabel("training rows n")
left.set_ylabel(f"fit + predict {N_TEST:,} queries (s)")
left.set_title("Time" + (" (on the cluster)" if client is not None else ""))
right.set_xlabel("training rows n")
right.set_ylabel("MSE against the noise-free target")
right.set_yscale("log")
right.set_title("Accuracy")
fig.legend(*left.get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=9)
for axis in (left, right):
    axis.tick_params(labelsize=9)
    axis.xaxis.set_minor_formatter(NullFormatter())
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.grid(True, which="both", alpha=0.3)
fig.tight_layout(rect=(0, 0.07, 1, 1))
fig.savefig(os.path.join(args.out, "07_scaling_to_millions.png"))
print("wrote", os.path.join(args.out, "07_scaling_to_millions.png"))
if client is not None:
    client.close()
