"""disque-pipeline without the spark extra: a clear message, not a traceback."""

from __future__ import annotations

import subprocess
import sys

# Runs the real entry point with pyspark made unimportable (a None entry in
# sys.modules makes ``import pyspark`` raise ImportError), as on an install
# without the spark extra.
SCRIPT = ("import sys; sys.modules['pyspark'] = None; "
          "from disque.spark.report import main; sys.exit(main(sys.argv[1:]))")


def test_report_without_pyspark_names_the_extra(tmp_path):
    result = subprocess.run([sys.executable, "-c", SCRIPT, "report", "--aof",
                             str(tmp_path / "appendonly.aof"), "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "disque-server[spark]" in result.stderr
