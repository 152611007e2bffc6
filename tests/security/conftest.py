"""Fixtures shared by the security tests."""

from __future__ import annotations

import ssl

import pytest

from gateway.security.setup import server_ssl_context
from tests.support.pki import issue, make_ca


@pytest.fixture(scope="session")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for "localhost" and a client context trusting its throwaway CA."""
    directory = tmp_path_factory.mktemp("tls-contexts")
    ca = make_ca(directory)
    cert, key = issue(directory, ca, "server", "/CN=localhost", "DNS:localhost")
    client = ssl.create_default_context(cafile=str(ca[0]))
    return server_ssl_context(str(cert), str(key)), client
