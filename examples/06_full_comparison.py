"""The full comparison
====================

**The question.** On the built-in regression tasks, how do the kernattn estimators compare
with each other and with scikit-learn's k-nearest neighbors and kernel ridge regression, in
held-out accuracy and in time? This is what ``kernattn compare`` runs (with 3 folds here, to
stay under a minute).

**What to look at.** The printed table (held-out R² and MSE, mean ± std over the folds; fit
and predict seconds; ``*`` marks the best R² per task) and ``06_full_comparison.png``:

- ``curve`` (1-D): every smoother does about as well; the differences are noise;
- ``friedman1`` and ``irrelevant``: a kernel with one bandwidth per feature (leave-one-out)
  can switch off the irrelevant features; a single-width kernel cannot;
- ``projection``: the target depends on a 2-D projection of 10-D inputs; a learned kernel
  can find it, a kernel on the raw coordinates cannot;
- the time panel (log scale): what the accuracy costs.

Run ``python 06_full_comparison.py [--out DIR]``; it also writes the table as
``06_full_comparison.csv``.
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
# The tasks and estimators of ``kernattn compare`` (the quick ones in smoke mode).
tasks = load_tasks(["curve", "irrelevant"] if SMOKE else None, quick=SMOKE, random_state=0)
for name, task in tasks.items():
    print(f"{name:12s} {task.description}")
estimators = default_estimators(quick=SMOKE)

# %%
# Cross-validate: the same folds for every estimator, a line as each pair finishes.
result = compare(estimators, tasks, cv=2 if SMOKE else 3, random_state=0, verbose=True)
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
fig.suptitle("Held-out R² (mean ± std over 3 folds) and fit + predict time per fold")
path = os.path.join(args.out, "06_full_comparison.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")
