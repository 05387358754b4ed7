"""Multiple heads: what each attends to, and which ones matter
===========================================================

**The question.** A multi-head ``AttentionRegressor`` predicts with a learned mixture of the
heads' Nadaraya–Watson estimates, ``ŷ = Σ_h a_h ŷ_h + b`` (``head_weights_`` are the a_h).
Do the heads learn different kernels, and how many of them does the prediction need?

**The task.** Friedman #1: ``y = 10 sin(π x₁x₂) + 20 (x₃ − ½)² + 10 x₄ + 5 x₅ + ε`` with five
more irrelevant features — an additive target whose parts a head could specialise on.

**What to look at.** In ``04_multiple_heads.png``:

- which input features each head's keys use (the norm of each feature's row of the key
  projection): heads that look at different features learned different kernels; the
  irrelevant features 6–10 should get little;
- the attention weights of each head for the same queries, keys ordered along the head's
  leading key direction v and queries by q·v: a dot-product head is not local — a query far
  along v favors the keys far along v, one at the other end the keys at the other end (a
  diagonal, from corner to corner); a head with near-uniform weights adds a constant;
- ``head_weights_`` (an affine mixture: they need not be positive or sum to one), and the
  held-out MSE as the heads are removed one at a time, smallest ``|a_h|`` first — replaced by the
  training mean, or with the mixture of the rest re-fitted (``prune_heads``): a flat start
  means redundant heads.

Run ``python 04_multiple_heads.py [--out DIR]``.
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split

from kernattn import AttentionRegressor
from kernattn.datasets import make_friedman1
from kernattn.plotting import plot_attention

parser = argparse.ArgumentParser(description="Multiple attention heads.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"

X, y, description = make_friedman1(200 if SMOKE else 800, random_state=0)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
print(description)

# %%
# Four heads of dimension 2.
n_heads = 4
model = AttentionRegressor(
    n_heads=n_heads, head_dim=2, max_iter=30 if SMOKE else 200, random_state=0
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    model.fit(X_train, y_train)
print(f"held-out R² with all {n_heads} heads: {model.score(X_test, y_test):.3f}")
print("head weights:", np.round(model.head_weights_, 3))

# %%
# Each head's own estimate: its attention weights times the training targets. The mixture
# of these is the model's prediction (checked below).
head_predictions = np.stack(
    [model.attention_weights(X_test, head=h) @ model.y_fit_ for h in range(n_heads)]
)
mixed = model.head_weights_ @ head_predictions + model.head_bias_
gap = np.abs(mixed - model.predict(X_test)).max()
print(f"max |mixture of head estimates - predict| = {gap:.1e}")

# %%
# Remove the heads one by one, smallest ``|head weight|`` first, two ways:
# ``predict(X, heads=kept)`` replaces each removed head by the training mean and keeps the
# other weights (what the removed heads contributed); ``prune_heads(kept)`` re-fits the mixture
# of the kept heads (what is lost if the model is rebuilt without them).
order = np.argsort(np.abs(model.head_weights_))
ablated_mse, refitted_mse = [], []
for n_removed in range(n_heads):
    kept = np.sort(order[n_removed:])
    ablated = model.predict(X_test, heads=kept)
    # Nothing removed: the trained model itself, on both curves.
    refitted = model.prune_heads(kept).predict(X_test) if n_removed else ablated
    ablated_mse.append(np.mean((ablated - y_test) ** 2))
    refitted_mse.append(np.mean((refitted - y_test) ** 2))
    print(
        f"{n_removed} head(s) removed: held-out MSE {ablated_mse[-1]:.3f} (mean ablation), "
        f"{refitted_mse[-1]:.3f} (mixture re-fitted)"
    )

# %%
# Which features each head uses: the norm of each (standardized) input feature's row of the
# key projection.
usage = np.linalg.norm(model.key_projection_, axis=2)  # (n_heads, n_features)

# %%
# The figure.
fig = plt.figure(figsize=(14.5, 7.5), layout="constrained")
top, bottom = fig.subfigures(2, 1)
ax_usage, ax_weights, ax_pruning = top.subplots(1, 3, width_ratios=[2, 1, 1])
ax = ax_usage
image = ax.imshow(usage, cmap="magma", aspect="auto")
ax.set_xticks(range(X.shape[1]))
ax.set_xticklabels([f"x{j + 1}" for j in range(X.shape[1])])
ax.set_yticks(range(n_heads))
ax.set_yticklabels([f"head {h}" for h in range(n_heads)])
ax.set_title("feature use per head: ‖row of W_k‖ (x6–x10 irrelevant)")
top.colorbar(image, ax=ax)

ax = ax_weights
ax.bar(range(n_heads), model.head_weights_, color=[f"C{h}" for h in range(n_heads)])
ax.axhline(0, color="0.3", lw=0.8)
ax.set_xticks(range(n_heads))
ax.set_xlabel("head")
ax.set_title("head_weights_ (mixture)")

ax = ax_pruning
ax.plot(range(n_heads), ablated_mse, "o-", label="removed heads → training mean")
ax.plot(range(n_heads), refitted_mse, "s--", label="mixture re-fitted (prune_heads)")
ax.set_xticks(range(n_heads))
ax.set_yscale("log")
ax.set_xlabel("heads removed (smallest |weight| first)")
ax.set_ylabel("held-out MSE")
ax.set_title("pruning the heads")
ax.legend(fontsize=9)

queries = X_test[: 30 if SMOKE else 60]
# One color scale for the heads, its top at the 99.5th percentile so a few peaks do not
# hide the pattern.
all_weights = [model.attention_weights(queries, head=h) for h in range(n_heads)]
vmax = np.percentile(np.concatenate([w.ravel() for w in all_weights]), 99.5)
head_axes = bottom.subplots(1, n_heads)
for h, ax in enumerate(head_axes):
    # Order keys along the head's leading key direction v, and queries by how strongly they
    # point along it (q·v): the logit q·k is largest where both are far along v, so a
    # dot-product head is not local — its queries at one end favor the keys at one end.
    def project(U, weights):
        return ((U - model.center_) / model.input_scale_) @ weights

    keys = project(model.X_fit_, model.key_projection_[h])
    v = np.linalg.svd(keys - keys.mean(axis=0), full_matrices=False)[2][0]
    order = (
        lambda U, h=h, v=v: project(U, model.query_projection_[h]) @ v,
        lambda U, h=h, v=v: project(U, model.key_projection_[h]) @ v,
    )
    plot_attention(
        model, queries, head=h, sort_by=order, vmax=vmax, title=f"head {h} weights", ax=ax
    )
    ax.set_xlabel("training point (sorted by k·v)")
    ax.set_ylabel("query (sorted by q·v)" if h == 0 else "")
bottom.colorbar(
    head_axes[-1].collections[-1], ax=head_axes, label="attention weight", extend="max"
)
fig.suptitle("AttentionRegressor with 4 heads on Friedman #1")
path = os.path.join(args.out, "04_multiple_heads.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")
