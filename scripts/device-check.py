#!/usr/bin/env python3
"""The planner's device figure held to account: for each configuration, `frugal plan` says the device
the run needs (device_needed_bytes); `frugal train` then runs the whole run (every epoch, the test
evaluation included) under exactly that --memory-limit. Prints a Markdown table.

    scripts/device-check.py FRUGAL [--data DIR] [--tolerance 0.10] CONFIG...

Each CONFIG is one string of flags both commands take ("--batch-size 16 --accum 4"). A row passes
when the run completes at the planned device, and that device is at most `tolerance` above the peak
the run reserved (a device figure much larger than needed would be safe but useless). The table also
gives the planned peak reserved against the measured one. Exits 1 if any row fails, 2 on bad
arguments. Uses only the standard library. A whole Fashion-MNIST epoch of MobileNetV2 takes 1.5 to 3
minutes on 2 cores per configuration.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile


def mib(n):
    return f"{n / 2**20:.2f} MiB"


def plan_of(frugal, flags, tmp):
    path = os.path.join(tmp, "plan.json")
    result = subprocess.run([frugal, "plan"] + flags + ["--json", path], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.exit(f"device-check: frugal plan {' '.join(flags)} exited {result.returncode}: {result.stderr.strip()}")
    with open(path) as f:
        return json.load(f)


def train_at(frugal, flags, data, limit, tmp):
    """The run under --memory-limit `limit` bytes: (its JSON or None, its exit code, its last stderr line)."""
    path = os.path.join(tmp, "train.json")
    if os.path.exists(path):
        os.remove(path)
    command = [frugal, "train"] + (["--data", data] if data else []) + flags + ["--memory-limit", str(limit), "--json", path]
    result = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    last = result.stderr.strip().splitlines()[:1]
    if result.returncode != 0 or not os.path.exists(path):
        return None, result.returncode, last[0] if last else ""
    with open(path) as f:
        return json.load(f), 0, ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("frugal")
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--data", default="", help="the training data (default: frugal's, Fashion-MNIST)")
    parser.add_argument("--tolerance", type=float, default=0.10)
    args = parser.parse_args()
    print("| configuration | device needed (planned) | run at it | measured peak reserved | device / measured |"
          " planned peak reserved | planned / measured |")
    print("|---|---|---|---|---|---|---|")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs:
            flags = shlex.split(config)
            name = f"`{config}`" if config else "(the defaults)"
            plan = plan_of(args.frugal, flags, tmp)
            device = plan["device_needed_bytes"]
            run, code, why = train_at(args.frugal, flags, args.data, device, tmp)
            if run is None or run.get("interrupted"):
                failed += 1
                print(f"| {name} | {mib(device)} | **failed** (exit {code}: {why}) | | | {mib(plan['peak_reserved_bytes'])} | |",
                      flush=True)
                continue
            measured = run["peak_reserved_bytes"]
            over = device / measured
            ok = over <= 1.0 + args.tolerance
            failed += 0 if ok else 1
            print(f"| {name} | {mib(device)} | completed | {mib(measured)} | {over:.3f}{'' if ok else ' **over**'} |"
                  f" {mib(plan['peak_reserved_bytes'])} | {plan['peak_reserved_bytes'] / measured:.3f} |", flush=True)
    print(f"\n{len(args.configs) - failed} of {len(args.configs)} configurations completed at the planned device, "
          f"each within {100 * args.tolerance:.0f}% of its measured peak reserved")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
