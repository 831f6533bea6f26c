"""Where CI's test time went, from pytest's JUnit XML (.ci/run writes it): each lane's total, each
file's, and the 25 slowest tests (setup, call and teardown together, as JUnit counts them), in wall
seconds and in CPU seconds (tests/conftest.py records each test's: the process's and its awaited
children's). Wall time is what a test waited, stretched by whatever shared the cores; CPU time is
what it cost, the measure to cut: the suite's wall time is at least its CPU time over the cores.

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
    wall: dict[str, Counter[str]] = {"lane": Counter(), "file": Counter()}
    cpu: dict[str, Counter[str]] = {"lane": Counter(), "file": Counter()}
    count: defaultdict[str, int] = defaultdict(int)
    slowest: list[tuple[float, float, str]] = []
    spans: defaultdict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for test in tests:
        properties = {p.get("name"): p.get("value") for p in test.iter("property")}
        seconds, cpu_seconds = float(test.get("time") or 0), float(properties.get("cpu") or 0)
        started = properties.get("started")
        if started:
            spans[properties.get("worker") or "?"].append((float(started), seconds, cpu_seconds))
        lane = properties.get("lane") or "?"
        module = (test.get("classname") or "").split(".")
        file = "/".join(part for part in module if part[:1].islower() or part.startswith("test_")) + ".py"
        for kind, key in (("lane", lane), ("file", file)):
            wall[kind][key] += seconds
            cpu[kind][key] += cpu_seconds
        count[lane] += 1
        slowest.append((cpu_seconds, seconds, f"{test.get('classname')}::{test.get('name')}"))
    print("\nlanes (each test's own seconds, summed; wall and CPU):")
    for lane, seconds in wall["lane"].most_common():
        print(f"  {lane:6} {seconds:8.1f} s  {cpu['lane'][lane]:8.1f} cpu-s  {count[lane]:5} tests")
    print("\nfiles, the 15 costliest in CPU seconds:")
    for file, cpu_seconds in cpu["file"].most_common(15):
        print(f"  {cpu_seconds:8.1f} cpu-s  {wall['file'][file]:8.1f} s  {file}")
    print("\ntests, the 25 costliest in CPU seconds:")
    for cpu_seconds, seconds, name in sorted(slowest, reverse=True)[:25]:
        print(f"  {cpu_seconds:8.1f} cpu-s  {seconds:8.1f} s  {name}")
    print("\ntests, the 10 longest in wall seconds:")
    for cpu_seconds, seconds, name in sorted(slowest, key=lambda test: -test[1])[:10]:
        print(f"  {seconds:8.1f} s  {cpu_seconds:8.1f} cpu-s  {name}")
    if spans:
        print_workers(spans)


def print_workers(spans: dict[str, list[tuple[float, float, float]]]) -> None:
    """Each pytest-xdist worker's first start and last end (seconds from the first test's start),
    its tests' wall and CPU seconds; then the CPU the tests kept busy over the run's span. That counts
    only what the tests awaited: pytest's own summary line ("machine over the session", tests/conftest.py)
    counts every process, and says whether the cores sat idle (one more worker would fill them)."""
    first = min(start for tests in spans.values() for start, _, _ in tests)
    last = max(start + seconds for tests in spans.values() for start, seconds, _ in tests)
    print("\nworkers (from the first test's start; each test's own seconds, summed):")
    for worker, tests in sorted(spans.items()):
        began = min(start for start, _, _ in tests) - first
        ended = max(start + seconds for start, seconds, _ in tests) - first
        wall, cpu = sum(seconds for _, seconds, _ in tests), sum(cpu for _, _, cpu in tests)
        print(f"  {worker:6} {began:7.1f} s to {ended:7.1f} s  {wall:8.1f} s  {cpu:8.1f} cpu-s  {len(tests):5} tests")
    busy = sum(cpu for tests in spans.values() for _, _, cpu in tests)
    print(f"  span {last - first:.1f} s; the tests' CPU over it: {busy / max(last - first, 1e-9):.2f} cores on average")


if __name__ == "__main__":
    main(sys.argv[1])
