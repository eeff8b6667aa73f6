"""A small model defined in PyTorch, as a user of oobleck writes one: a token
embedding, causal self-attention blocks with a ReLU MLP, and a head tied to
the embedding. tools/export_model.py exports build()'s layers."""
import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, SEQ_LEN, HIDDEN, HEADS, BLOCKS = 256, 32, 32, 2, 3


class Embedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(VOCAB, HIDDEN) * 0.02)
        self.position = nn.Parameter(torch.randn(SEQ_LEN, HIDDEN) * 0.01)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.weight) + self.position[: tokens.size(1)]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = HEADS
        self.norm1 = nn.LayerNorm(HIDDEN)
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.norm2 = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, 2 * HIDDEN)
        self.down = nn.Linear(2 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        d = hidden // self.heads
        qkv = self.qkv(self.norm1(x)).view(batch, length, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        attended = torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ v
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, hidden))
        return x + self.down(F.relu(self.up(self.norm2(x))))


class Head(nn.Module):
    def __init__(self, embedding):
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.weight = embedding.weight  # tied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) @ self.weight.t()


def build():
    embedding = Embedding()
    return nn.Sequential(embedding, *[Block() for _ in range(BLOCKS)], Head(embedding))
