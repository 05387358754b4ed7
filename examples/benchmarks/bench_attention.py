"""Benchmark: the learned attention kernel against tuned smoothers, neighbors and kernel ridge.

The question: does learning the attention kernel (projections and head mixture, by
leave-one-out) beat a kernel smoother with per-feature leave-one-out bandwidths and a
k-nearest-neighbors regressor tuned by cross-validation? Kernel ridge regression (tuned the
same way) is the strong smooth baseline. Two tasks: Friedman #1 (10 features, 5 of them
noise; 2 000 samples, noise 1.0, so the best test MSE is about 1) and scikit-learn's diabetes
data (442 samples, 10 features), both split 75/25 with ``random_state=0``.

Printed per model: fit time, time of one leave-one-out gradient evaluation (learned models
only) and test MSE. Timings depend on the machine; compare the ratios in one run.

Run with kernattn importable, e.g. from the repository root:
``PYTHONPATH=. python examples/benchmarks/bench_attention.py``.
"""

# %%
import time
import warnings

import numpy as np
from sklearn.datasets import load_diabetes, make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from kernattn import AttentionRegressor, KernelSmoother
from kernattn._loo import DuplicateGroups
from kernattn.learned._objective import Layout, LeaveOneOutObjective


def tuned_knn():
    grid = {
        "kneighborsregressor__n_neighbors": [1, 2, 3, 5, 7, 10, 15, 20, 30, 50],
        "kneighborsregressor__weights": ["uniform", "distance"],
    }
    return GridSearchCV(make_pipeline(StandardScaler(), KNeighborsRegressor()), grid, cv=5)


def tuned_kernel_ridge():
    grid = {
        "kernelridge__alpha": [1e-3, 1e-2, 1e-1, 1.0],
        "kernelridge__gamma": [0.01, 0.03, 0.1, 0.3],
    }
    return GridSearchCV(make_pipeline(StandardScaler(), KernelRidge(kernel="rbf")), grid, cv=3)


MODELS = {
    "KernelSmoother(bandwidth='loo')": lambda: KernelSmoother(bandwidth="loo"),
    "KNeighborsRegressor (GridSearchCV)": tuned_knn,
    "KernelRidge rbf (GridSearchCV)": tuned_kernel_ridge,
    "AttentionRegressor() [default]": lambda: AttentionRegressor(random_state=0),
    "AttentionRegressor(gaussian, tie_qk)": lambda: AttentionRegressor(
        similarity="gaussian", tie_qk=True, random_state=0
    ),
    "AttentionRegressor(n_heads=3)": lambda: AttentionRegressor(n_heads=3, random_state=0),
}


def gradient_time(model, X, y, repeats=3):
    """Seconds per evaluation of the leave-one-out loss and gradient at the fitted kernel."""
    Z = (X - model.center_) / model.input_scale_
    Y = y.reshape(len(y), -1) - y.mean()
    H, d, head_dim = model.query_projection_.shape
    layout = Layout(H, d, head_dim, Y.shape[1], model.tie_qk, model.scale == "learned")
    objective = LeaveOneOutObjective(
        Z,
        Y,
        np.ones(len(X)),
        DuplicateGroups(X),
        layout,
        model.similarity,
        model.scale_,
        model.alpha,
        n_jobs=model.n_jobs,
    )
    theta = layout.pack(
        model.query_projection_,
        model.key_projection_,
        np.log(model.scale_),
        model.head_weights_,
        np.zeros(Y.shape[1]),
    )
    objective.loss_and_grad(theta)  # warm-up: the scratch memory is allocated once
    start = time.perf_counter()
    for _ in range(repeats):
        objective.loss_and_grad(theta)
    return (time.perf_counter() - start) / repeats


def run(name, X, y):
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
    print(f"\n{name}: {len(X_train)} training / {len(X_test)} test samples, {X.shape[1]} features")
    print(f"{'model':40s} {'fit [s]':>8s} {'grad [s]':>9s} {'iters':>6s} {'test MSE':>10s}")
    results = {}
    for label, make in MODELS.items():
        model = make()
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", UserWarning)
            model.fit(X_train, y_train)
        fit_time = time.perf_counter() - start
        mse = float(np.mean((model.predict(X_test) - y_test) ** 2))
        grad = (
            f"{gradient_time(model, X_train, y_train):9.3f}"
            if hasattr(model, "n_iter_")
            else " " * 9
        )
        iters = f"{model.n_iter_:6d}" if hasattr(model, "n_iter_") else " " * 6
        print(f"{label:40s} {fit_time:8.2f} {grad} {iters} {mse:10.3f}")
        results[label] = mse
    default = results["AttentionRegressor() [default]"]
    for label in ("KernelSmoother(bandwidth='loo')", "KNeighborsRegressor (GridSearchCV)"):
        print(
            f"default AttentionRegressor / {label}: test MSE ratio {default / results[label]:.3f}"
        )
    return results


# %%
if __name__ == "__main__":
    X, y = make_friedman1(n_samples=2000, noise=1.0, random_state=0)
    model = AttentionRegressor(max_iter=0).fit(X, y)
    print(f"one gradient evaluation at n=2000, d=10: {gradient_time(model, X, y):.3f} s")
    run("make_friedman1", X, y)
    X, y = load_diabetes(return_X_y=True)
    run("diabetes", X, y)
