"""The full comparison
====================

**The claim.** "Is this related to kernel methods at all?" — "attention can be read as a
data-dependent kernel ... the output is a Nadaraya–Watson-style weighted average", and "the
projections Wq/Wk are learned, so the model can shape the geometry however it likes —
effectively it learns its own similarity metric." If attention is a kernel smoother, it should
be compared with kernel methods, on tasks where a learned metric should and should not help.

**The question.** On the built-in regression tasks, how do the kernattn estimators compare
with each other and with scikit-learn's k-nearest neighbors and kernel ridge regression, in
held-out accuracy and in time? These are exactly the estimators ``kernattn compare`` runs
(``kernattn.compare.default_estimators()``; 3 folds here): ``KernelSmoother`` with one
leave-one-out bandwidth per feature, ``AttentionRegressor`` at its defaults (one head,
Gaussian score with tied query/key projections, convex head mixture, trained on the
leave-one-out loss from the smoother's per-feature leave-one-out bandwidths, then stepped back
toward them as far as an inner 3-fold validation shows it pays, ``shrinkage="auto"``; each
query's weights tilted, ``tilt="auto"``, until the keys balance about it along its local
slope of the targets, or, with more than three features, along their linear trend: still a
Nadaraya–Watson average; and a one-dimensional input is warped, ``warp="auto"``),
``LinearAttentionRegressor`` at its defaults with the leave-one-out bandwidths (on these few
hundred rows it computes every weight exactly, ``exact_weights_``: below about 32 000 rows the
split into near keys and a Nyström far field would cost more than the exact weights, so it
matches ``KernelSmoother``), and the two scikit-learn baselines tuned by grid search on
standardized inputs.

**What to look at.** The printed table (held-out R² and MSE, mean ± std over the folds; fit
and predict seconds; ``*`` marks the best R² per task) and ``06_full_comparison.png``. In the
run this text was written from (seed 0):

- ``projection`` (the target depends on a 2-D projection of 10-D inputs): the learned
  kernel wins by far, R² 0.82 against 0.62 for kernel ridge and 0.33–0.34 for every kernel
  on the raw coordinates — the learned metric of the claim, at work;
- ``friedman1`` (5 relevant features among 10): the learned kernel is best, R² 0.875 ± 0.011,
  ahead of kernel ridge (0.866 ± 0.004); the per-feature bandwidths reach 0.82 and k-nearest
  neighbors 0.62;
- ``irrelevant`` (3 relevant features among 10): one leave-one-out bandwidth per feature
  switches the irrelevant ones off. The learned kernel, which starts from those bandwidths,
  gets R² 0.940, level with ``LinearAttentionRegressor`` and ``KernelSmoother`` (the same
  bandwidths, 0.939), while kernel ridge (one width for all features) gets 0.65 and
  k-nearest neighbors 0.49;
- ``curve`` (1-D): kernel ridge is best (0.75), then the learned kernel (0.734 ± 0.027, with
  its warp and its tilted weights); the smoother and the linear estimator make the same
  predictions (0.721 ± 0.031); k-nearest neighbors get 0.67;
- ``diabetes``: the learned kernel is best (0.490 ± 0.053), ahead of kernel ridge (0.469),
  k-nearest neighbors (0.45) and the leave-one-out smoothers (0.44);
- the time panel (log scale): the learned kernel is the slowest, about 0.06–0.5 s per fold
  against 0.03–0.07 s for the others: it is trained four times (once on all rows and once
  per inner fold) to choose how far to step back, and its tilt's width is chosen by
  leave-one-out.

So the learned metric wins where the relevant directions must be found and holds its own
elsewhere, at about ten times the cost; per-feature bandwidths are as good where features
must only be switched off, and kernel ridge regression wins on the smooth 1-D ``curve``.

Run ``python 06_full_comparison.py [--out DIR]``; it also writes the table as
``06_full_comparison.csv``.

**Run time.** About 15 s on 2 cores (5 s with ``KERNATTN_SMOKE=1``).
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os

import matplotlib.pyplot as plt

from kernattn import compare
from kernattn.compare import default_estimators, load_tasks

parser = argparse.ArgumentParser(description="The full comparison.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"

# %%
# The tasks of ``kernattn compare`` (the quick ones in smoke mode) and its estimators, exactly
# as the command builds them: the kernattn estimators at their defaults (the leave-one-out
# bandwidths for the smoothers, one convex head of learned Gaussian attention, tilted and
# warped on the 1-D ``curve``), the
# scikit-learn baselines on standardized inputs, tuned by grid search.
tasks = load_tasks(["curve", "irrelevant"] if SMOKE else None, quick=SMOKE, random_state=0)
for name, task in tasks.items():
    print(f"{name:12s} {task.description}")
estimators = default_estimators(quick=SMOKE)
for name, estimator in estimators.items():
    print(f"{name:25s} {estimator}")

# %%
# Cross-validate: the same folds for every estimator, a line as each pair finishes.
n_folds = 2 if SMOKE else 3
result = compare(estimators, tasks, cv=n_folds, random_state=0, verbose=True)
print()
print(result)
result.to_csv(os.path.join(args.out, "06_full_comparison.csv"))

# %%
# The figure: accuracy above, time below.
fig, (top, bottom) = plt.subplots(
    2, 1, figsize=(max(8, 1.6 * len(tasks) + 4), 7.5), sharex=True, layout="constrained"
)
result.plot("r2", ax=top)
result.plot("time", ax=bottom)
bottom.get_legend().remove()
fig.suptitle(f"Held-out R² (mean ± std over {n_folds} folds) and fit + predict time per fold")
path = os.path.join(args.out, "06_full_comparison.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")
