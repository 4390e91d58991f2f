"""A DistilBERT-shaped text encoder in plain torch (no transformers), built with seeded weights:
token and position embeddings read by int64 ids, an additive attention mask from an int64
mask, post-norm blocks of multi-head attention and a GELU MLP.  Used by the typed-input tests
(tests/test_typed_inputs*.py)."""

from __future__ import annotations

import math


def tiny_encoder(vocab: int = 1000, dim: int = 64, heads: int = 4, layers: int = 2, max_positions: int = 64,
                 seed: int = 0):
    """The encoder as an ``nn.Module`` taking ``(input_ids, attention_mask)``, both int64 [B, L]."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

        def forward(self, x, bias):
            b, length, _ = x.shape
            q, k, v = self.qkv(x).reshape(b, length, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / math.sqrt(dim // heads) + bias
            y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, length, dim)
            x = self.norm1(x + self.out(y))
            return self.norm2(x + self.mlp(x))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(max_positions, dim)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.LayerNorm(dim)

        def forward(self, input_ids, attention_mask):
            length = input_ids.shape[1]
            x = self.norm(self.tokens(input_ids) + self.positions.weight[:length])
            # BERT's additive mask: 0 where attended, -10000 where padded
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for block in self.blocks:
                x = block(x, bias)
            return x

    torch.manual_seed(seed)
    return Encoder().eval()


def save_encoder(path, length: int = 16, kind: str = "torchscript", **kw):
    """The encoder saved as TorchScript (``.pt``, traced) or an ExportedProgram (``.pt2``)."""
    import torch

    model = tiny_encoder(**kw)
    vocab = kw.get("vocab", 1000)
    ids = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, length, dtype=torch.int64)
    with torch.no_grad():
        if kind == "torchscript":
            torch.jit.trace(model, (ids, mask)).save(str(path))
        else:
            torch.export.save(torch.export.export(model, (ids, mask)), str(path))
    return model
