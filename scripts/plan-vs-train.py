#!/usr/bin/env python3
"""The memory planner held to account: `frugal plan`'s predicted peak against the peak that
`frugal train` measures for the same options, for each configuration given, as a Markdown table.

    scripts/plan-vs-train.py FRUGAL DATA_DIR [--tolerance 0.05] CONFIG...

Each CONFIG is one string of flags both commands take ("--model cnn --batch-size 32"). The training
run is short (--steps 3, no evaluation), enough for the optimizer's state to exist and a steady step
to follow. A configuration that offloads the optimizer (`--offload optimizer`) gets a second row: the
pinned host memory planned (`host_bytes`) against the peak the run measured (`peak_pinned_host_bytes`;
on a GPU that also holds the loader's pinned staging buffers, which the plan's host figure does not,
and with `--optimizer adafactor` its update's temporaries, which it does not either).
Exits 1 if any prediction is off by more than the tolerance (relative to the measured
peak), 2 on bad arguments. Uses only the standard library.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile


def run_json(command, json_path):
    result = subprocess.run(command + ["--json", json_path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.exit(f"plan-vs-train: {' '.join(command)} exited {result.returncode}: {result.stderr.strip()}")
    with open(json_path) as f:
        return json.load(f)


def mib(n):
    return f"{n / 2**20:.2f} MiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("frugal")
    parser.add_argument("data")
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()
    rows, worst = [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs:
            flags = shlex.split(config)
            plan = run_json([args.frugal, "plan"] + flags, os.path.join(tmp, "plan.json"))
            run = run_json([args.frugal, "train", "--data", args.data, "--steps", "3", "--no-eval"] + flags,
                           os.path.join(tmp, "train.json"))
            pairs = [(f"`{config}`", plan["peak_bytes"], run["peak_allocated_bytes"])]
            if plan.get("host_bytes", 0) > 0:
                pairs.append((f"`{config}` (pinned host)", plan["host_bytes"], run["peak_pinned_host_bytes"]))
            for name, predicted, measured in pairs:
                error = (predicted - measured) / measured
                worst = max(worst, abs(error))
                rows.append(f"| {name} | {mib(predicted)} | {mib(measured)} | {100 * error:+.2f}% |")
    print("| configuration | predicted peak | measured peak | error |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nlargest error {100 * worst:.2f}% (tolerance {100 * args.tolerance:.0f}%)")
    return 1 if worst > args.tolerance else 0


if __name__ == "__main__":
    sys.exit(main())
