"""A real Prometheus server for the metrics tests, and plain /metrics scrapes.

``PrometheusServer`` runs Debian's /usr/bin/prometheus with its own config
and storage in a test's directory, scraping the given targets every
second; ``query`` asks its HTTP API. Whoever starts it stops it
(``with PrometheusServer(...) as prometheus:``).
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.process import free_port, wait_until

PROMETHEUS = Path("/usr/bin/prometheus")
JOB = "disque"
# Prometheus refuses a scrape timeout above the interval (default 10 s).
CONFIG = """global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: %s
    static_configs:
      - targets: [%s]
"""
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def http_get(url: str, timeout: float = 5.0, headers: dict | None = None) -> bytes:
    """The body of a GET that must answer 200."""
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert response.status == 200, (url, response.status)
        return response.read()


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """One scrape of http://127.0.0.1:<port>/metrics, parsed by prometheus_client:
    {(sample name, sorted label pairs): value}."""
    text = http_get("http://127.0.0.1:%d/metrics" % port).decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


class PrometheusServer:
    """/usr/bin/prometheus scraping ``targets`` (host:port) every second."""

    def __init__(self, workdir: Path, targets: list[str]) -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.config_path = self.dir / "prometheus.yml"
        self.config_path.write_text(CONFIG % (JOB, ", ".join("'%s'" % t for t in targets)))
        self.log_path = self.dir / "prometheus.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def start(self) -> PrometheusServer:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(PROMETHEUS), "--config.file=%s" % self.config_path,
                 "--storage.tsdb.path=%s" % (self.dir / "data"),
                 "--web.listen-address=127.0.0.1:%d" % self.port],
                cwd=self.dir, stdout=log, stderr=subprocess.STDOUT)

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError("prometheus exited with %s: %s"
                                     % (self.proc.returncode, self.log_path.read_text()[-2000:]))
            return http_get(self.url + "/-/ready", timeout=1).startswith(b"Prometheus")
        wait_until(ready, START_TIMEOUT_S, interval=0.1, message="prometheus ready")
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def api(self, path: str, **params: str) -> dict | list:
        """The ``data`` of a successful API answer."""
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        answer = json.loads(http_get(url))
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> dict[tuple, float]:
        """An instant query: {sorted label pairs (without __name__): value}."""
        data = self.api("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", data
        return {tuple(sorted((k, v) for k, v in item["metric"].items() if k != "__name__")):
                float(item["value"][1]) for item in data["result"]}

    def value(self, expr: str) -> float | None:
        """The value of a query that gives one series, None while it gives none."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return next(iter(result.values()), None)
