"""benchmarks/gpu/ncu_decode_step.py: the ncu flags it prints and its per-kernel summary of
a real Nsight Compute export (docs/results/2026-12-03a-h200-call3-ncu_b48.csv, one decode
step at batch 48 on the H200)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

import ncu_decode_step as nds  # noqa: E402

CSV = ROOT / "docs" / "results" / "2026-12-03a-h200-call3-ncu_b48.csv"


def test_ncu_args_name_every_metric(capsys):
    sys.argv = ["ncu_decode_step.py", "--ncu-args"]
    nds.main()
    flag, metrics = capsys.readouterr().out.split()
    assert flag == "--metrics" and metrics.split(",") == nds.METRICS


def test_short_name_groups_launches_of_one_kernel():
    assert nds.short_name("_rmsnorm_kernel") == "_rmsnorm_kernel"
    assert nds.short_name("void at::vectorized_gather_kernel<16, int>(char *, int)") == (
        "at::vectorized_gather_kernel"
    )
    # cuBLAS's kernel names carry the tile shape, which tells configs apart: kept.
    name = "nvjet_sm90_tst_96x128_64x7_2x1_v_bz_TNN"
    assert nds.short_name(name) == name


def test_summary_of_a_real_export(capsys):
    with open(CSV, newline="") as f:
        rows = list(csv.reader(f))
    names = [r[0] for r in rows[2:]]
    nds.summarize(str(CSV))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{len(names)} kernels profiled")
    body = {line.split()[0]: line.split() for line in out[2:]}
    # Every launch lands in one group, and the groups are listed by total time.
    assert sum(int(v[1]) for v in body.values()) == len(names)
    totals = [float(line.split()[3]) for line in out[2:]]
    assert totals == sorted(totals, reverse=True)
    attn = body["_paged_decode_persistent_kernel"]
    assert int(attn[1]) == names.count("_paged_decode_persistent_kernel")
    # The attention reads ~200 MB a launch at ~2/3 of the DRAM peak (the tail's shape).
    us, dram_pct, dram_mb = float(attn[2]), float(attn[4]), float(attn[8])
    assert 50 < us < 80 and 60 < dram_pct < 75 and 190 < dram_mb < 210
