"""Where CI's test time went, from pytest's JUnit XML (.ci/run writes it): each lane's total, each
file's, and the 25 slowest tests (setup, call and teardown together, as JUnit counts them).

The lane of a test is the property tests/conftest.py records with it: `unit` (tests/unit, the core
install), `fast` (the rest that do not train) or `slow` (trainings, servers, lint). Times are each
test's own; with pytest-xdist the lanes run side by side, so their sum exceeds the wall time.

    python .ci/timings.py report.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter, defaultdict


def main(path: str) -> None:
    tests = ElementTree.parse(path).getroot().iter("testcase")
    by_lane: Counter[str] = Counter()
    by_file: Counter[str] = Counter()
    count: defaultdict[str, int] = defaultdict(int)
    slowest: list[tuple[float, str]] = []
    for test in tests:
        seconds = float(test.get("time") or 0)
        lane = next((p.get("value") for p in test.iter("property") if p.get("name") == "lane"), None) or "?"
        module = (test.get("classname") or "").split(".")
        file = "/".join(part for part in module if part[:1].islower() or part.startswith("test_"))
        by_lane[lane] += seconds
        count[lane] += 1
        by_file[f"{file}.py"] += seconds
        slowest.append((seconds, f"{test.get('classname')}::{test.get('name')}"))
    print("\nlanes (each test's own seconds, summed):")
    for lane, seconds in by_lane.most_common():
        print(f"  {lane:6} {seconds:8.1f} s  {count[lane]:5} tests")
    print("\nfiles, the 15 slowest:")
    for file, seconds in by_file.most_common(15):
        print(f"  {seconds:8.1f} s  {file}")
    print("\ntests, the 25 slowest:")
    for seconds, name in sorted(slowest, reverse=True)[:25]:
        print(f"  {seconds:8.1f} s  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
