"""Run every fuzz harness under atheris and report inputs, time and outcome.

    python tests/fuzz/run.py --seconds 30          # each harness 30 s
    python tests/fuzz/run.py --runs 250000         # each harness N inputs

Each harness runs in its own process (libFuzzer exits when done) with its
corpus directory under --workdir (kept between runs, so long runs build on
short ones) and crash artifacts written there.  Exit status 1 if any harness
found a crash, an unexpected exception or a sanitizer report.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESSES = ["fuzz_dlpack", "fuzz_interfaces", "fuzz_formats",
             "fuzz_dim_data", "fuzz_exporters"]
MAX_LEN = {"fuzz_dlpack": 384, "fuzz_interfaces": 256, "fuzz_formats": 128,
           "fuzz_dim_data": 256, "fuzz_exporters": 256}


def run_one(name: str, args: argparse.Namespace) -> dict:
    """Fuzz one harness; return its figures."""
    corpus = os.path.join(args.workdir, name, "corpus")
    artifacts = os.path.join(args.workdir, name, "artifacts") + os.sep
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(artifacts, exist_ok=True)
    cmd = [sys.executable, os.path.join(HERE, name + ".py"),
           f"-max_len={MAX_LEN[name]}", f"-artifact_prefix={artifacts}",
           "-print_final_stats=1", corpus]
    if args.seed_corpus:
        seeds = os.path.join(args.seed_corpus, name, "corpus")
        if os.path.isdir(seeds):
            cmd.append(seeds)           # read-only extra inputs
    if args.seed:
        cmd.insert(2, f"-seed={args.seed}")
    if args.runs:
        cmd.insert(2, f"-runs={args.runs}")
    else:
        cmd.insert(2, f"-max_total_time={args.seconds}")
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    with open(os.path.join(args.workdir, name, "log.txt"), "w") as f:
        f.write(log)
    done = re.search(r"Done (\d+) runs in (\d+) second", log)
    cov = re.findall(r"cov: (\d+) ft: (\d+)", log)
    ok = (proc.returncode == 0 and done is not None
          and "ERROR: AddressSanitizer" not in log
          and "runtime error:" not in log)
    return {"name": name, "ok": ok, "rc": proc.returncode,
            "runs": int(done.group(1)) if done else 0, "seconds": elapsed,
            "cov": cov[-1] if cov else ("?", "?"),
            "tail": "" if ok else log[-3000:]}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0,
                        help="libFuzzer's -seed (0: random); with --runs the "
                             "run is reproducible, as CI wants")
    parser.add_argument("--workdir", default=os.path.join(
        os.getcwd(), ".fuzz-work"))
    parser.add_argument("--only", nargs="*", default=HARNESSES)
    parser.add_argument("--seed-corpus", default="",
                        help="a --workdir of another run whose corpora seed "
                             "this one")
    args = parser.parse_args(argv)
    results = [run_one(name, args) for name in args.only]
    total = sum(r["runs"] for r in results)
    print(f"{'harness':18} {'inputs':>10} {'time s':>8} {'cov/ft':>10}  outcome")
    for r in results:
        print(f"{r['name']:18} {r['runs']:>10} {r['seconds']:>8.1f} "
              f"{r['cov'][0] + '/' + r['cov'][1]:>10}  "
              f"{'ok' if r['ok'] else 'FAILED (rc %d)' % r['rc']}")
    print(f"{'total':18} {total:>10} "
          f"{sum(r['seconds'] for r in results):>8.1f}")
    for r in results:
        if not r["ok"]:
            print(f"\n---- {r['name']} ----\n{r['tail']}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
