#!/usr/bin/python3
# The peer figure for sample 06: what PyTorch saves for backward per sample for MobileNetV2 at 32x32,
# one channel, f32, batch 8, with the standard and the CIFAR stem, counted by saved-tensor hooks as
# bench/pytorch_train_peer.py counts it for `frugal bench train` (each storage once, parameters and
# buffers left out). Run with Debian's python3-torch 1.13 and python3-torchvision 0.14:
#   /usr/bin/python3 samples/06_small_model/pytorch_saved.py
# frugal never imports PyTorch; this script only measures the peer.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import torch  # noqa: E402
from pytorch_train_peer import build_model, saved_bytes  # noqa: E402

BATCH = 8
for cifar in (False, True):
    images, labels = torch.randn(BATCH, 1, 32, 32), torch.zeros(BATCH, dtype=torch.long)
    total = saved_bytes(build_model(10, cifar), images, labels)
    print(f"{'CIFAR' if cifar else 'standard'} stem: {total / BATCH / 2**20:.3f} MiB per sample")
