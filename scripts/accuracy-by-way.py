#!/usr/bin/env python3
"""Does a way of training cost accuracy? `frugal train` once per way and seed, the same command
otherwise, and a Markdown table of test accuracies with each way's paired difference from the first
way (the reference) seed by seed: their mean, standard deviation and standard error.

    scripts/accuracy-by-way.py FRUGAL OUT_DIR [--seeds 1-6] [--jobs 2] [--train "FLAGS"] WAY...

Each WAY is NAME=FLAGS ("standard=" or "bf16=--bn-from-output --bit-masks --compress-activations
bf16"); the first is the reference. --train holds the flags every run shares (default: two epochs of
the default model and data at learning rate 0.001, with one loader worker). Each run writes
OUT_DIR/NAME-sSEED.json and .log and runs with OMP_NUM_THREADS=1, --jobs at a time; a run whose
JSON already exists is not repeated, so an interrupted sweep resumes where it stopped. Two epochs
take about 15 minutes per run on one core of a 2-core machine. Exits 1 if a run fails, 2 on bad
arguments. Uses only the standard library.

Why seeds and pairs: training from a different seed moves test accuracy by a few tenths of a point
or more, as much as any rounding difference does, so a single pair of runs cannot show a 0.3-point
difference. Run i of every way uses seed i (the same initial weights and batch order), and the
spread of the paired differences says how far their mean can be trusted.
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import statistics
import subprocess
import sys

DEFAULT_TRAIN_FLAGS = "--epochs 2 --lr 0.001 --workers 1"


def parse_way(text):
    name, sep, flags = text.partition("=")
    if not sep or not name or not name.replace("_", "").replace("-", "").isalnum():
        raise argparse.ArgumentTypeError(f"way '{text}': expected NAME=FLAGS with NAME of letters, digits, '-' or '_'")
    return name, shlex.split(flags)


def parse_seeds(text):
    first, sep, last = text.partition("-")
    try:
        seeds = list(range(int(first), int(last) + 1)) if sep else [int(first)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds '{text}': expected N or FIRST-LAST")
    if not seeds:
        raise argparse.ArgumentTypeError(f"seeds '{text}': the range is empty")
    return seeds


def run_one(frugal, out_dir, train_flags, name, flags, seed):
    """Trains one way from one seed unless its JSON exists; returns its summary."""
    stem = os.path.join(out_dir, f"{name}-s{seed}")
    if not os.path.exists(stem + ".json"):
        partial = stem + ".json.partial"
        command = [frugal, "train", *train_flags, "--seed", str(seed), *flags, "--json", partial]
        with open(stem + ".log", "w") as log:
            result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {result.returncode}; see {stem}.log")
        os.replace(partial, stem + ".json")  # only a finished run counts as done
    with open(stem + ".json") as f:
        return json.load(f)


def spread(values):
    return statistics.stdev(values) if len(values) > 1 else float("nan")


def print_table(ways, seeds, accuracy):
    reference = ways[0][0]
    print("| seed | " + " | ".join(name for name, _ in ways) + " |")
    print("|---|" + "---|" * len(ways))
    for seed in seeds:
        cells = [f"{100 * accuracy[(name, seed)]:.2f}%" for name, _ in ways]
        print(f"| {seed} | " + " | ".join(cells) + " |")
    means = []
    for name, _ in ways:
        values = [100 * accuracy[(name, seed)] for seed in seeds]
        means.append(f"{statistics.mean(values):.2f}% ({spread(values):.2f})")
    print("| mean (standard deviation) | " + " | ".join(means) + " |")
    print()
    for name, _ in ways[1:]:
        differences = [100 * (accuracy[(name, seed)] - accuracy[(reference, seed)]) for seed in seeds]
        error = spread(differences) / len(differences) ** 0.5
        listed = ", ".join(f"{d:+.2f}" for d in differences)
        print(f"{name} - {reference}: {listed}; mean {statistics.mean(differences):+.2f} points, "
              f"standard deviation {spread(differences):.2f}, standard error {error:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frugal")
    parser.add_argument("out_dir")
    parser.add_argument("ways", nargs="+", type=parse_way)
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("1-6"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--train", default=DEFAULT_TRAIN_FLAGS)
    args = parser.parse_args()
    if len(args.ways) < 2:
        parser.error("give at least two ways: the reference first, then those compared with it")
    if len({name for name, _ in args.ways}) != len(args.ways):
        parser.error("two ways share a name")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    os.makedirs(args.out_dir, exist_ok=True)
    train_flags = shlex.split(args.train)

    runs = [(name, flags, seed) for seed in args.seeds for name, flags in args.ways]
    accuracy = {}
    failed = False
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, args.frugal, args.out_dir, train_flags, name, flags, seed): (name, seed)
                   for name, flags, seed in runs}
        for future in concurrent.futures.as_completed(futures):
            name, seed = futures[future]
            if future.cancelled():
                continue
            try:
                accuracy[(name, seed)] = float(future.result()["test_accuracy"])
            except (RuntimeError, KeyError, TypeError, json.JSONDecodeError) as error:
                # Say so now; the runs already going finish (and are kept for a resume), the rest never start.
                print(f"accuracy-by-way: {name}, seed {seed}: {error}", file=sys.stderr)
                for other in futures:
                    other.cancel()
                failed = True
                continue
            print(f"{name} seed {seed}: {100 * accuracy[(name, seed)]:.2f}%", file=sys.stderr)
    if failed:
        sys.exit(1)
    print_table(args.ways, args.seeds, accuracy)


if __name__ == "__main__":
    main()
