"""Attention as a kernel smoother
================================

**The claim.** "Is this related to kernel methods at all? It smells like a similarity-weighted
average." — "Yes: attention can be read as a data-dependent kernel: softmax(qk) is like a
(non-symmetric, learned) kernel weighting, and the output is a Nadaraya–Watson-style weighted
average of values. The 'linear attention' line of work makes that connection explicit by
swapping softmax for an explicit feature map."

**How this example checks it.** Softmax attention averages the values with weights
``softmax(score(query, key))``; the Nadaraya–Watson smoother averages the targets with weights
``κ(x, x_i) / Σ_j κ(x, x_j)``. On the noisy curve ``y = 2 sin x + x^0.8`` (200 points):

- the printed check: the Gaussian smoother's predictions equal ``softmax_attention`` with
  queries ``x/h``, keys ``x_i/h``, scale 1 and key bias ``−½‖k‖²``, to rounding error
  (about 1e-15);
- top left: the smoother and linear attention with 1 024 random features for the same
  Gaussian kernel. The two fits lie on top of each other (linear attention dashed over the
  smoother; MSE against the truth 0.048 and 0.046), and under 2 % of the attention weight
  moves between them (printed total-variation distance 0.017). The band is the smoother's
  ``return_std``: the spread of the targets each query attends to;
- top right: two learned kernels (``AttentionRegressor``, one head, plain softmax weights
  ``tilt=False, warp=0``, trained on the leave-one-out loss, with the convex head mixture,
  so each prediction is exactly the weighted average of the targets drawn in its heat map
  below). The dot-product score
  barely follows the curve: its fit stays between about 1.5 and 2.3 while the truth runs
  from 0 to 3.6 (MSE 0.633); the learned Gaussian score follows the truth closest of all
  four (MSE 0.026);
- bottom: one heat map per model, a row per query and a column per training point, both ordered
  by x, on one color scale. The smoother is a band along the diagonal whose width is the
  bandwidth, and linear attention draws the same band. The learned dot-product kernel is not a
  band: in one dimension its logit is ``c·u·u_i`` on the standardized input ``u``, which for
  each query grows steadily towards the end of the data on the query's side, so queries on the
  left look at the left end and queries on the right at the right end, and a typical query
  spreads its weight over about 126 of the 200 points (printed median effective neighbors): a
  nearly global average, hence the flat fit — a dot product is a similarity only after the
  projections make it one. The learned Gaussian score (a learned metric) is local again, and
  narrower than the fixed bandwidth: about 20 effective neighbors against the smoother's 46.

Run ``python 01_attention_as_kernel_smoother.py [--out DIR]``; it writes
``01_attention_as_kernel_smoother.png``.

**Run time.** About 5 s on 2 cores (5 s with ``KERNATTN_SMOKE=1``).
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
smoother = KernelSmoother(kernel="gaussian", bandwidth=h).fit(X, y)
as_attention = softmax_attention(
    queries / h, X / h, y, scale=1.0, key_bias=-0.5 * ((X / h) ** 2).sum(axis=1)
)
gap = np.max(np.abs(smoother.predict(queries) - as_attention))
print(f"max |KernelSmoother(h={h}) - softmax_attention(x/h, x_i/h, y)| = {gap:.1e}")

# %%
# The kernels. The smoother's Gaussian kernel is fixed by its bandwidth. Linear attention
# replaces that kernel by an explicit feature map, κ(q, k) ≈ φ(q)ᵀφ(k) (random features), so
# its weights are only approximately the smoother's. The attention regressor learns its query
# and key projections on the leave-one-out loss: with a dot-product score, and with the
# Gaussian score −½‖q − k‖² (a learned metric, tied query and key projections). The convex
# head mixture keeps each prediction a Nadaraya–Watson average of the targets, with exactly
# the weights ``attention_weights`` returns (``"affine"`` would rescale it and add a bias).
# No penalty on the projections (``alpha=0``): with one input there are no directions to
# choose between, and the leave-one-out loss alone keeps the kernel from collapsing. One head
# each, every setting that matters spelled out: the plain softmax weights (``tilt=False,
# warp=0``; by default one-dimensional data would get tilted weights and a warped input).
linear = LinearAttentionRegressor(
    feature_map="optimal", n_components=1024, bandwidth=h, random_state=0
).fit(X, y)
# The plain softmax average of one head, trained from the identity start and kept as trained.
common = dict(
    n_heads=1,
    head_mixture="convex",
    scale=None,
    alpha=0.0,
    tilt=False,
    warp=0,
    degree=0,
    init="identity",
    shrinkage=None,
    random_state=0,
)
dot = AttentionRegressor(similarity="dot", tie_qk=False, **common).fit(X, y)
gaussian = AttentionRegressor(similarity="gaussian", tie_qk=True, **common).fit(X, y)
models = {
    f"KernelSmoother, h = {h}": smoother,
    f"LinearAttentionRegressor, h = {h}, r = 1024": linear,
    "AttentionRegressor, dot product": dot,
    "AttentionRegressor, Gaussian score": gaussian,
}
for name, model in models.items():
    mse = np.mean((model.predict(queries) - curve_function(queries[:, 0])) ** 2)
    n_eff = np.median(model.effective_neighbors(queries))
    print(f"{name:44s} MSE against the truth {mse:.3f}, median effective neighbors {n_eff:5.1f}")
# Total variation between two weight rows: the share of the weight that moved.
moved = 0.5 * np.abs(linear.attention_weights(queries) - smoother.attention_weights(queries))
print(f"linear attention against the smoother: mean total variation {moved.sum(1).mean():.3f}")

# %%
# The figure: the fits on top (fixed kernel left, learned kernels right), one attention heat
# map per model below, all on one color scale so their peaks compare.
fig = plt.figure(figsize=(14, 9), layout="constrained")
grid = fig.add_gridspec(2, 4, height_ratios=[1, 1])
ax = fig.add_subplot(grid[0, :2])
fixed = dict(list(models.items())[:2])
plot_fit(fixed, X, y, truth=curve_function, show_std=[f"KernelSmoother, h = {h}"], ax=ax)
ax.set_title("a fixed Gaussian kernel, exact and as a feature map (band: smoother's ± std)")
ax.legend(loc="lower center", fontsize=9)
ax = fig.add_subplot(grid[0, 2:], sharey=ax)
learned = dict(list(models.items())[2:])
plot_fit(learned, X, y, truth=curve_function, show_std=False, ax=ax)
# Each model keeps one color in the whole figure (the heat maps' titles below).
for line, color in zip(ax.get_lines()[1:], ("C2", "C3"), strict=True):
    line.set_color(color)
ax.legend(loc="lower center", fontsize=9)
ax.set_title("learned kernels (leave-one-out, one head, convex mixture)")
ax.set_ylabel("")
vmax = max(model.attention_weights(queries).max() for model in models.values())
for i, (name, model) in enumerate(models.items()):
    ax = fig.add_subplot(grid[1, i])
    plot_attention(model, queries, vmax=vmax, title=name.replace(", h", "\nh", 1), ax=ax)
    ax.title.set_color(f"C{i}")
    ax.title.set_fontsize(10)
    if i:
        ax.set_ylabel("")
fig.colorbar(ax.collections[-1], ax=ax, label="attention weight")
fig.suptitle("Attention is a kernel smoother: weights = softmax of kernel logits")
path = os.path.join(args.out, "01_attention_as_kernel_smoother.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")
