"""Attention maps of a small model, read as kernel smoothers
=========================================================

**The question.** Every head of a transformer is a Nadaraya–Watson smoother over the tokens:
its weights are a softmax of the logits ``qᵢᵀkⱼ``, each output a weighted average of the
values. Read that way, how local is each head — how many tokens does it average — and how
well could linear attention, a feature map ``φ`` of rank r with ``κ(q, k) ≈ φ(q)ᵀφ(k)``,
replace it?

**The model.** A tiny decoder layer built by hand in numpy (no download, no training): a
sequence of 128 tokens from a vocabulary of 6 (a Markov chain that tends to repeat), each
token's input the sum of a token embedding and a sinusoidal position code. Four heads of
dimension 16, causal, each built to do one thing: *previous token* (the position code
rotated by one step, sharp), *same token* (the token embeddings, sharp), *recent window*
(the position codes themselves, soft) and *diffuse* (small random projections). The maps
come from one batched call, ``softmax_attention(q, k, v, is_causal=True,
return_weights=True)`` on (heads, L, d) arrays.

**What to look at.** In ``15_attention_maps_of_a_small_model.png`` (numbers from the run
this text was written from; the script prints its own):

- top row: the four attention maps (queries down, keys across, a power-law colour scale;
  the upper triangle is empty, the model is causal). The previous-token head is a line just
  below the diagonal; the same-token head vertical stripes (each query spreads over the
  earlier occurrences of its token); the window head a band along the diagonal that fades
  to the left; the diffuse head a wash over the whole prefix;
- bottom left: kernattn's diagnostics, the effective number of neighbours
  ``effective_neighbors(weights) = exp(attention_entropy(weights))`` of each head at every
  position. A causal head at position i can average at most i + 1 tokens (dotted): the
  diffuse head follows that line (63 on average), the window head stays below it (43), the
  same-token head jumps with the number of earlier occurrences of each token (11), the
  previous-token head stays at 1;
- bottom right: how well positive random features (FAVOR+,
  ``feature_maps.PositiveRandomFeatures``, orthogonal, r features) replace each head, as
  causal linear attention (``linear_attention(..., is_causal=True)``: running sums, an RNN):
  the total-variation distance between the exact and the implied attention weights, against
  r (median and range over 5 seeds). The diffuse head is matched to 2 % at r = 512 (12 % at
  r = 8); the previous-token head stays near 70 % even at r = 512. The variance of positive
  features grows like exp(‖q + k‖²), and a sharp head is one with large logits: the mean
  ‖q + k‖² is 1.5 for the diffuse head, 5 for the window, 296 for the previous-token head.
  The same-token head, sharp too (43), still improves quickly with r: its keys take only 6
  distinct values, and equal keys get equal feature estimates, whose errors cancel in the
  normalisation. **A head's entropy is a first guide to how hard it is to linearise**; the
  size of its logits and the number of distinct keys complete it.

Run ``python 15_attention_maps_of_a_small_model.py [--out DIR]``.

**Run time.** About 5 s on 2 cores (5 s with ``KERNATTN_SMOKE=1``).
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the sizes (tests).
import argparse
import os

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import PowerNorm

from kernattn.attention import (
    attention_entropy,
    effective_neighbors,
    linear_attention,
    softmax_attention,
)
from kernattn.feature_maps import PositiveRandomFeatures

parser = argparse.ArgumentParser(description="Attention maps of a small model.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"
L = 64 if SMOKE else 128
RANKS = [8, 32, 128] if SMOKE else [8, 16, 32, 64, 128, 256, 512]
SEEDS = 2 if SMOKE else 5
rng = np.random.default_rng(0)

# %%
# The sequence and its inputs: token embeddings plus sinusoidal position codes.
n_tokens, d_head = 6, 16
tokens = [0]
for _ in range(L - 1):
    # A Markov chain that repeats the last token half of the time: repeated tokens give the
    # same-token head something to find.
    tokens.append(tokens[-1] if rng.random() < 0.5 else int(rng.integers(n_tokens)))
tokens = np.array(tokens)
embedding = rng.normal(size=(n_tokens, d_head)) / np.sqrt(d_head)
frequencies = 1.0 / 24.0 ** (np.arange(d_head // 2) / (d_head // 2))


def position_code(positions):
    """[cos ωp, sin ωp] per frequency ω: ⟨code(i), code(j)⟩ = Σ cos ω(i − j)."""
    angles = np.outer(positions, frequencies)
    return np.concatenate([np.cos(angles), np.sin(angles)], axis=1) / np.sqrt(d_head // 2)


positions = np.arange(L)
code = position_code(positions)

# %%
# Four heads, each a (query, key) pair of (L, 16) arrays with the sharpness built in (the
# scale of softmax_attention is 1). Rotating a position code by one step is the code of the
# previous position, so ``code(i − 1) · code(j)`` peaks at j = i − 1.
heads = {
    "previous token": (12.0 * position_code(positions - 1), 12.0 * code),
    "same token": (4.0 * embedding[tokens], 4.0 * embedding[tokens]),
    "recent window": (1.6 * code, 1.6 * code),
    "diffuse": tuple(
        (embedding[tokens] + code) @ (0.15 * rng.normal(size=(d_head, d_head))) for _ in range(2)
    ),
}
names = list(heads)
q = np.stack([heads[name][0] for name in names])  # (heads, L, 16)
k = np.stack([heads[name][1] for name in names])
v = (embedding[tokens] + code) @ rng.normal(size=(d_head, 8))  # shared by the heads
out, weights = softmax_attention(q, k, v, is_causal=True, scale=1.0, return_weights=True)
causal = np.tril(np.ones((L, L), dtype=bool))  # the pairs the causal heads see

# %%
# kernattn's diagnostics of the maps: entropy and effective neighbours per head.
entropy = attention_entropy(weights)  # (heads, L), nats
n_eff = effective_neighbors(weights)
for h, name in enumerate(names):
    # The variance of positive random features grows like exp(‖q + k‖²).
    size = np.mean(np.sum((q[h][:, None] + k[h][None]) ** 2, axis=-1)[causal])
    print(
        f"{name:>15}: mean entropy {entropy[h].mean():.2f} nats, effective neighbours "
        f"{n_eff[h].mean():.1f} (median {np.median(n_eff[h]):.1f}), mean ‖q + k‖² {size:.1f}"
    )

# %%
# How well does causal linear attention with r positive random features replace each head?
# The implied weights are φ(qᵢ)ᵀφ(kⱼ) over the prefix, normalized; the outputs come from
# linear_attention's running sums.
weight_error = np.empty((len(names), len(RANKS), SEEDS))
output_error = np.empty((len(names), len(RANKS), SEEDS))
for h, name in enumerate(names):
    spread = np.abs(out[h] - out[h].mean(axis=0)).mean()
    for i, r in enumerate(RANKS):
        for seed in range(SEEDS):
            phi = PositiveRandomFeatures(r).fit(k[h], queries=q[h], random_state=seed)
            # A factor of the query alone cancels in the ratio: shift the query's log
            # features to a maximum of 0, so that large logits cannot overflow.
            phi_q, phi_k = np.exp(phi.shifted_log_transform(q[h])), phi.transform(k[h])
            implied = np.where(causal, phi_q @ phi_k.T, 0.0)
            implied /= implied.sum(axis=1, keepdims=True)
            weight_error[h, i, seed] = 0.5 * np.abs(implied - weights[h]).sum(axis=1).mean()
            linear = linear_attention(phi_q, phi_k, v, is_causal=True)
            output_error[h, i, seed] = np.abs(linear - out[h]).mean() / spread
    print(
        f"{name:>15}: weight error at r={RANKS[0]} {np.median(weight_error[h, 0]):.3f}, "
        f"at r={RANKS[-1]} {np.median(weight_error[h, -1]):.3f}; output error at "
        f"r={RANKS[-1]} {np.median(output_error[h, -1]):.3f} of the outputs' spread"
    )

# %%
# The figure: the four maps, the effective neighbours along the sequence, the feature-map
# error against r.
plt.rcParams.update({"font.size": 10})
figure = plt.figure(figsize=(13, 8.2), dpi=110, layout="constrained")
grid = figure.add_gridspec(2, 4, height_ratios=[1, 1.05])
colors = ["tab:red", "tab:blue", "tab:green", "tab:gray"]
for h, name in enumerate(names):
    ax = figure.add_subplot(grid[0, h])
    shown = np.where(causal, weights[h], np.nan)
    # A power norm: the small weights of the broad heads stay visible next to weights of 1.
    image = ax.imshow(shown, cmap="magma_r", norm=PowerNorm(0.4, vmin=0.0, vmax=1.0))
    ax.set_title(f"{name}\n{n_eff[h].mean():.1f} effective neighbours", color=colors[h])
    ax.set_xlabel("key position j")
    if h == 0:
        ax.set_ylabel("query position i")
    figure.colorbar(image, ax=ax, shrink=0.8, label="weight" if h == 3 else None)

ax = figure.add_subplot(grid[1, :2])
for h, name in enumerate(names):
    ax.plot(positions, n_eff[h], color=colors[h], label=name)
ax.plot(positions, positions + 1, ":", color="black", label="i + 1 (all the prefix)")
ax.set_yscale("log")
ax.set_xlabel("query position i")
ax.set_ylabel("effective neighbours exp(entropy)")
ax.set_title("How many tokens each head averages")
ax.legend(loc="lower right", bbox_to_anchor=(1.0, 0.08), fontsize=9)

ax = figure.add_subplot(grid[1, 2:])
for h, name in enumerate(names):
    median = np.median(weight_error[h], axis=1)
    ax.plot(RANKS, median, "o-", color=colors[h], label=name)
    ax.fill_between(
        RANKS,
        weight_error[h].min(axis=1),
        weight_error[h].max(axis=1),
        color=colors[h],
        alpha=0.15,
    )
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("features r (positive random features, orthogonal)")
ax.set_ylabel("weight error (total variation)")
ax.set_title("Causal linear attention in place of each head")
ax.legend(loc="lower left", fontsize=9)
path = os.path.join(args.out, "15_attention_maps_of_a_small_model.png")
figure.savefig(path)
print(f"wrote {path}")
