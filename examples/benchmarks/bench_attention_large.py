"""Benchmark: ``AttentionRegressor`` at large n, at default settings.

The question: above ``kernattn.learned._regressor.LARGE_N`` distinct training inputs the
default fit switches to Adam over mini-batches of queries, each attending to a random
subsample of keys (a cost linear in n). Is that fit affordable, and does it use the data
well? Three figures, measured in the same run on ``make_large`` (d = 8, noise 0.1; 50 000
training rows and 5 000 test rows):

- the reference time: one exact ``KernelSmoother().fit(X, y).predict(X)`` of the 50 000
  training rows against themselves (O(n²));
- the default fit on all 50 000 rows (with its ``verbose`` progress lines): time as a
  multiple of the reference (target: at most 20×) and test MSE;
- the default fit on a 5 000-row subsample (exact L-BFGS): test MSE (target: the large fit
  is better).

Run from the repository root: ``PYTHONPATH=. python examples/benchmarks/bench_attention_large.py``
(``KERNATTN_SMOKE=1``: 12 000 and 1 200 rows).
"""

# %%
import os
import time

import numpy as np

from kernattn import AttentionRegressor, KernelSmoother
from kernattn.datasets import make_large

SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"
N_TRAIN = 12_000 if SMOKE else 50_000
N_SUBSAMPLE = 1_200 if SMOKE else 5_000
N_TEST = 5_000


def test_mse(model, X, y):
    return float(np.mean((model.predict(X) - y) ** 2))


# %%
def main():
    X, y, description = make_large(N_TRAIN + N_TEST, n_features=8, random_state=0)
    X_train, y_train, X_test, y_test = X[:N_TRAIN], y[:N_TRAIN], X[N_TRAIN:], y[N_TRAIN:]
    print(description.replace(f"n={N_TRAIN + N_TEST}", f"{N_TRAIN} train, {N_TEST} test"))

    start = time.perf_counter()
    KernelSmoother().fit(X_train, y_train).predict(X_train)
    reference = time.perf_counter() - start
    print(f"reference: KernelSmoother().fit(X, y).predict(X), n={N_TRAIN}: {reference:.1f} s")

    start = time.perf_counter()
    small = AttentionRegressor(random_state=0).fit(X_train[:N_SUBSAMPLE], y_train[:N_SUBSAMPLE])
    small_time = time.perf_counter() - start

    start = time.perf_counter()
    large = AttentionRegressor(random_state=0, verbose=1).fit(X_train, y_train)
    large_time = time.perf_counter() - start

    print()
    print(f"{'fit':<40}{'time (s)':>10}{'/ reference':>13}{'epochs/iter':>13}{'test MSE':>10}")
    rows = [
        (f"default, {N_SUBSAMPLE} rows (L-BFGS)", small_time, small),
        (f"default, {N_TRAIN} rows (Adam, key subsample)", large_time, large),
    ]
    for label, seconds, model in rows:
        print(
            f"{label:<40}{seconds:>10.1f}{seconds / reference:>13.1f}{model.n_iter_:>13d}"
            f"{test_mse(model, X_test, y_test):>10.4f}"
        )
    print(f"noise variance (the best test MSE): {0.1**2:.4f}")


if __name__ == "__main__":
    main()
