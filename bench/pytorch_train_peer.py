#!/usr/bin/python3
# The PyTorch peer of `frugal bench train` (bench/train_bench.cpp): torchvision's MobileNetV2, built as
# frugal's models/mobilenet_v2.h builds it for one grey channel, loaded with frugal's own weights and
# batch, timed step by step on request. frugal never imports PyTorch: the benchmark runs this file
# with each peer's interpreter (Debian's /usr/bin/python3 with its torch 1.13, the virtual environment
# scripts/peers.sh makes with today's torch from PyPI, any --peer-python) and talks to it over stdin
# and stdout, one line each way:
#   (started)                          -> "ready torch VERSION threads N", or "unavailable REASON" and exit
#   load KEY CIFAR WEIGHTS BATCH LAYOUT COMPILE
#                                      -> "ok"       CIFAR 0/1; WEIGHTS and BATCH: safetensors files,
#                                                    BATCH with "images" [N, 1, H, W] f32 and "labels" [N] i64;
#                                                    LAYOUT nchw or channels_last (model and batch);
#                                                    COMPILE 1: eval runs torch.compile's model, compiled
#                                                    here by one forward, so the timed ones are warm
#   train KEY                          -> SECONDS    one step: forward (train mode), mean cross-entropy,
#                                                    backward, SGD step (momentum 0.9), zero_grad to none
#   eval KEY                           -> SECONDS    one forward in eval mode under torch.no_grad()
#   saved KEY                          -> BYTES      what a training forward saves for backward
#   threads N                          -> "ok"       torch.set_num_threads(N) for the steps that follow
#                                                    (the benchmark's 1 -> N thread scaling rows)
#   anything that fails                -> "error MESSAGE"
# SECONDS are measured here with time.perf_counter, so the pipe is not part of them.
# Sample 06's pytorch_saved.py imports build_model and saved_bytes.
# Not here: repetition, medians, reports (the benchmark does those).
import json
import struct
import sys
import time

try:
    import torch
    import torchvision
    MISSING = None
except ImportError as e:  # main() says so in one line; the benchmark leaves PyTorch out
    MISSING = str(e)

DTYPES = {"F32": "float32", "I64": "int64", "F64": "float64", "I32": "int32"}


def build_model(num_classes, cifar):
    """torchvision's MobileNetV2 for one input channel. The CIFAR stem (models/mobilenet_v2.h
    cifar_stem) runs the stem and the first stride-2 block, features.2's depthwise convolution, at
    stride 1."""
    model = torchvision.models.mobilenet_v2(num_classes=num_classes)
    model.features[0][0] = torch.nn.Conv2d(1, 32, 3, 1 if cifar else 2, 1, bias=False)
    if cifar:
        model.features[2].conv[1][0].stride = (1, 1)
    return model


def read_safetensors(path):
    """{name: tensor} from a safetensors file: 8 bytes N, N bytes of JSON, then the buffer."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    tensors = {}
    for name, entry in json.loads(data[8:8 + n]).items():
        if name == "__metadata__":
            continue
        begin, end = (8 + n + offset for offset in entry["data_offsets"])
        dtype = getattr(torch, DTYPES[entry["dtype"]])
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(entry["shape"])
    return tensors


def saved_bytes(model, images, labels):
    """Bytes a training forward keeps for backward, seen through saved-tensor hooks: each storage
    once (autograd saves one tensor for several nodes: a convolution's output for BatchNorm and
    ReLU6's output for the next convolution), and no parameters or buffers, which frugal's tag
    `activation` does not count either."""
    model.train()
    owned = {t.data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    storages = {}

    def pack(t):
        # untyped_storage: torch 2's name; torch 1.13 has only storage(), which torch 2 deprecates
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        if storage.data_ptr() not in owned:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.nn.functional.cross_entropy(model(images), labels)
    return sum(storages.values())


class Case:
    def __init__(self, cifar, weights, batch, layout, compile_eval):
        state = read_safetensors(weights)
        self.model = build_model(state["classifier.1.bias"].shape[0], cifar)
        self.model.load_state_dict(state)
        tensors = read_safetensors(batch)
        self.images, self.labels = tensors["images"], tensors["labels"]
        if layout == "channels_last":  # PyTorch's recommended layout for CNNs on the CPU
            self.model = self.model.to(memory_format=torch.channels_last)
            self.images = self.images.contiguous(memory_format=torch.channels_last)
        elif layout != "nchw":
            raise ValueError(f"unknown layout {layout!r}")
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.eval_model = self.model
        if compile_eval:
            if not hasattr(torch, "compile"):
                raise RuntimeError(f"torch {torch.__version__} has no torch.compile")
            self.eval_model = torch.compile(self.model)
            self.eval()  # compiles: the timed calls find it done

    def train(self):
        self.model.train()
        start = time.perf_counter()
        torch.nn.functional.cross_entropy(self.model(self.images), self.labels).backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    def eval(self):
        self.model.eval()
        start = time.perf_counter()
        with torch.no_grad():
            self.eval_model(self.images)
        return time.perf_counter() - start


def answer(cases, words):
    if words[0] == "load":
        key, cifar, weights, batch, layout, compile_eval = words[1:]
        cases[key] = Case(cifar == "1", weights, batch, layout, compile_eval == "1")
        return "ok"
    if words[0] == "threads":
        torch.set_num_threads(int(words[1]))
        return "ok"
    case = cases[words[1]]
    if words[0] == "train":
        return repr(case.train())
    if words[0] == "eval":
        return repr(case.eval())
    if words[0] == "saved":
        return str(saved_bytes(case.model, case.images, case.labels))
    raise ValueError(f"unknown request {words[0]!r}")


def main():
    threads = int(sys.argv[sys.argv.index("--threads") + 1])
    if MISSING:
        print(f"unavailable {MISSING}", flush=True)
        return
    torch.set_num_threads(threads)
    torch.manual_seed(0)  # dropout's masks
    print(f"ready torch {torch.__version__} threads {torch.get_num_threads()}", flush=True)
    cases = {}
    for line in sys.stdin:
        try:
            reply = answer(cases, line.split())
        except Exception as e:  # the benchmark reports it; this process stays up for the next request
            reply = f"error {type(e).__name__}: {e}".replace("\n", " ")
        print(reply, flush=True)


if __name__ == "__main__":
    main()
