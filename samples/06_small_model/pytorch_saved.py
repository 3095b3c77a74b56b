#!/usr/bin/python3
# The peer figure for sample 06: what PyTorch saves for backward per sample for MobileNetV2 at 32x32,
# one channel, f32, batch 8, with the standard and the CIFAR stem: every tensor autograd packs
# (torch.autograd.graph.saved_tensors_hooks), summed. Run with Debian's python3-torch 1.13 and
# python3-torchvision 0.14:  /usr/bin/python3 samples/06_small_model/pytorch_saved.py
# frugal never imports PyTorch; this script only measures the peer.
import torch
import torchvision

BATCH = 8
for cifar in (False, True):
    model = torchvision.models.mobilenet_v2(num_classes=10)
    model.features[0][0] = torch.nn.Conv2d(1, 32, 3, 1 if cifar else 2, 1, bias=False)
    if cifar:
        model.features[2].conv[1][0].stride = (1, 1)
    model.train()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        logits = model(torch.randn(BATCH, 1, 32, 32))
        torch.nn.functional.cross_entropy(logits, torch.zeros(BATCH, dtype=torch.long))
    total = sum(t.numel() * t.element_size() for t in saved)
    print(f"{'CIFAR' if cifar else 'standard'} stem: {len(saved)} saved tensors, "
          f"{total / BATCH / 2**20:.3f} MiB per sample")
