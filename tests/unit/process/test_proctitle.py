"""The process title's text (disque/process/proctitle.py): Redis' default
template, ``{title} {listen-addr} {server-mode}``, for a Disque node."""

from __future__ import annotations

import pytest

from disque.config import Config
from disque.process.proctitle import process_title


@pytest.mark.parametrize("args, title", [
    (["--port", "7711", "--bind", "127.0.0.1"], "disque-server 127.0.0.1:7711 [cluster]"),
    (["--port", "7711", "--bind", "10.0.0.5", "127.0.0.1"],
     "disque-server 10.0.0.5:7711 [cluster]"),
    (["--port", "7000"], "disque-server *:7000 [cluster]"),  # no bind: every address
    (["--port", "0", "--tls-port", "7712", "--bind", "127.0.0.1"],
     "disque-server 127.0.0.1:7712 [cluster]"),  # TLS only: its port
    (["--port", "0", "--unixsocket", "/run/disque.sock"],
     "disque-server unixsocket:/run/disque.sock [cluster]"),
])
def test_title_names_the_program_the_listen_address_and_the_cluster_mode(args, title):
    assert process_title(Config.load(None, args)) == title
