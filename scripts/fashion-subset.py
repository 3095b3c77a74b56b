#!/usr/bin/python3
# Writes the first TRAIN training and TEST test samples of Fashion-MNIST as IDX files into OUT, named
# as the originals so that frugal finds the test split beside the training split:
#   scripts/fashion-subset.py SOURCE OUT TRAIN TEST      SOURCE: the folder of the .gz IDX files
# Used by tests/train_check.sh (checks that train in seconds) and scripts/reproduce.sh.
# Not here: checking the files (frugal's IDX reader does that when it opens them).
import gzip
import struct
import sys

source, out, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for split, n in (("train", n_train), ("t10k", n_test)):
    images = gzip.open(f"{source}/{split}-images-idx3-ubyte.gz").read()
    labels = gzip.open(f"{source}/{split}-labels-idx1-ubyte.gz").read()
    with open(f"{out}/{split}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + images[16:16 + n * 784])
    with open(f"{out}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels[8:8 + n])
