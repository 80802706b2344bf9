"""The time-to-accuracy workload: a character-level transformer language model on real English
text that ships with Debian (the `fortunes` package: quotations, literature, songs, science;
about 2 MB), so nothing is downloaded. Shared by tta_rank.py (training) and the smoke test.
"""
import glob
import os

import torch

CORPUS_GLOB = "/usr/share/games/fortunes/*"
VAL_FRACTION = 0.05


def load_corpus(pattern=CORPUS_GLOB):
    """Every plain-text fortune file (not the .dat indexes, not links), sorted, concatenated;
    '%' separators between fortunes become blank lines."""
    paths = sorted(p for p in glob.glob(pattern)
                   if not p.endswith((".dat", ".u8", "ascii-art")) and os.path.isfile(p)
                   and not os.path.islink(p))
    if not paths:
        raise FileNotFoundError(f"no text under {pattern}: apt-get install fortunes")
    parts = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            parts.append(f.read().replace("\n%\n", "\n\n"))
    return "\n".join(parts)


class Corpus:
    """Byte-level tokens (vocabulary 256: no tokenizer to agree on) split into train and a
    held-out tail for validation."""

    vocab = 256

    def __init__(self, text):
        data = torch.tensor(list(text.encode("utf-8")), dtype=torch.uint8)
        cut = int(len(data) * (1 - VAL_FRACTION))
        self.train, self.val = data[:cut], data[cut:]

    def batch(self, split, batch, seq, generator):
        """`batch` random windows of seq+1 tokens: inputs and next-token targets."""
        data = self.train if split == "train" else self.val
        starts = torch.randint(0, len(data) - seq - 1, (batch,), generator=generator)
        windows = torch.stack([data[s:s + seq + 1] for s in starts.tolist()]).long()
        return windows[:, :-1], windows[:, 1:]


class LanguageModel(torch.nn.Module):
    """Pre-norm transformer decoder (torch's encoder layer with a causal mask): works on
    torch 1.13 and 2.x alike."""

    def __init__(self, vocab, d_model, layers, heads, seq):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model)
        self.position = torch.nn.Parameter(torch.zeros(seq, d_model))
        layer = torch.nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=4 * d_model, dropout=0.0, activation="gelu",
            batch_first=True, norm_first=True)
        self.blocks = torch.nn.ModuleList(_clone(layer) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d_model)
        self.head = torch.nn.Linear(d_model, vocab, bias=False)
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)
        torch.nn.init.normal_(self.position, std=0.02)

    def forward(self, tokens):
        n = tokens.shape[1]
        x = self.embed(tokens) + self.position[:n]
        for block in self.blocks:
            x = block(x, src_mask=self.mask[:n, :n])
        return self.head(self.norm(x))


def _clone(layer):
    import copy
    fresh = copy.deepcopy(layer)
    for p in fresh.parameters():  # independent initialisation per layer
        if p.dim() > 1:
            torch.nn.init.xavier_uniform_(p)
    return fresh


def loss_of(model, inputs, targets):
    logits = model(inputs)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))


@torch.no_grad()
def validation_loss(model, corpus, batches, batch, seq, seed):
    """Mean loss over a fixed set of held-out windows (the same for every variant and step)."""
    g = torch.Generator().manual_seed(10_000 + seed)
    model.eval()
    total = sum(float(loss_of(model, *corpus.batch("val", batch, seq, g)))
                for _ in range(batches))
    model.train()
    return total / batches
