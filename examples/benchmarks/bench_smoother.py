"""Benchmark: KernelSmoother prediction throughput, memory, and leave-one-out bandwidth time.

Prints three tables, every figure measured in this run:

1. prediction throughput (kernel evaluations per second: n_queries × n_train / time) of
   ``KernelSmoother.predict`` against a naive dense numpy implementation (the whole
   n_queries × n_train kernel matrix at once), and against the machine's ``np.exp``
   throughput on one core, the cost of the one transcendental call each evaluation needs;
2. peak memory allocated while predicting (``tracemalloc``, which sees numpy's buffers) for a
   growing number of queries: it stays flat, bounded by scikit-learn's ``working_memory``;
3. time and reached leave-one-out error of ``bandwidth="loo"`` on
   ``y = sin(2πx₀) + 0.5·x₁ + noise``, x uniform on [−1, 1]², against the best single
   common multiple of Scott's bandwidths (the per-feature search should reach a lower error).

Run: ``python examples/benchmarks/bench_smoother.py`` (``--quick`` for smaller sizes).
"""

import argparse
import time
import tracemalloc

import numpy as np
from scipy.spatial.distance import cdist

from kernattn import KernelSmoother
from kernattn.bandwidth import _LOO_GRID, _LeaveOneOut, rule_of_thumb_bandwidth


def task(n, rng):
    X = rng.uniform(-1, 1, size=(n, 2))
    y = np.sin(2 * np.pi * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def best_time(function, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def exp_throughput():
    """np.exp evaluations per second on one core, on arguments like shifted logits."""
    x = -np.random.default_rng(0).uniform(0, 50, size=2**18)
    out = np.empty_like(x)
    return x.size * 20 / best_time(lambda: [np.exp(x, out=out) for _ in range(20)])


def naive_predict(X, y, queries, h):
    weights = np.exp(-0.5 * cdist(queries / h, X / h, "sqeuclidean"))
    return weights @ y / weights.sum(axis=1)


def throughput_table(sizes, n_queries, rng):
    limit = exp_throughput()
    print(f"np.exp throughput (one core): {limit / 1e9:.3f} G/s")
    print()
    header = f"{'n_train':>8} {'kattn G/s':>10} {'naive G/s':>10} {'vs naive':>9} {'vs exp':>7}"
    print(header)
    print("-" * len(header))
    queries = rng.uniform(-1, 1, size=(n_queries, 2))
    for n in sizes:
        X, y = task(n, rng)
        model = KernelSmoother(bandwidth=0.1).fit(X, y)
        fast = n_queries * n / best_time(lambda: model.predict(queries))  # noqa: B023
        naive = n_queries * n / best_time(lambda: naive_predict(X, y, queries, 0.1), 2)  # noqa: B023
        np.testing.assert_allclose(model.predict(queries), naive_predict(X, y, queries, 0.1))
        print(
            f"{n:>8} {fast / 1e9:>10.3f} {naive / 1e9:>10.3f} {fast / naive:>8.1f}x "
            f"{fast / limit:>6.0%}"
        )


def memory_table(n_train, query_counts, rng):
    X, y = task(n_train, rng)
    model = KernelSmoother(bandwidth=0.1).fit(X, y)
    print(f"peak memory allocated by predict, n_train = {n_train}")
    print(f"{'n_queries':>10} {'peak MB':>8} {'output MB':>10}")
    for m in query_counts:
        queries = rng.uniform(-1, 1, size=(m, 2))
        tracemalloc.start()
        model.predict(queries)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"{m:>10} {peak / 1e6:>8.1f} {m * 8 / 1e6:>10.2f}")


def loo_table(sizes, rng):
    print("bandwidth='loo' on y = sin(2πx₀) + 0.5·x₁ + noise")
    header = f"{'n':>6} {'time s':>7} {'LOO MSE':>9} {'common-factor MSE':>18} {'h₀':>7} {'h₁':>7}"
    print(header)
    print("-" * len(header))
    for n in sizes:
        X, y = task(n, rng)
        seconds = best_time(lambda: KernelSmoother(bandwidth="loo").fit(X, y))  # noqa: B023
        model = KernelSmoother(bandwidth="loo").fit(X, y)
        objective = _LeaveOneOut(X, y[:, None], np.ones(n), "gaussian")
        fine_grid = np.geomspace(_LOO_GRID[0], _LOO_GRID[-1], 100)
        common = objective.grid_losses(rule_of_thumb_bandwidth(X), fine_grid).min()
        h0, h1 = model.bandwidth_
        print(
            f"{n:>6} {seconds:>7.3f} {model.loo_error_:>9.5f} {common:>18.5f} "
            f"{h0:>7.4f} {h1:>7.4f}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    if args.quick:
        throughput_table([2_000, 5_000], 1_000, rng)
        print()
        memory_table(5_000, [1_000, 5_000], rng)
        print()
        loo_table([800], rng)
        return
    throughput_table([2_000, 5_000, 20_000, 50_000], 2_000, rng)
    print()
    memory_table(20_000, [2_000, 20_000], rng)
    print()
    loo_table([800, 2_000, 5_000], rng)


if __name__ == "__main__":
    main()
