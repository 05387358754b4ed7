"""In-context regression is kernel smoothing
=========================================

**The question.** A transformer given a prompt of (x, y) pairs and a new x predicts its y
"in context", without a gradient step. With one attention layer, what estimator has it
learned? The thread's answer is the one of this package: a token "reads a blend of the
other tokens" — a Nadaraya–Watson smoother whose keys are the prompt's x and whose values
are its y.

**The setup.** Prompts of 24 pairs from random smooth functions
``f(x) = Σₖ aₖ sin(ωₖ x + φₖ)/√6`` on x ∈ [−2, 2], noise σ = 0.1, with frequencies drawn up
to ω_max: two function classes, *smooth* (ω_max = 1) and *rough* (ω_max = 4, Lipschitz
constants about four times larger). A pair is the token ``[x, y]``, the query the token
``[x, 0]``; one layer of :class:`kernattn.torch.KernelAttention` (one head, the Gaussian
kernel ``exp(−½ s‖W_q u − W_k u′‖²)``, learned scale) lets the query attend to the pairs,
and the y coordinate of its output is the prediction. W_k starts equal to W_q with no weight
on y (from independent random projections the kernel starts far from local and training
found a poor, non-local solution). One model is trained (Adam, squared error, 600 steps of
128 prompts) on prompts of each class.

**What to look at.** In ``18_in_context_regression.png`` (numbers from the run this text
was written from; the script prints its own):

- top left: a new smooth prompt, the model's predictions at 200 query tokens, and
  ``KernelSmoother`` at the bandwidth that matches the model best (h = 0.26): the curves
  lie nearly on top of each other (RMS difference 0.012 on 300 new prompts, 2 % of the
  predictions' spread), and both are weighted averages of the prompt's y;
- top right: the model's attention weights for one query against the smoother's weights at
  that bandwidth (total-variation distance 0.01 on average over the new prompts);
- bottom left: **the bandwidth follows the function class.** The RMS difference between the
  model and the Gaussian smoother against h: the model trained on smooth functions matches
  h = 0.26, the one trained on rough functions h = 0.12 (RMS difference 0.044, 6 %; weights
  0.05 apart). Dashed: the bandwidth with the lowest in-context error for each class (0.26
  and 0.12): each model has learned the best smoother for its class, as Collins et al.
  (2024) report for softmax attention (its error, 0.0042 and 0.036, is that smoother's,
  0.0041 and 0.035);
- bottom right: **the leave-one-out objective is the in-context loss.** For one smooth
  prompt taken as a training set, ``AttentionRegressor``'s leave-one-out loss (its
  ``loss_curve_[0]`` at ``max_iter=0``, times the targets' variance) and the mean squared
  error of the same layer run with every training pair as a query and its own pair masked
  (``attn_mask`` the identity) agree to 8e-17 at all 40 bandwidths; without the mask (grey)
  the loss keeps falling as h shrinks, below the noise variance 0.01: each point copies
  its own target, the collapse of example 08.

Reference: L. Collins, A. Parulekar, A. Mokhtari, S. Sanghavi, S. Shakkottai, "In-context
learning with transformers: softmax attention adapts to function Lipschitzness", NeurIPS
2024.

Run ``python 18_in_context_regression.py [--out DIR]``. It needs torch, the CPU build is enough:
``pip install torch --index-url https://download.pytorch.org/whl/cpu``, then the torch extra
from the repository's root, ``pip install ".[torch]"``.

**Run time.** About 10 s on 2 cores (10 s with ``KERNATTN_SMOKE=1``).
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the training (tests).
import argparse
import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from kernattn import AttentionRegressor, KernelSmoother
from kernattn.attention import softmax_attention
from kernattn.torch import KernelAttention

parser = argparse.ArgumentParser(description="In-context regression as kernel smoothing.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"
STEPS = 40 if SMOKE else 600
N_PAIRS, NOISE, N_WAVES = 24, 0.1, 6
CLASSES = {"smooth (ω ≤ 1)": 1.0, "rough (ω ≤ 4)": 4.0}
BANDWIDTHS = np.geomspace(0.04, 1.5, 40)
# torch's threads: its default, the machine's cores (the header's time is for 2).
print(f"torch threads: {torch.get_num_threads()}")


# %%
# Prompts: random smooth functions, 24 noisy pairs each, and queries.
def functions(n, omega_max, rng):
    a = rng.normal(size=(n, N_WAVES))
    omega = rng.uniform(0.0, omega_max, size=(n, N_WAVES))
    phase = rng.uniform(0.0, 2 * np.pi, size=(n, N_WAVES))
    return lambda x: (
        np.sum(a[:, None] * np.sin(omega[:, None] * x[..., None] + phase[:, None]), axis=-1)
        / np.sqrt(N_WAVES)
    )


def prompts(n, omega_max, rng, n_queries=1):
    f = functions(n, omega_max, rng)
    x = rng.uniform(-2.0, 2.0, size=(n, N_PAIRS))
    y = f(x) + NOISE * rng.normal(size=x.shape)
    xq = rng.uniform(-2.0, 2.0, size=(n, n_queries))
    return x, y, xq, f(xq)


def tokens(x, y, xq):
    """Pairs [x, y] (n, 24, 2) and query tokens [x, 0] (n, q, 2) as float64 tensors."""
    pairs = torch.as_tensor(np.stack([x, y], axis=-1))
    queries = torch.as_tensor(np.stack([xq, np.zeros_like(xq)], axis=-1))
    return pairs, queries


def predict(layer, x, y, xq, need_weights=False):
    pairs, queries = tokens(x, y, xq)
    out, weights = layer(queries, pairs, pairs, need_weights=need_weights)
    return out[..., 1], weights


def train(omega_max):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    layer = KernelAttention(2, 1, kernel="gaussian", scale="learned").double()
    with torch.no_grad():
        # Start from one metric on x for queries and keys (W_k = W_q, no weight on y), as
        # AttentionRegressor's tied projections: from independent draws the kernel starts
        # far from local, and a weight on the keys' y makes it depend on the values.
        layer.in_proj_weight[2:4] = layer.in_proj_weight[0:2]
        layer.in_proj_weight[0:4, 1] = 0.0
    optimizer = torch.optim.Adam(layer.parameters(), lr=5e-2)
    for _ in range(STEPS):
        x, y, xq, fq = prompts(128, omega_max, rng, n_queries=8)
        prediction, _ = predict(layer, x, y, xq)
        loss = torch.mean((prediction - torch.as_tensor(fq)) ** 2)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return layer


def smoother(x, y, xq, h):
    """The Gaussian smoother with bandwidth h on every prompt at once, predictions (n, q):
    softmax attention with queries x/h, keys x_i/h, scale 1 and key bias −½(x_i/h)², which
    is KernelSmoother(bandwidth=h) on each prompt (checked below)."""
    keys = x[..., None] / h
    return softmax_attention(
        xq[..., None] / h, keys, y[..., None], scale=1.0, key_bias=-0.5 * keys[..., 0] ** 2
    )[..., 0]


# %%
# Train one layer per function class; compare with the Gaussian smoother on new prompts.
rng = np.random.default_rng(1)
results = {}
for name, omega_max in CLASSES.items():
    layer = train(omega_max)
    x, y, xq, fq = prompts(300, omega_max, rng, n_queries=4)
    with torch.no_grad():
        model, weights = predict(layer, x, y, xq, need_weights=True)
    model, weights = model.numpy(), weights.numpy()
    sweep = [smoother(x, y, xq, h) for h in BANDWIDTHS]
    gap = np.array([np.sqrt(np.mean((s - model) ** 2)) for s in sweep])
    error = np.array([np.mean((s - fq) ** 2) for s in sweep])
    best = BANDWIDTHS[np.argmin(gap)]
    # KernelSmoother itself at the matching bandwidth, prompt by prompt.
    fits = [
        KernelSmoother(bandwidth=best).fit(xi[:, None], yi) for xi, yi in zip(x, y, strict=True)
    ]
    reference = np.stack(
        [fit.attention_weights(qi[:, None]) for fit, qi in zip(fits, xq, strict=True)]
    )
    predictions = np.stack([fit.predict(qi[:, None]) for fit, qi in zip(fits, xq, strict=True)])
    same = np.max(np.abs(predictions - sweep[np.argmin(gap)]))
    distance = 0.5 * np.abs(weights - reference).sum(axis=-1).mean()
    results[name] = dict(layer=layer, gap=gap, error=error, best=best)
    print(
        f"{name}: the model matches KernelSmoother best at h = {best:.2f} (RMS difference "
        f"{gap.min():.3f}, {gap.min() / model.std():.0%} of the predictions' spread; weights "
        f"{distance:.2f} apart in total variation); the lowest in-context error is at h = "
        f"{BANDWIDTHS[np.argmin(error)]:.2f}; model error {np.mean((model - fq) ** 2):.4f}, "
        f"smoother's at its best h {error.min():.4f} (KernelSmoother and the batched "
        f"smoother differ by {same:.1e})"
    )

# %%
# The leave-one-out identity: AttentionRegressor's objective for a Gaussian metric W = 1/h
# is the in-context loss of the same kernel with the training set as the prompt and the
# query's own pair masked. The layer is set by hand: W_q = W_k pick x/h, W_v and the output
# projection carry y to the prediction's coordinate.
x, y, _, _ = prompts(1, 1.0, np.random.default_rng(2))
x, y = x[0], y[0]
identity = torch.eye(N_PAIRS, dtype=torch.bool)  # True: the query's own pair is masked
loo_regressor, loo_context, resubstitution = [], [], []
for h in BANDWIDTHS:
    regressor = AttentionRegressor(
        init=np.array([[1.0 / h]]),
        scale=1.0,
        standardize=False,
        max_iter=0,
        tilt=False,
        warp=0,
        alpha=0.0,
    ).fit(x[:, None], y)
    loo_regressor.append(regressor.loss_curve_[0] * np.var(y))
    layer = KernelAttention(2, 1, kernel="gaussian", scale=1.0, head_dim=1, bias=False)
    layer = layer.double()
    with torch.no_grad():
        layer.in_proj_weight.copy_(torch.tensor([[1.0 / h, 0.0], [1.0 / h, 0.0], [0.0, 1.0]]))
        layer.out_proj.weight.copy_(torch.tensor([[0.0], [1.0]]))
        pairs, queries = tokens(x[None], y[None], x[None])
        masked = layer(queries, pairs, pairs, attn_mask=identity)[0][0, :, 1].numpy()
        unmasked = layer(queries, pairs, pairs)[0][0, :, 1].numpy()
    loo_context.append(np.mean((masked - y) ** 2))
    resubstitution.append(np.mean((unmasked - y) ** 2))
loo_regressor, loo_context = np.array(loo_regressor), np.array(loo_context)
print(
    "AttentionRegressor's leave-one-out loss against the masked in-context loss: largest "
    f"difference {np.max(np.abs(loo_regressor - loo_context)):.1e} over {len(BANDWIDTHS)} "
    f"bandwidths (losses from {loo_context.min():.3f} to {loo_context.max():.3f})"
)

# %%
# The figure.
plt.rcParams.update({"font.size": 10})
figure, axes = plt.subplots(2, 2, figsize=(13, 9), dpi=110, layout="constrained")
name = "smooth (ω ≤ 1)"
layer, best = results[name]["layer"], results[name]["best"]
x, y, xq, _ = prompts(1, CLASSES[name], np.random.default_rng(5))
grid = np.linspace(-2.0, 2.0, 200)[None]
with torch.no_grad():
    curve, weights = predict(layer, x, y, grid, need_weights=True)
ax = axes[0, 0]
ax.plot(x[0], y[0], "o", color="black", label="the prompt's 24 pairs")
ax.plot(grid[0], curve[0].numpy(), color="tab:blue", lw=2.5, label="KernelAttention (trained)")
ax.plot(
    grid[0],
    smoother(x, y, grid, best)[0],
    "--",
    color="tab:orange",
    lw=1.5,
    label=f"KernelSmoother, h = {best:.2f}",
)
ax.set_xlabel("x")
ax.set_ylabel("y")
ax.set_title("Predictions on a new prompt (smooth class)")
ax.legend(fontsize=9)

ax = axes[0, 1]
query = 120
order = np.argsort(x[0])
reference = KernelSmoother(bandwidth=best).fit(x[0][:, None], y[0])
ax.plot(
    x[0][order],
    weights[0, query].numpy()[order],
    "o-",
    color="tab:blue",
    label="KernelAttention's weights",
)
ax.plot(
    x[0][order],
    reference.attention_weights(grid[0][query : query + 1, None])[0][order],
    "x--",
    color="tab:orange",
    label=f"KernelSmoother's weights, h = {best:.2f}",
)
ax.axvline(grid[0, query], color="gray", lw=1, label=f"the query, x = {grid[0, query]:.2f}")
ax.set_xlabel("x of the prompt's pairs (keys)")
ax.set_ylabel("weight")
ax.set_title("The weights of one query")
ax.legend(fontsize=9)

ax = axes[1, 0]
for (name, result), color in zip(results.items(), ["tab:blue", "tab:red"], strict=True):
    ax.plot(BANDWIDTHS, result["gap"], color=color, label=f"model trained on {name}")
    ax.axvline(BANDWIDTHS[np.argmin(result["error"])], color=color, ls="--", lw=1)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("bandwidth h of KernelSmoother")
ax.set_ylabel("RMS difference from the model")
ax.set_title(
    "The learned bandwidth follows the function class\n(dashed: the h of lowest in-context error)"
)
ax.legend(fontsize=9)

ax = axes[1, 1]
ax.plot(
    BANDWIDTHS,
    loo_regressor,
    color="tab:green",
    lw=4,
    alpha=0.5,
    label="AttentionRegressor: leave-one-out loss",
)
ax.plot(BANDWIDTHS, loo_context, "k.", label="in-context loss, own pair masked")
ax.plot(BANDWIDTHS, resubstitution, color="gray", label="in-context loss, nothing masked")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("bandwidth h (metric W = 1/h)")
ax.set_ylabel("mean squared error")
ax.set_title("Leave-one-out = in-context loss with the query's pair masked")
ax.legend(fontsize=9)
path = os.path.join(args.out, "18_in_context_regression.png")
figure.savefig(path)
print(f"wrote {path}")
