#!/usr/bin/env python3
"""Does a way of training cost accuracy? `frugal train` once per way and seed, the same command
otherwise, and a Markdown table of test accuracies with each way's paired difference from the first
way (the reference) seed by seed: their mean, standard deviation and standard error.

    scripts/accuracy-by-way.py FRUGAL OUT_DIR [--seeds 1-6] [--jobs 2] [--train "FLAGS"] WAY...

Each WAY is NAME=FLAGS ("standard=" or "bf16=--bn-from-output --bit-masks --compress-activations
bf16"); the first is the reference. --train holds the flags every run shares (default: two epochs of
the default model and data at learning rate 0.001, with one loader worker). Each run writes
OUT_DIR/NAME-sSEED.json and .log, and the command it ran in .command, with OMP_NUM_THREADS=1,
--jobs at a time; a run whose JSON exists from the same command is not repeated, so an interrupted
sweep resumes where it stopped (one from another command is an error: give another OUT_DIR).
--seeds-of NAME=FIRST-LAST runs a way on fewer seeds than the others; its paired differences use
the seeds both ways ran. Two epochs take about 15 minutes per run on one core of a 2-core machine.
Exits 1 if a run fails, 2 on bad arguments. Uses only the standard library.

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
    partial = stem + ".json.partial"
    command = [frugal, "train", *train_flags, "--seed", str(seed), *flags, "--json", partial]
    recorded = shlex.join(command[1:])  # the same run whichever path names the binary
    if os.path.exists(stem + ".json"):
        with open(stem + ".command") as f:
            if f.read().strip() != recorded:
                raise RuntimeError(f"{stem}.json is from another command ({stem}.command); give another OUT_DIR")
    else:
        with open(stem + ".log", "w") as log:
            result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if result.returncode != 0:
            raise RuntimeError(f"{shlex.join(command)} exited {result.returncode}; see {stem}.log")
        with open(stem + ".command", "w") as f:
            f.write(recorded + "\n")
        os.replace(partial, stem + ".json")  # only a finished run counts as done, and after its command
    with open(stem + ".json") as f:
        return json.load(f)


def spread(values):
    return statistics.stdev(values) if len(values) > 1 else float("nan")


def print_table(ways, seeds, accuracy):
    reference = ways[0][0]

    def values(name):
        return [100 * accuracy[(name, seed)] for seed in seeds if (name, seed) in accuracy]

    print("| seed | " + " | ".join(name for name, _ in ways) + " |")
    print("|---|" + "---|" * len(ways))
    for seed in seeds:
        cells = [f"{100 * accuracy[(name, seed)]:.2f}%" if (name, seed) in accuracy else "" for name, _ in ways]
        print(f"| {seed} | " + " | ".join(cells) + " |")
    means = [f"{statistics.mean(values(name)):.2f}% ({spread(values(name)):.2f}), {len(values(name))} seeds"
             for name, _ in ways]
    print("| mean (standard deviation) | " + " | ".join(means) + " |")
    cells = [""]
    for name, _ in ways[1:]:
        paired = [seed for seed in seeds if (name, seed) in accuracy and (reference, seed) in accuracy]
        differences = [100 * (accuracy[(name, seed)] - accuracy[(reference, seed)]) for seed in paired]
        error = spread(differences) / len(differences) ** 0.5
        cells.append(f"{statistics.mean(differences):+.2f} ({error:.2f})")
    print(f"| difference from {reference}, paired: mean (standard error) | " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frugal")
    parser.add_argument("out_dir")
    parser.add_argument("ways", nargs="+", type=parse_way)
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("1-6"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seeds-of", action="append", default=[], metavar="NAME=FIRST-LAST")
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

    seeds_of = {name: args.seeds for name, _ in args.ways}
    for text in args.seeds_of:
        name, _, seeds = text.partition("=")
        if name not in seeds_of:
            parser.error(f"--seeds-of {text}: no way is named '{name}'")
        try:
            seeds_of[name] = parse_seeds(seeds)
        except argparse.ArgumentTypeError as error:
            parser.error(f"--seeds-of {text}: {error}")
        if not set(seeds_of[name]) <= set(args.seeds):
            parser.error(f"--seeds-of {text}: seeds outside --seeds")
    runs = [(name, flags, seed) for seed in args.seeds for name, flags in args.ways if seed in seeds_of[name]]
    accuracy = {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
    futures = {pool.submit(run_one, args.frugal, args.out_dir, train_flags, name, flags, seed): (name, seed)
               for name, flags, seed in runs}
    try:
        for future in concurrent.futures.as_completed(futures):
            name, seed = futures[future]
            accuracy[(name, seed)] = float(future.result()["test_accuracy"])
            print(f"{name} seed {seed}: {100 * accuracy[(name, seed)]:.2f}%", file=sys.stderr)
    except BaseException as error:  # a failed run, a summary without an accuracy, Ctrl-C
        # The runs already going finish (and are kept for a resume); the rest never start.
        pool.shutdown(wait=False, cancel_futures=True)
        if isinstance(error, KeyboardInterrupt):
            raise
        sys.exit(f"accuracy-by-way: {name}, seed {seed}: {type(error).__name__}: {error}")
    pool.shutdown()
    print_table(args.ways, args.seeds, accuracy)


if __name__ == "__main__":
    main()
