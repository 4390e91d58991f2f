"""A DistilBERT-shaped text encoder in plain torch (no transformers), built with seeded weights:
token and position embeddings read by int64 ids, an additive attention mask from an int64
mask, post-norm blocks of multi-head attention and a GELU MLP.  Used by the typed-input tests
(tests/test_typed_inputs*.py)."""

from __future__ import annotations

import math


def tiny_encoder(vocab: int = 1000, dim: int = 64, heads: int = 4, layers: int = 2, max_positions: int = 64,
                 seed: int = 0, sdpa: bool = False):
    """The encoder as an ``nn.Module`` taking ``(input_ids, attention_mask)``, both int64 [B, L].

    ``sdpa``: attention as HuggingFace's default writes it, ``scaled_dot_product_attention`` with
    a boolean mask (torch's exporters then write ``Where(mask, 0, -inf)`` before the softmax and
    ``Where(IsNaN(p), 0, p)`` after it); otherwise BERT's additive mask of -10000."""
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
            if sdpa:
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            else:
                y = (q @ k.transpose(-1, -2) / math.sqrt(dim // heads) + bias).softmax(-1) @ v
            y = y.transpose(1, 2).reshape(b, length, dim)
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
            if sdpa:  # True where attended
                bias = attention_mask[:, None, None, :].bool().expand(-1, 1, length, -1)
            else:  # BERT's additive mask: 0 where attended, -10000 where padded
                bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for block in self.blocks:
                x = block(x, bias)
            return x

    torch.manual_seed(seed)
    return Encoder().eval()


def save_encoder(path, length: int = 16, kind: str = "torchscript", **kw):
    """The encoder saved as TorchScript (``.pt``, traced), an ExportedProgram (``.pt2``) or an
    ONNX file from torch's default (dynamo) exporter (``onnx``)."""
    import torch

    model = tiny_encoder(**kw)
    vocab = kw.get("vocab", 1000)
    ids = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, length, dtype=torch.int64)
    with torch.no_grad():
        if kind == "torchscript":
            torch.jit.trace(model, (ids, mask)).save(str(path))
        elif kind == "pt2":
            torch.export.save(torch.export.export(model, (ids, mask)), str(path))
        else:
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                torch.onnx.export(model, (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                                  output_names=["output"])
    return model
