"""``python -m bench.hotspots PROFILE.txt [--under virtplane]``: where a py-spy profile spends its time.

Reads py-spy's raw (collapsed) stacks and prints the functions with the largest share of
samples: inclusive (the function and what it calls) and self (the function alone).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def load(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def frame_name(frame: str) -> str:
    """``function (module/path.py:line)`` → ``function (path.py)``, without the line."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "src/", "lib/python3.11/"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where})"


def shares(stacks: list[tuple[list[str], int]], under: str) -> tuple[int, Counter[str], Counter[str]]:
    total = sum(count for _, count in stacks)
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, count in stacks:
        names = [frame_name(f) for f in frames]
        for name in set(names):
            if under in name:
                inclusive[name] += count
        own[names[-1]] += count
    return total, inclusive, own


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hotspots")
    parser.add_argument("profile", type=Path)
    parser.add_argument("--under", default="virtplane", help="inclusive shares of frames whose path has this")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    total, inclusive, own = shares(load(args.profile), args.under)
    print(f"{total} samples")
    print("inclusive:")
    for name, count in inclusive.most_common(args.top):
        print(f"  {100 * count / total:5.1f} %  {name}")
    print("self:")
    for name, count in own.most_common(args.top):
        print(f"  {100 * count / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
