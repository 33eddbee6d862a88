"""``python -m chaos.run`` itself, briefly, so that the tool cannot rot:
5 real nodes on loopback killed and paused for a few seconds, no job lost.
(``make chaos`` runs minutes of it, with partitions when run as root.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support.process import REPO


def test_chaos_smoke_on_loopback(run_seed, tmp_path):
    argv = [sys.executable, "-m", "chaos.run", "--network", "loopback", "--duration", "8",
            "--retry", "2", "--fault-every", "0.5", "1.5", "--drain", "40", "--seed",
            str(run_seed), "--dir", str(tmp_path / "run")]
    out = subprocess.run(argv, cwd=REPO, env=dict(os.environ), capture_output=True, text=True,
                         timeout=120)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    rows = dict(re.findall(r"^(\S.*?)\s{2,}(.*)$", out.stdout, re.M))
    assert rows["LOST (REPLICATE >= 2)"] == "0", report
    assert int(rows["delivered jobs"]) > 50, report
    assert "complete" in rows["time"], report
    faults = dict((k, int(v)) for k, v in re.findall(r"([a-z-]+) (\d+)", rows["faults injected"]))
    # The schedule draws kill, pause and kill-all (every node at once) at random.
    assert faults["kill"] + faults["kill-all"] + faults["pause"] >= 2, report
    assert rows["node log errors"] == "0" and rows["bad exits"] == "0", report
