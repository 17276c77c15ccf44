"""The benchmark's account of what else the machine did while it ran (bench/run.py: `shares`)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import bench_module


def test_cpu_seconds_reads_the_first_line_of_proc_stat():
    bench = bench_module()
    # user nice system idle iowait irq softirq steal guest guest_nice, in ticks of 1/100 s
    busy, steal, total = bench.cpu_seconds("cpu  100 5 50 1000 20 3 2 40 7 0", 100)
    assert (busy, steal, total) == pytest.approx((1.60, 0.40, 12.20))  # guest time is inside user: not added


def test_shares_leave_out_the_benchs_own_time_and_count_steal_apart():
    bench = bench_module()
    start = (10.0, 1.0, 100.0, 2.0)      # busy, stolen, all, the bench's own
    end = (14.5, 1.5, 110.0, 5.5)        # 4.5 s busy, 3.5 of them the bench's; 0.5 s stolen; 10 s passed
    # others: 1 s of the 10; steal: 0.5 s of the 5 the cores had work (4.5 busy, 0.5 stolen)
    assert bench.shares(start, end) == pytest.approx({"others": 0.1, "steal": 0.1})
    # the bench's own accounting a tick ahead of the kernel's: nobody else, not less than nobody
    assert bench.shares(start, (12.0, 1.0, 110.0, 4.5)) == {"others": 0.0, "steal": 0.0}
    assert bench.shares(start, start) == {"others": 0.0, "steal": 0.0}


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs /proc/stat (Linux)")
def test_a_child_the_bench_waited_for_counts_as_the_benchs_own():
    bench = bench_module()
    before = bench.cpu_reading()
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    after = bench.cpu_reading()
    busy, _, total, own = (b - a for a, b in zip(before, after))
    assert own >= 0.3
    assert busy >= own - 0.05  # the machine was busy at least while the child ran (ticks are 10 ms)
    assert total >= busy - 1e-9  # sums of float seconds: equal up to rounding
