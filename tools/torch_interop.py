#!/usr/bin/env python3
"""Trains a small model a few steps in PyTorch and saves it with safetensors, for
ember to load (tools/gpu_interop.sh; tests/interop/torch_model.cpp is the same
model in ember).

Usage: torch_interop.py OUTDIR   writes OUTDIR/weights.safetensors (the state dict
under "model.", as a wrapper module would name it) and OUTDIR/io.safetensors
("tokens", PyTorch's float32 "logits" on the CPU, and "logits64": the same weights
in float64).
"""
import os
import sys

import torch
from torch import nn

try:
    from safetensors.torch import save_file
except ImportError:
    sys.exit("torch_interop: the safetensors package is missing (pip install safetensors)")

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
vocab, dim, hidden, classes, n = 50, 32, 64, 10, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Embedding(vocab, dim), nn.Linear(dim, hidden), nn.GELU(),
                      nn.LayerNorm(hidden), nn.Linear(hidden, classes)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
tokens = torch.randint(0, vocab, (n,))
targets = torch.randint(0, classes, (n,))
for step in range(20):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(tokens.to(device)), targets.to(device))
    loss.backward()
    opt.step()
    if step % 5 == 0 or step == 19:
        print(f"torch step {step:2d}  loss {loss.item():.4f}")

model = model.cpu().eval()
state = {"model." + k: v.detach().contiguous() for k, v in model.state_dict().items()}
save_file(state, os.path.join(out, "weights.safetensors"), metadata={"format": "pt"})
with torch.no_grad():
    logits = model(tokens)
    logits64 = model.double()(tokens)
save_file({"tokens": tokens, "logits": logits.contiguous(), "logits64": logits64.contiguous()},
          os.path.join(out, "io.safetensors"))
print(f"torch_interop: trained on {device}, saved {len(state)} tensors to {out}")
