"""Benchmark: size and power of the bootstrap significance test
(``kernattn.smoother._significance``).

Simulated data, n = 100 rows, x uniform on [−1, 1]², ``y = sin(2x₀) + 0.5·noise`` (x₁
does not matter), or ``y = sin(2x₀) + 0.25·x₁ + 0.5·noise`` for the weak alternative. For
each configuration (degree, bandwidth setting, bootstrap method) the test is run on many
independent data sets and the table gives the rejection rate at α = 0.05 and 0.10 with its
binomial standard error √(r(1 − r)/R):

- **size**: testing x₁ when it does not matter (R = 500 data sets): the rate should be near
  α, within about two standard errors;
- **power**: testing x₀ (strong effect) and x₁ under the weak alternative (R = 200).

The bootstrap uses n_bootstrap = 99 replicates (p-values are multiples of 1/100) to keep
the run to a few minutes on two cores; the test's default is 399. Two bandwidth settings:
Scott's rule (the smoother's default; it does not depend on ``y``) and ``"loo"`` (selected
on the same data). The test holds the bandwidths at their fitted values (np's
"Bootstrap I"); with ``"loo"`` the selection adapts the bandwidth of the tested feature to
the noise, and the size is expected above α.

Run: ``python examples/benchmarks/bench_significance.py`` (``--quick`` for R = 100/50,
``--n-jobs`` for the worker processes, default 2).
"""

import argparse
import time
import warnings

import numpy as np
from joblib import Parallel, delayed

from kernattn import KernelSmoother
from kernattn.smoother._significance import significance_test

N_ROWS = 100
N_BOOTSTRAP = 99
ALPHAS = (0.05, 0.10)


def simulate(seed, weak=False):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(N_ROWS, 2))
    y = np.sin(2 * X[:, 0]) + 0.5 * rng.normal(size=N_ROWS)
    if weak:
        y += 0.25 * X[:, 1]
    return X, y


def one_pvalue(seed, degree, bandwidth, method, feature, weak):
    X, y = simulate(seed, weak)
    smoother = KernelSmoother(bandwidth=bandwidth, degree=degree, n_jobs=1)
    with warnings.catch_warnings():
        # An edge of the bandwidth search (an irrelevant feature smoothed away) is expected.
        warnings.simplefilter("ignore", UserWarning)
        result = significance_test(
            smoother, X, y, feature, n_bootstrap=N_BOOTSTRAP, method=method, random_state=seed
        )
    return result.pvalue


def rejection_rates(pvalues):
    pvalues = np.asarray(pvalues)
    rates = [np.mean(pvalues <= alpha) for alpha in ALPHAS]
    errors = [np.sqrt(r * (1 - r) / len(pvalues)) for r in rates]
    return rates, errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="R = 100 (size), 50 (power)")
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args()
    n_size, n_power = (100, 50) if args.quick else (500, 200)
    configurations = [
        (degree, bandwidth, method)
        for degree in (0, 1)
        for bandwidth in ("scott", "loo")
        for method in ("wild", "iid")
    ]
    studies = [
        ("size: x1 irrelevant", 1, False, n_size),
        ("power: x0 (strong)", 0, False, n_power),
        ("power: x1 weak (0.25 x1)", 1, True, n_power),
    ]
    print(f"n = {N_ROWS}, n_bootstrap = {N_BOOTSTRAP}; rejection rate ± binomial standard error")
    header = f"{'study':<26}{'degree':>7}{'bandwidth':>10}{'method':>7}{'R':>6}"
    header += "".join(f"{'α = ' + format(a, '.2f'):>18}" for a in ALPHAS) + f"{'time':>8}"
    print(header)
    with Parallel(n_jobs=args.n_jobs) as parallel:
        for name, feature, weak, repeats in studies:
            for degree, bandwidth, method in configurations:
                start = time.perf_counter()
                pvalues = parallel(
                    delayed(one_pvalue)(seed, degree, bandwidth, method, feature, weak)
                    for seed in range(repeats)
                )
                elapsed = time.perf_counter() - start
                rates, errors = rejection_rates(pvalues)
                cells = "".join(
                    f"{rate:>11.3f} ± {error:.3f}"
                    for rate, error in zip(rates, errors, strict=True)
                )
                print(
                    f"{name:<26}{degree:>7}{bandwidth:>10}{method:>7}{repeats:>6}{cells}"
                    f"{elapsed:>7.0f}s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
