"""Why dot products, why softmax, why 1/√d_k
==========================================

**The question.** Attention scores a query against a key with a dot product ``q·k`` and
divides by ``√d_k`` before the softmax. What goes wrong without the division, and does it
matter when the kernel is learned?

**What to look at.**

- ``02_scaling_variance_saturation.png`` (numpy only): for random q, k with independent
  unit-variance entries, Var(q·k) grows like d_k (the dashed line is d_k itself); scaled by
  1/√d_k it stays at 1. Unscaled, the softmax over 64 keys saturates as d_k grows: the largest
  weight goes to 1 and the entropy to 0 — the weights become one-hot, and the gradient of the
  attention output with respect to the scores vanishes. Scaled, all three stay flat.
- ``02_scale_ablation_loss_curves.png``: ``AttentionRegressor`` trained with ``scale=None``
  (1/√head_dim) and ``scale=1.0`` (no scaling) at head dimensions 8, 32 and 128, from the
  same initial projections, the training objective per epoch of Adam. Does dropping the scale
  make early training unstable at large head dimension (a higher, bumpier start: the first
  logits have variance head_dim and the softmax starts saturated)? And where does each end —
  without the scale every step on the projections moves the logits √head_dim times further,
  which is also a larger effective learning rate?

Run ``python 02_why_scaled_dot_product.py [--out DIR]``.
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os
import warnings

import matplotlib.pyplot as plt
import numpy as np

from kernattn.attention import softmax_attention

parser = argparse.ArgumentParser(description="Why dot products, why softmax, why 1/sqrt(d_k).")
parser.add_argument("--out", default=".", help="folder for the figures (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"

rng = np.random.default_rng(0)
head_dims = 2 ** np.arange(0, 8 if SMOKE else 10)  # 1 ... 512
n_draws = 50 if SMOKE else 400  # independent queries per d_k
n_keys = 64

# %%
# Var(q·k) = Σ_j Var(q_j k_j) = d_k when the entries are independent with mean 0 and
# variance 1: the logits spread out like √d_k.
variance = {"q·k": [], "q·k / √d_k": []}
for d in head_dims:
    q = rng.normal(size=(20 * n_draws, d))
    k = rng.normal(size=(20 * n_draws, d))
    dots = np.einsum("ij,ij->i", q, k)
    variance["q·k"].append(dots.var())
    variance["q·k / √d_k"].append((dots / np.sqrt(d)).var())

# %%
# The softmax of spread-out logits is nearly one-hot. For each d_k: one query against 64 keys
# with random values; the largest weight, the entropy of the weights (log 64 = uniform, 0 =
# one-hot), and the norm of the gradient of the output Σ_j w_j v_j with respect to the scores,
# ∂out/∂s_j = w_j (v_j − out): it vanishes when one weight takes everything.
saturation = {
    name: {"max weight": [], "entropy": [], "gradient norm": []} for name in ("none", "1/√d_k")
}
for d in head_dims:
    for name, scale in (("none", 1.0), ("1/√d_k", 1.0 / np.sqrt(d))):
        max_weight, entropy, gradient = [], [], []
        for _ in range(n_draws):
            q = rng.normal(size=(1, d))
            K = rng.normal(size=(n_keys, d))
            v = rng.normal(size=n_keys)
            out, w = softmax_attention(q, K, v, scale=scale, return_weights=True)
            w = w[0]
            max_weight.append(w.max())
            positive = w[w > 0]
            entropy.append(-np.sum(positive * np.log(positive)))
            gradient.append(np.linalg.norm(w * (v - out[0])))
        # Medians: a typical query (the mean of the gradient norm is carried by the rare
        # query whose top two scores happen to tie).
        saturation[name]["max weight"].append(np.median(max_weight))
        saturation[name]["entropy"].append(np.median(entropy))
        saturation[name]["gradient norm"].append(np.median(gradient))

for name, curves in saturation.items():
    print(
        f"scale {name:7s} d_k={head_dims[-1]}: max weight {curves['max weight'][-1]:.3f}, "
        f"entropy {curves['entropy'][-1]:.3f} (uniform: {np.log(n_keys):.3f}), "
        f"gradient norm {curves['gradient norm'][-1]:.2e}"
    )

# %%
# The first figure.
fig, axes = plt.subplots(2, 2, figsize=(11, 8), layout="constrained")
axes = axes.ravel()
ax = axes[0]
for name, values in variance.items():
    ax.plot(head_dims, values, "o-", label=name)
ax.plot(head_dims, head_dims, "k--", lw=1, label="d_k")
ax.set_xscale("log", base=2)
ax.set_yscale("log", base=2)
ax.set_xlabel("head dimension d_k")
ax.set_ylabel("variance of the logit")
ax.set_title("Var(q·k) grows like d_k")
ax.legend(fontsize=9)
titles = {
    "max weight": "largest softmax weight (64 keys, median)",
    "entropy": "entropy of the weights (median)",
    "gradient norm": "‖∂ output / ∂ scores‖ (median)",
}
for ax, key in zip(axes[1:], titles, strict=True):
    for name, curves in saturation.items():
        ax.plot(head_dims, curves[key], "o-", label=f"scale: {name}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("head dimension d_k")
    ax.set_title(titles[key])
    ax.legend(fontsize=9)
axes[2].axhline(np.log(n_keys), color="0.5", ls=":", lw=1)
axes[2].annotate("uniform: log 64", (head_dims[0], np.log(n_keys)), va="bottom", fontsize=9)
axes[2].set_ylim(0, 1.1 * np.log(n_keys))
axes[2].legend(fontsize=9, loc="center left")
axes[3].set_yscale("log")
fig.suptitle(
    "Without 1/√d_k the logits spread out, the softmax saturates and its gradient vanishes"
)
path = os.path.join(args.out, "02_scaling_variance_saturation.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")

# %%
# Does it matter for a learned kernel? ``AttentionRegressor`` rescales its built-in
# initializations so that the first logits have unit variance whatever the head dimension —
# the variance argument applied at the start. To see what the scale itself does, both runs
# here start from the same given projections with unit-variance q and k entries (Gaussian,
# variance 1/n_features per weight, on the standardized inputs): with ``scale=None`` (1/√head_dim)
# the first logits have unit variance, with ``scale=1.0`` variance head_dim.
from sklearn.exceptions import ConvergenceWarning  # noqa: E402

from kernattn import AttentionRegressor  # noqa: E402
from kernattn.datasets import make_friedman1  # noqa: E402

X, y, description = make_friedman1(150 if SMOKE else 400, random_state=0)
print(description)
ablation_dims = (8, 32) if SMOKE else (8, 32, 128)
fig, axes = plt.subplots(
    1, len(ablation_dims), figsize=(4.6 * len(ablation_dims), 4), layout="constrained", sharey=True
)
for ax, head_dim in zip(axes, ablation_dims, strict=True):
    init = rng.normal(scale=1 / np.sqrt(X.shape[1]), size=(X.shape[1], head_dim))
    for scale in (None, 1.0):
        model = AttentionRegressor(
            head_dim=head_dim,
            scale=scale,
            init=init,
            optimizer="adam",
            max_iter=15 if SMOKE else 60,
            random_state=0,
        )
        with warnings.catch_warnings():
            # A fixed budget of epochs: stopping at max_iter is the plan, not a failure.
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, y)
        curve = np.asarray(model.loss_curve_)
        ax.plot(np.arange(1, len(curve) + 1), curve, label=f"scale={scale!r}")
        print(
            f"head_dim {head_dim:4d} scale={scale!r:7s} "
            f"first epoch {curve[0]:.3f}, last {curve[-1]:.3f}"
        )
    ax.set_title(f"head_dim = {head_dim}")
    ax.set_xlabel("epoch (Adam)")
    ax.legend(fontsize=9)
axes[0].set_ylabel("training objective: leave-one-out 1 − R² + penalty")
fig.suptitle("AttentionRegressor on Friedman #1: learning with and without the 1/√d_k scale")
path = os.path.join(args.out, "02_scale_ablation_loss_curves.png")
fig.savefig(path, dpi=110)
print(f"wrote {path}")
