"""A learned kernel needs leave-one-out: without it, it collapses
================================================================

**The claim.** A Nadaraya–Watson smoother whose kernel is learned by minimising the squared
error on the training set itself (resubstitution: each training point is among the keys
its own prediction attends to) has a trivial optimum — a kernel so narrow that every
training point attends only to itself. The training loss goes to 0 and the estimator
becomes a nearest-neighbour interpolator of the noise: the test error goes up. Leaving each
point out of its own prediction (``leave_one_out=True``, the default of
``AttentionRegressor``) removes that optimum, which is why the package, like MLKR
(Weinberger & Tesauro, 2007), trains on the leave-one-out loss.

**What to look at.** ``08_collapse_without_leave_one_out.png``, the same
``AttentionRegressor`` (learned Gaussian kernel, ``similarity="gaussian"``, plain softmax
weights: ``tilt=False, warp=0``) trained with ``leave_one_out=True`` and
``leave_one_out=False`` on the noisy 1-D curve (200 points):

- top left: the training loss per L-BFGS iteration — leave-one-out levels off at 0.25
  (the noise's share of the variance), resubstitution falls below 1e-7 in 35
  iterations;
- top right: the held-out MSE after each number of iterations (separate fits stopped at
  that ``max_iter``, on 2 000 fresh noisy points; the dotted line is the noise variance
  0.25, the best any estimator can do). Both trainings follow the same path for the first
  few iterations (down to 0.28); then the resubstitution fit gets worse as it trains and
  ends at 0.47, while leave-one-out stays at 0.28;
- bottom left: the two fitted curves and the truth — the collapsed kernel (one effective
  neighbour per training point, against about 21 with leave-one-out) follows every noisy
  point;
- bottom right: the same comparison on Friedman #1 (10 features, the default similarity,
  400 training points): training loss 1e-15 against 0.09, but test 1 − R² 0.69 against
  0.13, and the mean effective number of training points each prediction averages
  (``effective_neighbors``: 1 = a single neighbour) 1.0 against 5.8.

The printed lines give the same numbers.

Run ``python 08_collapse_without_leave_one_out.py [--out DIR]``.

**Run time.** About 5 s on 2 cores (5 s with ``KERNATTN_SMOKE=1``).
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from kernattn import AttentionRegressor
from kernattn.datasets import curve_function, make_curve, make_friedman1

parser = argparse.ArgumentParser(description="A learned kernel without leave-one-out.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"

X, y, description = make_curve(100 if SMOKE else 200, random_state=0)
X_test, y_test, _ = make_curve(500 if SMOKE else 2000, random_state=1)
noise_variance = 0.5**2  # make_curve's default noise is 0.5
print(description)
TRAININGS = {"leave-one-out": True, "resubstitution": False}


def fit(X, y, leave_one_out, **params):
    # The plain softmax kernel as trained (the default would tilt and warp the 1-D curve's
    # weights, start at the smoother's bandwidth, step back toward it by an inner validation
    # that the collapse cannot fool, and choose local lines).
    model = AttentionRegressor(
        leave_one_out=leave_one_out,
        tilt=False,
        warp=0,
        degree=0,
        init="identity",
        shrinkage=None,
        random_state=0,
        **params,
    )
    with warnings.catch_warnings():
        # Fits stopped at a small max_iter on purpose (the held-out curve below).
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X, y)


# %%
# Both trainings to the end: the training loss per iteration, the fitted curves.
models = {name: fit(X, y, loo, similarity="gaussian") for name, loo in TRAININGS.items()}
for name, model in models.items():
    mse = np.mean((model.predict(X_test) - y_test) ** 2)
    print(
        f"curve, {name:15s}: training loss {model.loss_curve_[0]:.3f} → "
        f"{model.loss_curve_[-1]:.2e} in {model.n_iter_} iterations, held-out MSE {mse:.3f}, "
        f"effective neighbours {model.effective_neighbors(X).mean():.1f}"
    )

# %%
# The held-out MSE along the way: fits stopped after ``max_iter`` iterations (L-BFGS is
# deterministic, so each follows the same path as the full fit up to there).
longest = max(model.n_iter_ for model in models.values())
steps = np.unique(np.r_[0, np.geomspace(1, max(longest, 1), 6 if SMOKE else 12).round()])
steps = steps.astype(int)
held_out = {name: [] for name in TRAININGS}
for name, loo in TRAININGS.items():
    for k in steps:
        model = fit(X, y, loo, similarity="gaussian", max_iter=int(k))
        held_out[name].append(np.mean((model.predict(X_test) - y_test) ** 2))
    print(
        f"curve, {name:15s}: held-out MSE at iterations {steps.tolist()}: "
        f"{np.round(held_out[name], 3).tolist()}"
    )

# %%
# The same on Friedman #1 with the default similarity.
X_f, y_f, description_f = make_friedman1(200 if SMOKE else 400, random_state=0)
X_f_test, y_f_test, _ = make_friedman1(400 if SMOKE else 2000, random_state=1)
friedman = {}
for name, loo in TRAININGS.items():
    model = fit(X_f, y_f, loo)
    friedman[name] = (
        model.loss_curve_[-1],
        np.mean((model.predict(X_f_test) - y_f_test) ** 2) / np.var(y_f_test),
        model.effective_neighbors(X_f).mean(),
    )
    print(
        f"Friedman #1, {name:15s}: training loss {friedman[name][0]:.3f}, test 1 - R² "
        f"{friedman[name][1]:.3f}, effective neighbours {friedman[name][2]:.1f}"
    )

# %%
# The figure.
colors = {"leave-one-out": "C0", "resubstitution": "C3"}
fig, axes = plt.subplots(2, 2, figsize=(12, 8.5), layout="constrained")
ax = axes[0, 0]
for name, model in models.items():
    curve = model.loss_curve_
    ax.plot(np.arange(1, len(curve) + 1), curve, color=colors[name], label=name)
ax.set_yscale("log")
ax.set_xlabel("L-BFGS iteration")
ax.set_ylabel("training loss (1 − R² + penalty)")
ax.set_title("training loss: resubstitution falls towards 0")
ax.legend(fontsize=9)

ax = axes[0, 1]
for name in TRAININGS:
    ax.plot(np.maximum(steps, 0.5), held_out[name], "o-", color=colors[name], label=name)
ax.axhline(noise_variance, color="0.4", ls=":", lw=1)
ax.annotate("noise variance", (0.5, noise_variance), va="bottom", fontsize=9)
ax.set_xscale("log")
ax.set_xlabel("iterations (0 drawn at 0.5)")
ax.set_ylabel("held-out MSE")
ax.set_title("held-out error: resubstitution gets worse as it trains")
ax.legend(fontsize=9)

ax = axes[1, 0]
grid = np.linspace(0, 5, 500)[:, None]
ax.scatter(X[:, 0], y, s=9, color="0.6", label="training data")
ax.plot(grid[:, 0], curve_function(grid[:, 0]), "k--", lw=1.2, label="truth")
for name, model in models.items():
    ax.plot(grid[:, 0], model.predict(grid), color=colors[name], lw=1.3, label=name)
ax.set_xlabel("x")
ax.set_ylabel("y")
ax.set_title("the fits: the collapsed kernel follows the noise")
ax.legend(fontsize=9, loc="lower center", ncols=2)

ax = axes[1, 1]
labels = ("training loss", "test 1 − R²", "effective neighbours / 10")
width = 0.38
for i, name in enumerate(TRAININGS):
    values = np.array(friedman[name]) / np.array([1, 1, 10])
    bars = ax.bar(np.arange(3) + (i - 0.5) * width, values, width, color=colors[name], label=name)
    for bar, shown in zip(bars, friedman[name], strict=True):
        ax.annotate(
            f"{shown:.3g}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=9,
        )
ax.set_xticks(np.arange(3))
ax.set_xticklabels(labels)
ax.set_title("Friedman #1 (10 features, default similarity)")
ax.legend(fontsize=9)
fig.suptitle("AttentionRegressor trained with and without leave-one-out")
path = os.path.join(args.out, "08_collapse_without_leave_one_out.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")
