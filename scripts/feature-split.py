"""Crates that `cargo test --workspace --exclude ojs-tests` and `cargo test -p ojs-tests`
(the two kinds of run of scripts/test.sh) resolve with different features: each is
compiled twice, with everything that depends on it (serde or tokio: most of the AWS
SDK). tests/Cargo.toml enables in ojs-tests what the rest of the workspace enables.

  python3 scripts/feature-split.py     prints "feature split: none", or the crates and
                                       the features only one side has (exit 0 either way)
"""

import subprocess
import sys


def features(*selection):
    out = subprocess.run(
        ["cargo", "tree", *selection, "--prefix", "none", "-f", "{p} [{f}]",
         "-e", "normal,build,dev"],
        capture_output=True, text=True, check=True,
    ).stdout
    crates = {}
    for line in out.splitlines():
        line = line.replace(" (*)", "").replace(" (proc-macro)", "").strip()
        if " [" in line:
            name, feats = line.split(" [", 1)
            crates.setdefault(name, set()).add(feats.rstrip("]"))
    return crates


def main():
    try:
        rest = features("--workspace", "--exclude", "ojs-tests")
        tests = features("-p", "ojs-tests")
    except subprocess.CalledProcessError as e:
        print(f"feature split: cargo tree failed: {e.stderr.strip()[:200]}")
        return
    split = {k: rest[k] ^ tests[k] for k in sorted(rest.keys() & tests.keys()) if rest[k] != tests[k]}
    if not split:
        print("feature split: none (ojs-tests reuses the dependencies the workspace's tests built)")
        return
    print(f"feature split: {len(split)} crate(s) resolve differently for ojs-tests and compile "
          "twice (align them in tests/Cargo.toml):")
    for name, diff in split.items():
        print(f"    {name}: {' | '.join(sorted(diff))}")


if __name__ == "__main__":
    sys.exit(main())
