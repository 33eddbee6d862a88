"""The wire: RESP requests and replies, the spec's error texts, Redis' argument splitting."""
