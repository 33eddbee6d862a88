"""The report's chart (disque/spark/report.py draw_chart), drawn without Spark."""

from __future__ import annotations

import pytest

from disque.spark.report import ChartUnavailable, bucket_label, draw_chart
from tests.spark.charts import check_chart

pytestmark = pytest.mark.spark
import matplotlib  # noqa: F401,E402  (the charts extra, part of the spark extra)

T0 = 1_700_000_000_000
MINUTE = 60_000


def points(queues: dict[str, int], buckets: int = 20) -> list[dict]:
    """Timeseries rows: each queue creates ``n`` jobs a minute and deletes ``n - 1``,
    with every fifth bucket missing (no record: zero)."""
    return [{"queue": queue, "bucket_ms": T0 + i * MINUTE, "created": n, "deleted": n - 1}
            for queue, n in queues.items() for i in range(buckets) if i % 5 != 4]


def test_one_panel_per_queue_busiest_first(tmp_path):
    path = str(tmp_path / "chart.png")
    assert draw_chart(points({"small": 3, "big": 40}), MINUTE, path) == ["big", "small"]
    check_chart(path, panels=2)


def test_top_queues_only(tmp_path):
    path = str(tmp_path / "chart.png")
    charted = draw_chart(points({"q%d" % n: n + 2 for n in range(10)}), MINUTE, path, top=3)
    assert charted == ["q9", "q8", "q7"]
    check_chart(path, panels=3)


def test_a_single_bucket(tmp_path):
    path = str(tmp_path / "chart.png")
    assert draw_chart(points({"once": 5}, buckets=1), 1000, path) == ["once"]
    check_chart(path, panels=1)


def test_no_jobs(tmp_path):
    path = str(tmp_path / "chart.png")
    assert draw_chart([], MINUTE, path) == []
    check_chart(path, panels=1, series_drawn=False)


@pytest.mark.parametrize("bucket_ms, label", [(1000, "1 s"), (30_000, "30 s"), (MINUTE, "1 min"),
                                              (90_000, "90 s"), (7_200_000, "2 h"),
                                              (86_400_000, "1 day"), (172_800_000, "2 days")])
def test_bucket_labels(bucket_ms, label):
    assert bucket_label(bucket_ms) == label


def test_without_matplotlib(without_matplotlib, tmp_path):
    with pytest.raises(ChartUnavailable, match=r"pip install 'disque-server\[charts\]'"):
        draw_chart(points({"q": 2}), MINUTE, str(tmp_path / "chart.png"))
    assert not (tmp_path / "chart.png").exists()
