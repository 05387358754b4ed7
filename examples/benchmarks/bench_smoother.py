"""Benchmark: KernelSmoother prediction throughput, memory, and leave-one-out bandwidth time.

Prints three tables, every figure measured in this run:

1. prediction throughput (kernel evaluations per second: n_queries × n_train / time) of
   ``KernelSmoother.predict`` in float64 and float32, on one thread and on all cores, against
   a naive dense numpy implementation (the whole n_queries × n_train kernel matrix at once),
   and against the machine's ``np.exp`` throughput on one core in the same precision, the
   cost of the one transcendental call each evaluation needs; then the same for the exact
   path of each estimator (the learned kernel's dot-product heads, and the exact rows of the
   linear estimator, which go through the same engine);
2. peak memory allocated while predicting (``tracemalloc``, which sees numpy's buffers) for a
   growing number of queries: it stays flat, bounded by scikit-learn's ``working_memory``;
3. time and reached leave-one-out error of ``bandwidth="loo"`` on
   ``y = sin(2πx₀) + 0.5·x₁ + noise``, x uniform on [−1, 1]², against the best single
   common multiple of Scott's bandwidths (the per-feature search should reach a lower error);
4. ``bandwidth="loo"`` on large training sets (n = 50 000 and 100 000, d = 4, searched on
   growing random subsets of the queries against all keys): its time against one exact
   prediction of the training rows against themselves (target at 50 000: at most 3×; at
   100 000: seconds, not hours), and its test MSE against the best common multiple of
   Scott's bandwidths chosen by a grid on the test set itself (target: within 2 %);
5. the cost of a local polynomial against the local constant: ``predict`` of 401 grid
   points in one dimension against n = 10⁴, 10⁵ and 10⁶ training rows at a fixed bandwidth
   (0.003 of the unit interval), on the exact tier (``algorithm="exact"``), for ``degree``
   0 to 3 (best of three runs), and the ratio of each degree's time to ``degree=0``'s
   (target for ``degree=1``: at most 2 at every n;
   the polynomial's moments, and those of its squared weights, are summed in the same pass
   over the keys as the kernel average's);
6. against statsmodels ``KernelReg(bw="cv_ls")``, local constant and local linear, at
   n = 200, 400, 800 (statsmodels' own test design ``y = 0.3 + 1.2·x₁ + 3.7·x₂ + noise``):
   time and the leave-one-out error each bandwidth reaches, both evaluated by kernattn's
   exact criterion (target: at least 50× faster at an equal or lower error). statsmodels
   is optional: without it the table is skipped with a message.

Run: ``python examples/benchmarks/bench_smoother.py`` (``--quick`` for smaller sizes,
``--degrees`` for table 5 alone).
"""

import argparse
import time
import tracemalloc

import numpy as np
from scipy.spatial.distance import cdist
from threadpoolctl import threadpool_limits

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor
from kernattn._core.blocks import map_query_blocks
from kernattn._engine.regressor import KEY_TILE
from kernattn.bandwidth import rule_of_thumb_bandwidth
from kernattn.bandwidth._criterion import Criterion
from kernattn.bandwidth._search import LOO_GRID


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


def exp_throughput(dtype=np.float64):
    """np.exp evaluations per second on one core, on arguments like shifted logits."""
    x = -np.random.default_rng(0).uniform(0, 50, size=2**18).astype(dtype)
    out = np.empty_like(x)
    with threadpool_limits(1):
        return x.size * 20 / best_time(lambda: [np.exp(x, out=out) for _ in range(20)])


def naive_predict(X, y, queries, h):
    weights = np.exp(-0.5 * cdist(queries / h, X / h, "sqeuclidean"))
    return weights @ y / weights.sum(axis=1)


def throughput_table(sizes, n_queries, rng):
    limits = {np.float64: exp_throughput(np.float64), np.float32: exp_throughput(np.float32)}
    print(
        f"np.exp throughput (one core): float64 {limits[np.float64] / 1e9:.3f} G/s, "
        f"float32 {limits[np.float32] / 1e9:.3f} G/s"
    )
    print("KernelSmoother.predict, Gaussian kernel, d = 2, G kernel evaluations per second;")
    print("'vs exp' = throughput / np.exp on one core, same precision")
    print()
    header = (
        f"{'n_train':>8} {'dtype':>8} {'1 thread':>9} {'vs exp':>7} {'all cores':>10} "
        f"{'vs exp':>7} {'naive':>7} {'vs naive':>9}"
    )
    print(header)
    print("-" * len(header))
    queries = rng.uniform(-1, 1, size=(n_queries, 2))
    for n in sizes:
        X, y = task(n, rng)
        naive = n_queries * n / best_time(lambda: naive_predict(X, y, queries, 0.1), 2)  # noqa: B023
        reference = naive_predict(X, y, queries, 0.1)
        for dtype in (np.float64, np.float32):
            model = KernelSmoother(bandwidth=0.1).fit(X.astype(dtype), y)
            q = queries.astype(dtype)
            one = evaluations_per_second(model, q, n, n_jobs=1)
            every = evaluations_per_second(model, q, n, n_jobs=None)
            prediction = model.predict(q)
            assert prediction.dtype == dtype
            tolerance = 1e-10 if dtype == np.float64 else 1e-5
            np.testing.assert_allclose(prediction, reference, rtol=tolerance, atol=tolerance)
            limit = limits[dtype]
            print(
                f"{n:>8} {np.dtype(dtype).name:>8} {one / 1e9:>9.3f} {one / limit:>6.0%} "
                f"{every / 1e9:>10.3f} {every / limit:>6.0%} {naive / 1e9:>7.3f} "
                f"{every / naive:>8.1f}x"
            )
    return limits


def evaluations_per_second(model, queries, n_train, n_jobs):
    model.set_params(n_jobs=n_jobs)
    return len(queries) * n_train / best_time(lambda: model.predict(queries))


def exact_paths_table(n, n_queries, limits, rng):
    """The exact path of every estimator, d = 2, float64 and float32."""
    print(f"the exact path of each estimator, n_train = {n}, {n_queries} queries")
    header = (
        f"{'estimator':>36} {'dtype':>8} {'1 thread':>9} {'vs exp':>7} "
        f"{'all cores':>10} {'vs exp':>7}"
    )
    print(header)
    print("-" * len(header))
    X, y = task(n, rng)
    queries = rng.uniform(-1, 1, size=(n_queries, 2))
    for dtype in (np.float64, np.float32):
        Xd, q = X.astype(dtype), queries.astype(dtype)
        smoother = KernelSmoother(bandwidth=0.1).fit(Xd, y)
        # max_iter=0: the kernel at its initial projections (the cost does not depend on
        # them); the plain softmax heads (no tilt, no warp): the exact path itself.
        attention = AttentionRegressor(max_iter=0, tilt=False, warp=0, random_state=0)
        attention.fit(Xd, y)
        linear = LinearAttentionRegressor(bandwidth=0.1, random_state=0).fit(Xd, y)

        def linear_exact_rows(q=q, linear=linear):
            # The rows the linear estimator cannot approximate go through the exact kernel
            # sums of the heads it approximates (the one reduction); here every query does,
            # in the engine's blocks and threads.
            exact = linear.kernel_.exact_heads
            sums = np.empty((len(q), 3), dtype=q.dtype)

            def rows(block):
                sums[block] = exact.sums(q[block], 0, linear._value_columns)

            map_query_blocks(rows, len(q), exact.n_keys, n_jobs=linear.n_jobs, key_tile=KEY_TILE)
            return sums

        runs = {
            "KernelSmoother.predict": (smoother, lambda: smoother.predict(q)),  # noqa: B023
            "AttentionRegressor.predict": (attention, lambda: attention.predict(q)),  # noqa: B023
            "LinearAttentionRegressor exact rows": (linear, linear_exact_rows),
        }
        for name, (model, run) in runs.items():
            rates = []
            for n_jobs in (1, None):
                model.set_params(n_jobs=n_jobs)
                rates.append(n_queries * n / best_time(run))
            print(
                f"{name:>36} {np.dtype(dtype).name:>8} {rates[0] / 1e9:>9.3f} "
                f"{rates[0] / limits[dtype]:>6.0%} {rates[1] / 1e9:>10.3f} "
                f"{rates[1] / limits[dtype]:>6.0%}"
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
        objective = Criterion(X, y[:, None], np.ones(n), "gaussian")
        fine_grid = np.geomspace(LOO_GRID[0], LOO_GRID[-1], 100)
        common = objective.grid_losses(rule_of_thumb_bandwidth(X), fine_grid).min()
        h0, h1 = model.bandwidth_
        print(
            f"{n:>6} {seconds:>7.3f} {model.loo_error_:>9.5f} {common:>18.5f} "
            f"{h0:>7.4f} {h1:>7.4f}"
        )


def large_task(n, rng):
    """d = 4: two smooth effects, one linear, one irrelevant feature."""
    X = rng.uniform(-1, 1, size=(n, 4))
    y = np.sin(2 * np.pi * X[:, 0]) + 0.5 * X[:, 1] + X[:, 2] ** 2 + 0.3 * rng.normal(size=n)
    return X, y


def large_loo_table(n, n_test, rng):
    X, y = large_task(n, rng)
    X_test, y_test = large_task(n_test, rng)
    scott = rule_of_thumb_bandwidth(X)
    print(f"bandwidth='loo' at n = {n}, d = 4 (random subsets of the queries, all keys)")
    reference = KernelSmoother(bandwidth=scott).fit(X, y)
    start = time.perf_counter()
    reference.predict(X)
    predict_seconds = time.perf_counter() - start
    start = time.perf_counter()
    model = KernelSmoother(bandwidth="loo", random_state=0).fit(X, y)
    search_seconds = time.perf_counter() - start
    mse = np.mean((model.predict(X_test) - y_test) ** 2)
    factors = np.geomspace(0.1, 2.0, 14)
    grid = [
        np.mean((KernelSmoother(bandwidth=c * scott).fit(X, y).predict(X_test) - y_test) ** 2)
        for c in factors
    ]
    best = int(np.argmin(grid))
    print(f"  {'one exact prediction of the training rows:':<44}{predict_seconds:8.2f} s")
    target = " (target <= 3x)" if n <= 50_000 else ""
    print(
        f"  {'bandwidth search:':<44}{search_seconds:8.2f} s "
        f"= {search_seconds / predict_seconds:.2f}x the prediction{target}"
    )
    print(f"  bandwidths: {np.array2string(model.bandwidth_, precision=4)}")
    print(
        f"  test MSE ({n_test} rows): search {mse:.5f}; best common factor of Scott "
        f"({factors[best]:.3f}, grid on the test set) {grid[best]:.5f}; "
        f"ratio {mse / grid[best]:.4f} (target <= 1.02)"
    )


def degree_cost_table(sizes, n_queries=401, bandwidth=0.003, degrees=(0, 1, 2, 3)):
    """Prediction time of ``degree`` 0 to 3 at a fixed bandwidth, one input, and the ratio
    to the local constant's, in one run."""
    print(
        f"local polynomials against the local constant: predict {n_queries} grid points, "
        f"1-D, h = {bandwidth}, best of 3 (seconds; ratio to degree 0)"
    )
    print(f"{'n':>10} " + " ".join(f"{'degree ' + str(p):>16}" for p in degrees))
    grid = np.linspace(0, 1, n_queries)[:, None]
    for n in sizes:
        rng = np.random.default_rng(n)
        X = rng.uniform(0, 1, size=(n, 1))
        y = np.sin(2 * np.pi * X[:, 0]) + 0.3 * rng.normal(size=n)
        times = {}
        for p in degrees:
            # The exact tier (one input from 10 000 rows would be binned by default).
            model = KernelSmoother(bandwidth=bandwidth, degree=p, algorithm="exact").fit(X, y)
            times[p] = best_time(lambda model=model: model.predict(grid), repeat=3)
        cells = [f"{times[p]:7.3f} ({times[p] / times[degrees[0]]:4.2f}x)" for p in degrees]
        print(f"{n:>10} " + " ".join(f"{c:>16}" for c in cells))


def statsmodels_design(n, rng):
    """statsmodels' kernel-regression test design, two continuous regressors."""
    c1 = rng.normal(size=n)
    c2 = rng.normal(10, 1, size=n)
    return np.column_stack([c1, c2]), 0.3 + 1.2 * c1 + 3.7 * c2 + rng.normal(size=n)


def statsmodels_table(sizes, rng):
    try:
        import warnings

        from statsmodels.nonparametric.kernel_regression import KernelReg
    except ImportError:
        print("statsmodels is not installed: the KernelReg comparison is skipped.")
        return
    print("bandwidth='loo' against statsmodels KernelReg(bw='cv_ls'), Gaussian kernel;")
    print("LOO MSE: the exact leave-one-out error of each bandwidth, computed the same way")
    header = (
        f"{'n':>5} {'degree':>6} {'statsmodels s':>14} {'kernattn s':>11} {'speed-up':>9} "
        f"{'LOO statsmodels':>16} {'LOO kernattn':>13} {'ratio':>9}"
    )
    print(header)
    print("-" * len(header))
    for n in sizes:
        X, y = statsmodels_design(n, rng)
        for degree, reg_type in ((0, "lc"), (1, "ll")):
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reference = KernelReg(
                    endog=[y],
                    exog=[X[:, 0], X[:, 1]],
                    reg_type=reg_type,
                    var_type="cc",
                    bw="cv_ls",
                )
            reference_seconds = time.perf_counter() - start
            seconds = best_time(
                lambda: KernelSmoother(bandwidth="loo", degree=degree).fit(X, y),  # noqa: B023
                3,
            )
            model = KernelSmoother(bandwidth="loo", degree=degree).fit(X, y)
            objective = Criterion(X, y[:, None], np.ones(n), "gaussian", degree)
            theirs = objective.loss_and_grad(np.log(np.asarray(reference.bw)))[0]
            ours = model.loo_error_
            print(
                f"{n:>5} {degree:>6} {reference_seconds:>14.2f} {seconds:>11.4f} "
                f"{reference_seconds / seconds:>8.0f}x {theirs:>16.5f} {ours:>13.5f} "
                f"{ours / theirs:>9.6f}"
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument(
        "--degrees", action="store_true", help="only the local polynomials' cost (table 5)"
    )
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    if args.degrees:
        degree_cost_table([10_000, 100_000, 1_000_000])
        return
    if args.quick:
        limits = throughput_table([2_000, 5_000], 1_000, rng)
        print()
        exact_paths_table(5_000, 1_000, limits, rng)
        print()
        memory_table(5_000, [1_000, 5_000], rng)
        print()
        loo_table([800], rng)
        print()
        large_loo_table(10_000, 2_000, rng)
        print()
        degree_cost_table([10_000, 100_000])
        print()
        statsmodels_table([200], rng)
        return
    limits = throughput_table([2_000, 5_000, 20_000, 50_000], 2_000, rng)
    print()
    exact_paths_table(20_000, 2_000, limits, rng)
    print()
    memory_table(20_000, [2_000, 20_000], rng)
    print()
    loo_table([800, 2_000, 5_000], rng)
    print()
    large_loo_table(50_000, 5_000, rng)
    print()
    large_loo_table(100_000, 5_000, rng)
    print()
    degree_cost_table([10_000, 100_000, 1_000_000])
    print()
    statsmodels_table([200, 400, 800], rng)


if __name__ == "__main__":
    main()
