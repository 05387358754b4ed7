"""Attention as a kernel smoother
================================

**The question.** Softmax attention averages the values with weights
``softmax(score(query, key))``. The Nadaraya–Watson smoother averages the targets with weights
``κ(x, x_i) / Σ_j κ(x, x_j)``. Are these the same thing, and what do the weights look like?

**What to look at.**

- The printed check: the Gaussian smoother's predictions equal ``softmax_attention`` with
  queries ``x/h``, keys ``x_i/h``, scale 1 and key bias ``−½‖k‖²`` (to rounding error).
- Left panel: each smoother's fit of the noisy curve ``y = 2 sin x + x^0.8`` against the truth,
  with the ``return_std`` band — the spread of the targets each query attends to.
- The heat maps: one row per query, one column per training point, both sorted by x. A
  smoother is a band along the diagonal; its width is the bandwidth. Linear attention's
  band is the smoother's, blurred by the random-feature approximation. The learned
  dot-product kernel is not a band: in one dimension its logit is ``c·x·x_i``, which grows
  with ``x_i`` and favors the ends of the data — a dot product is a similarity only after
  the projections make it one, and a Gaussian score (a learned metric) is local again.

Run ``python 01_attention_as_kernel_smoother.py [--out DIR]``; it writes
``01_attention_as_kernel_smoother.png``.
"""

# %%
# Setup: the data and where the figure goes. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os

import matplotlib.pyplot as plt
import numpy as np

from kernattn import AttentionRegressor, KernelSmoother, LinearAttentionRegressor
from kernattn.attention import softmax_attention
from kernattn.datasets import curve_function, make_curve
from kernattn.plotting import plot_attention, plot_fit

parser = argparse.ArgumentParser(description="Attention as a kernel smoother.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"

X, y, description = make_curve(60 if SMOKE else 200, noise=0.5, random_state=0)
queries = np.linspace(0, 5, 25 if SMOKE else 60)[:, None]
print(description)

# %%
# The Gaussian smoother is softmax attention. With q = x/h and k = x_i/h,
# −½‖q − k‖² = q·k − ½‖k‖² − ½‖q‖², and the last term is the same for every key, so it
# cancels in the softmax.
h = 0.3
smoother = KernelSmoother(bandwidth=h).fit(X, y)
as_attention = softmax_attention(
    queries / h, X / h, y, scale=1.0, key_bias=-0.5 * ((X / h) ** 2).sum(axis=1)
)
gap = np.max(np.abs(smoother.predict(queries) - as_attention))
print(f"max |KernelSmoother(h={h}) - softmax_attention(x/h, x_i/h, y)| = {gap:.1e}")

# %%
# The three kernels. The smoother's Gaussian kernel is fixed by its bandwidth; the attention
# regressor learns its query/key projections on the leave-one-out loss (with a dot-product
# score, and with the Gaussian score −½‖q − k‖², a learned metric, whose sharpness needs a
# large projection: a light penalty ``alpha`` lets it grow); linear attention
# replaces the Gaussian kernel by random features, so its weights are only approximately
# those of the smoother.
models = {
    f"KernelSmoother, h = {h}": smoother,
    "AttentionRegressor, dot product": AttentionRegressor(random_state=0).fit(X, y),
    "AttentionRegressor, Gaussian score": AttentionRegressor(
        similarity="gaussian", tie_qk=True, alpha=1e-3, random_state=0
    ).fit(X, y),
    f"LinearAttentionRegressor, h = {h}": LinearAttentionRegressor(
        feature_map="optimal", n_components=1024, bandwidth=h, random_state=0
    ).fit(X, y),
}
for name, model in models.items():
    mse = np.mean((model.predict(queries) - curve_function(queries[:, 0])) ** 2)
    print(f"{name:38s} MSE against the truth {mse:.3f}")

# %%
# The figure: the fits on top, one attention heat map per model below.
fig = plt.figure(figsize=(14, 9), layout="constrained")
grid = fig.add_gridspec(2, len(models), height_ratios=[1.1, 1])
ax_fit = fig.add_subplot(grid[0, :])
plot_fit(models, X, y, truth=curve_function, ax=ax_fit)
ax_fit.set_title("fits; band: ± weighted spread of the targets")
ax_fit.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, fontsize=9)
# One color scale for all heat maps, so their peaks compare.
vmax = max(model.attention_weights(queries).max() for model in models.values())
for i, (name, model) in enumerate(models.items()):
    ax = fig.add_subplot(grid[1, i])
    plot_attention(model, queries, vmax=vmax, title=name, ax=ax)
    if i:
        ax.set_ylabel("")
fig.colorbar(ax.collections[-1], ax=ax, label="attention weight")
fig.suptitle("Attention is a kernel smoother: weights = softmax of kernel logits")
path = os.path.join(args.out, "01_attention_as_kernel_smoother.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")
