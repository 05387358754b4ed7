"""Induction heads in a two-layer attention-only model
===================================================

**The question.** The thread says heads "learn distinct, interpretable jobs", that
"induction heads are concrete evidence" of it, and that "many are redundant (you can prune a
lot of them)". Does that hold for a model small enough to train here in under a minute, and
what do kernattn's diagnostics of a Nadaraya–Watson smoother say about its heads?

**The model and the task.** Sequences of 32 random tokens (vocabulary 16) whose last 2m
tokens are a segment of m tokens (5 ≤ m ≤ 12, drawn per sequence) written twice. Once the
second copy has begun, its next token can be read off the first copy: find the earlier
occurrence of the current token and copy the token after it. The model is token plus
learned position embeddings, two causal layers of :class:`kernattn.torch.KernelAttention`
(2 heads of dimension 16 each, residual connections, no MLP) and a linear read-out, trained
with Adam on next-token prediction over whole sequences.

**How the heads are found.** On 256 held-out sequences, from each head's attention weights
``w[i, j]``:

- *previous-token score*: the mean weight a query puts on the key just before it,
  ``w[i, i − 1]``;
- *induction score*: over the positions t of the second copy, the mean weight on key
  ``t − m + 1``, the token after the previous occurrence of the current token;
- *same-token score*: the mean total weight on earlier keys that hold the query's token.

The textbook circuit is a previous-token head in layer 1 and an induction head in layer 2.
The script reports the layer-1 head with the largest previous-token score, the layer-2 head
with the largest induction score, and the layer-1 head whose pruning costs most.

**What to look at.** In ``17_induction_heads.png`` (numbers from the run this text was
written from, 52 s on 2 shared cores; the script prints its own):

- top left: the loss on the tokens of the second copy that can be predicted (the first
  token of the copy cannot) with the softmax kernel (the Transformer's), the Gaussian kernel
  ``exp(−½ s‖q − k‖²)`` and the linear kernel ``elu(q)ᵀelu(k)`` (+1). The softmax model sits
  near the entropy of a random token (log 16 = 2.77) for about 300 steps, falls a little,
  and then drops suddenly around step 800 (halfway down at step 811; 2.81 → 0.79). The
  Gaussian model drops earlier (step 422) and further (0.58); the linear model learns the
  task only partially and gradually (2.05 at the end);
- bottom left: the scores. **The induction heads are clear:** both layer-2 heads put 0.62
  and 0.60 of their weight on the token after the previous occurrence. **The previous-token
  head is not there:** the best previous-token score in layer 1 is 0.10 (head 1, a diffuse
  head). The layer-1 head the model needs (head 0, top middle) is a *same-token* head: 0.40
  of its weight on earlier occurrences of the query's token (most of the rest on itself,
  where the token has not occurred before), and 0.01 on the previous token. That is a
  different route to the same job (a token of the second copy finds the position of its
  earlier occurrence, and layer 2 can then look one position further), which the patterns
  suggest and this example does not prove;
- top right: the induction head's map on one held-out sequence: a line m − 1 places below
  the diagonal once the second copy begins (cyan);
- bottom middle: the heads as kernel smoothers, the mean effective number of neighbours
  ``effective_neighbors(weights)`` (``exp`` of ``attention_entropy``) over the second copy:
  the same-token head 2.1 (0.62 nats), the induction heads 3.2 and 3.4, the diffuse layer-1
  head 12.8;
- bottom right: pruning each head alone (its columns of the output projection set to 0),
  the increase of the held-out loss on the second copy (0.69 unpruned): the same-token
  head 1.66 nats, the two induction heads 0.97 and 0.83 (they share the job, neither is
  redundant), the diffuse head −0.04 (the model is slightly better without it). **One head
  of four can be pruned for free; the three that do the job cannot.**

Run ``python 17_induction_heads.py [--out DIR]``. It needs torch, the CPU build is enough:
``pip install torch --index-url https://download.pytorch.org/whl/cpu``, then the torch extra
from the repository's root, ``pip install ".[torch]"``.

**Run time.** About 35 s on 2 cores (10 s with ``KERNATTN_SMOKE=1``).
"""

# %%
# Setup. ``KERNATTN_SMOKE=1`` shrinks the training (tests).
import argparse
import os

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import PowerNorm
from torch import nn

from kernattn.attention import attention_entropy, effective_neighbors
from kernattn.torch import KernelAttention

parser = argparse.ArgumentParser(description="Induction heads in a two-layer model.")
parser.add_argument("--out", default=".", help="folder for the figure (default: here)")
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
SMOKE = os.environ.get("KERNATTN_SMOKE") == "1"
STEPS = 60 if SMOKE else 1200
# torch's threads: its default, the machine's cores (the header's time is for 2).
print(f"torch threads: {torch.get_num_threads()}")
VOCAB, LENGTH, WIDTH, HEADS = 16, 32, 32, 2
KERNELS = {"softmax": "softmax", "gaussian": "gaussian", "linear (elu + 1)": "elu"}


# %%
# The task: random tokens whose last 2m form a segment written twice.
def sequences(n, generator):
    """Tokens (n, LENGTH), the segment lengths m, and which next-token targets (n, LENGTH − 1)
    can be read off the first copy (the second copy after its first token)."""
    tokens = torch.randint(VOCAB, (n, LENGTH), generator=generator)
    m = torch.randint(5, 13, (n,), generator=generator)
    predictable = torch.zeros(n, LENGTH - 1, dtype=torch.bool)
    for b, length in enumerate(m.tolist()):
        start = LENGTH - 2 * length
        tokens[b, start + length :] = tokens[b, start : start + length]
        # Target t + 1 is predictable for t from the copy's first token on.
        predictable[b, start + length : LENGTH - 1] = True
    return tokens, m, predictable


class AttentionOnly(nn.Module):
    """Embeddings, two causal KernelAttention layers with residual connections, read-out."""

    def __init__(self, kernel):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(0.3 * torch.randn(LENGTH, WIDTH))
        self.layers = nn.ModuleList(KernelAttention(WIDTH, HEADS, kernel=kernel) for _ in "12")
        self.unembed = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens, need_weights=False):
        h = self.embed(tokens) + self.position
        maps = []
        for layer in self.layers:
            update, weights = layer(
                h, is_causal=True, need_weights=need_weights, average_attn_weights=False
            )
            h = h + update
            maps.append(weights)
        return self.unembed(h), maps


def token_losses(model, tokens):
    logits, _ = model(tokens)
    log_p = torch.log_softmax(logits[:, :-1], dim=-1)
    return -log_p.gather(-1, tokens[:, 1:, None])[..., 0]


def train(kernel, steps):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    model = AttentionOnly(kernel)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    curve = []
    for _ in range(steps):
        tokens, _, predictable = sequences(32, generator)
        losses = token_losses(model, tokens)
        optimizer.zero_grad()
        losses.mean().backward()
        optimizer.step()
        curve.append(losses.detach()[predictable].mean().item())
    return model, np.array(curve)


def drop_step(curve, window=25):
    """The first step at which the smoothed loss is halfway from its start to its end."""
    smooth = np.convolve(curve, np.ones(window) / window, mode="valid")
    halfway = 0.5 * (smooth[0] + smooth[-1])
    return int(np.argmax(smooth < halfway)) + window // 2


# %%
# Train one model per kernel, same data and seeds.
models, curves = {}, {}
for name, kernel in KERNELS.items():
    models[name], curves[name] = train(kernel, STEPS)
    print(
        f"{name:>17}: loss on the second copy {curves[name][:25].mean():.2f} at the start, "
        f"{curves[name][-50:].mean():.2f} at the end, halfway down at step "
        f"{drop_step(curves[name])}"
    )

# %%
# Find the heads of the softmax model from their attention patterns on held-out sequences.
model = models["softmax"]
tokens, m, predictable = sequences(256, torch.Generator().manual_seed(1))
with torch.no_grad():
    base = token_losses(model, tokens)[predictable].mean().item()
    _, maps = model(tokens, need_weights=True)
maps = [weights.numpy() for weights in maps]  # (batch, heads, query, key) per layer
rows = np.arange(1, LENGTH)
second = np.zeros((256, LENGTH), dtype=bool)
second[:, 1:] = predictable.numpy()  # queries t whose token has an earlier occurrence
batch_index, query_index = np.nonzero(second)
after_previous = query_index - m.numpy()[batch_index] + 1
# Keys before the query that hold the query's own token.
held = tokens.numpy()
earlier_same = (held[:, :, None] == held[:, None, :]) & np.tri(LENGTH, k=-1, dtype=bool)
scores = {}
for layer in range(2):
    for head in range(HEADS):
        w = maps[layer][:, head]
        previous = w[:, rows, rows - 1].mean()
        induction = w[batch_index, query_index, after_previous].mean()
        same = (w * earlier_same).sum(axis=-1).mean()
        # kernattn's diagnostics of the head as a smoother, over the second copy.
        entropy = attention_entropy(w)[second].mean()
        neighbours = effective_neighbors(w)[second].mean()
        scores[layer, head] = (previous, induction, entropy, neighbours, same)
        print(
            f"layer {layer + 1} head {head}: previous-token score {previous:.2f}, induction "
            f"score {induction:.2f}, same-token score {same:.2f}, entropy {entropy:.2f} nats, "
            f"effective neighbours {neighbours:.1f}"
        )
previous_head = max(range(HEADS), key=lambda h: scores[0, h][0])
induction_head = max(range(HEADS), key=lambda h: scores[1, h][1])
print(
    f"previous-token head: layer 1 head {previous_head}; induction head: layer 2 head "
    f"{induction_head}"
)

# %%
# Prune each head alone: its columns of the output projection set to 0.
costs = {}
for layer in range(2):
    projection = model.layers[layer].out_proj.weight
    for head in range(HEADS):
        columns = slice(head * 16, (head + 1) * 16)
        kept = projection[:, columns].detach().clone()
        with torch.no_grad():
            projection[:, columns] = 0.0
            costs[layer, head] = token_losses(model, tokens)[predictable].mean().item() - base
            projection[:, columns] = kept
        print(f"pruning layer {layer + 1} head {head} costs {costs[layer, head]:+.2f} nats")

# The layer-1 head the model needs most (largest pruning cost), whatever its pattern.
needed_head = max(range(HEADS), key=lambda h: costs[0, h])
print(f"the layer-1 head whose pruning costs most: head {needed_head}")

# %%
# The figure.
plt.rcParams.update({"font.size": 10})
figure, axes = plt.subplots(2, 3, figsize=(14, 8.6), dpi=110, layout="constrained")
colors = {"softmax": "tab:blue", "gaussian": "tab:green", "linear (elu + 1)": "tab:orange"}
ax = axes[0, 0]
for name, curve in curves.items():
    window = 25 if len(curve) > 50 else 1
    smooth = np.convolve(curve, np.ones(window) / window, mode="valid")
    ax.plot(np.arange(len(smooth)) + window // 2, smooth, color=colors[name], label=name)
    ax.axvline(drop_step(curve), color=colors[name], ls=":", lw=1)
ax.axhline(np.log(VOCAB), color="gray", ls="--", lw=1, label="log 16 (a guess)")
ax.set_xlabel("training step")
ax.set_ylabel("loss on the second copy (nats)")
ax.set_title("The sudden drop (dotted: halfway down)")
ax.legend(fontsize=9)

example = int(np.argmax(m.numpy()))  # the sequence with the longest repeat
start = LENGTH - 2 * int(m[example])
for ax, layer, head, job in (
    (axes[0, 1], 0, needed_head, "the layer-1 head it needs"),
    (axes[0, 2], 1, induction_head, "induction head"),
):
    shown = np.where(np.tril(np.ones((LENGTH, LENGTH))) > 0, maps[layer][example, head], np.nan)
    image = ax.imshow(shown, cmap="magma_r", norm=PowerNorm(0.5, vmin=0.0, vmax=1.0))
    ax.axhline(start + int(m[example]) - 0.5, color="tab:cyan", lw=1)
    ax.set_title(f"layer {layer + 1} head {head}: {job}\n(cyan: the second copy starts)")
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position i")
    figure.colorbar(image, ax=ax, shrink=0.85, label="weight")

labels = [f"L{layer + 1}H{head}" for layer in range(2) for head in range(HEADS)]
x = np.arange(len(labels))
ax = axes[1, 0]
ax.bar(x - 0.27, [scores[key][0] for key in scores], 0.27, label="previous-token score")
ax.bar(x, [scores[key][1] for key in scores], 0.27, label="induction score")
ax.bar(x + 0.27, [scores[key][4] for key in scores], 0.27, label="same-token score")
ax.set_xticks(x, labels)
ax.set_ylim(0, 1)
ax.set_ylabel("mean attention weight")
ax.set_title("Finding the heads from their patterns")
ax.legend(fontsize=9)

ax = axes[1, 1]
ax.bar(x, [scores[key][3] for key in scores], color="tab:gray")
for i, key in enumerate(scores):
    ax.text(i, scores[key][3], f"{scores[key][2]:.2f} nats", ha="center", va="bottom")
ax.set_xticks(x, labels)
ax.set_ylabel("effective neighbours exp(entropy)")
ax.set_title("Each head as a smoother (second copy)")

ax = axes[1, 2]
ax.bar(x, [costs[key] for key in costs], color="tab:red")
ax.set_xticks(x, labels)
ax.set_ylabel("loss increase on the second copy (nats)")
ax.set_title(f"Pruning one head at a time (unpruned: {base:.2f})")
path = os.path.join(args.out, "17_induction_heads.png")
figure.savefig(path)
print(f"wrote {path}")
