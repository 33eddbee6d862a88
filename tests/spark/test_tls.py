"""format("disque") on a TLS-only node with client certificates and an ACL user:
one write and one snapshot read (docs/spark.md "TLS and ACL users")."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark
import pyspark  # noqa: F401,E402

from disque.client import ConnectionSecurity, DisqueClient  # noqa: E402
from tests.support.tls import (APP_PASSWORD, APP_USER, gen_certs,  # noqa: E402
                               start_tls_only_node)


def test_write_and_read_over_tls_as_an_acl_user(spark, tmp_path):
    certs = gen_certs(tmp_path / "certs")
    node, address = start_tls_only_node(tmp_path / "node", certs)
    options = {"nodes": address, "tls": "true", "tlsCaCertFile": str(certs / "ca.crt"),
               "tlsCertFile": str(certs / "client.crt"), "tlsKeyFile": str(certs / "client.key"),
               "user": APP_USER, "password": APP_PASSWORD}
    df = spark.createDataFrame([("row %d" % i,) for i in range(20)], "body string")
    df.write.format("disque").options(**options).option("queue", "tlsq").mode("append").save()

    snapshot = (spark.read.format("disque").options(**options)
                .schema("id string, queue string, body binary, state string").load().collect())
    assert sorted(row.body for row in snapshot) == sorted(b"row %d" % i for i in range(20))
    assert {(row.queue, row.state) for row in snapshot} == {("tlsq", "queued")}

    security = ConnectionSecurity(tls_ca_cert_file=str(certs / "ca.crt"),
                                  tls_cert_file=str(certs / "client.crt"),
                                  tls_key_file=str(certs / "client.key"),
                                  user=APP_USER, password=APP_PASSWORD)
    with DisqueClient(address, security=security) as client:
        assert client.qlen("tlsq") == 20
