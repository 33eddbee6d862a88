"""The Spark connector's TLS and ACL user options reach the client it builds
(``ConnectionOptions``, docs/spark.md "TLS and ACL users"), without Spark."""

from __future__ import annotations

import pickle

import pytest
import redis

from disque.client import ConnectionSecurity
from disque.spark.options import ConnectionOptions, OptionError, Options


def test_tls_and_user_options_reach_the_client():
    # Any case, as Spark hands them over.
    options = Options({"nodes": "127.0.0.1:7720", "TLS": "true", "tlscacertfile": "/ca.crt",
                       "tlsCertFile": "/c.crt", "TLSKEYFILE": "/c.key", "user": "app",
                       "password": "pw"})
    connection = ConnectionOptions.parse(options)
    assert connection.security == ConnectionSecurity(
        tls=True, tls_ca_cert_file="/ca.crt", tls_cert_file="/c.crt", tls_key_file="/c.key",
        user="app", password="pw")
    # Shipped to executors by pickling.
    shipped = pickle.loads(pickle.dumps(connection))
    assert shipped == connection
    for client in (shipped.client(), shipped.client([("127.0.0.2", 7721)])):
        assert client.connection.connection_class is redis.SSLConnection
        assert client.connection.connection_kwargs == {
            "username": "app", "password": "pw", "ssl_ca_certs": "/ca.crt",
            "ssl_certfile": "/c.crt", "ssl_keyfile": "/c.key", "ssl_cert_reqs": "required",
            "ssl_check_hostname": True}
    assert [str(n) for n in shipped.client([("127.0.0.2", 7721)]).seeds] == ["127.0.0.2:7721"]


def test_tls_insecure_turns_verification_off():
    connection = ConnectionOptions.parse(Options({"tlsInsecure": "yes"}))
    client = connection.client()
    assert client.connection.connection_class is redis.SSLConnection
    assert (client.connection.connection_kwargs["ssl_cert_reqs"],
            client.connection.connection_kwargs["ssl_check_hostname"]) == ("none", False)


def test_without_tls_options_the_connection_is_plain():
    client = ConnectionOptions.parse(Options({"password": "pw"})).client()
    assert client.connection.connection_class is redis.Connection
    assert client.connection.connection_kwargs == {"username": None, "password": "pw"}


@pytest.mark.parametrize("options, message", [
    ({"tlsCertFile": "/c.crt"}, "'tlsCertFile' and 'tlsKeyFile' go together"),
    ({"tlsKeyFile": "/c.key"}, "'tlsCertFile' and 'tlsKeyFile' go together"),
    ({"user": "app"}, "option 'user' needs option 'password'"),
    ({"tls": "maybe"}, "option 'tls' must be true or false"),
    ({"tlsInsecure": "2"}, "option 'tlsInsecure' must be true or false"),
])
def test_bad_options_name_the_option(options, message):
    with pytest.raises(OptionError, match=message):
        ConnectionOptions.parse(Options(options))
