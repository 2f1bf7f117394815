"""The names a service answers to (``flowli.http.AllowedHosts``): the loopback names on any
port, the address it listens on unless a wildcard, and ``--allowed-host`` names; an ``Origin`` is
trusted when it is the origin the request was sent to or an allowed name."""

from __future__ import annotations

import pytest

from flowli.http import AllowedHosts

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("host", ["127.0.0.1:8081", "127.0.0.1", "localhost:1", "LocalHost.:8081", "[::1]:8081",
                                  "[::1]"])
def test_the_loopback_names_are_served_on_any_port(host):
    assert AllowedHosts().allows(host)


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8081", "127.0.0.1.nip.io:8081",
                                  "localhost.attacker.example", "127.0.0.2:8081", "", None, "localhost:80a",
                                  "localhost:1234567", "[::1", "user@localhost", "localhost/x", "0.0.0.0:8081"])
def test_another_name_or_a_malformed_host_is_not(host):
    assert not AllowedHosts().allows(host)


def test_the_listening_address_is_served_unless_a_wildcard():
    assert AllowedHosts("10.1.2.3").allows("10.1.2.3:8081")
    assert AllowedHosts("::").allows("[::1]:8081") and not AllowedHosts("::").allows("[::]:8081")
    assert not AllowedHosts("0.0.0.0").allows("0.0.0.0:8081")
    assert not AllowedHosts("0.0.0.0").allows("10.1.2.3:8081")


def test_allowed_names_with_and_without_a_port():
    hosts = AllowedHosts("0.0.0.0", ["flowli.example", "10.1.2.3:8081", "fd00::1", "[fd00::2]:9"])
    assert hosts.allows("flowli.example:443") and hosts.allows("FLOWLI.example")
    assert hosts.allows("10.1.2.3:8081") and not hosts.allows("10.1.2.3:8082") and not hosts.allows("10.1.2.3")
    assert hosts.allows("[fd00::1]:1") and hosts.allows("[fd00::2]:9") and not hosts.allows("[fd00::2]:8")
    assert not hosts.allows("sub.flowli.example")
    assert "flowli.example" in hosts.describe() and "[::1]" in hosts.describe()


@pytest.mark.parametrize("value", ["a/b", "", "x:y", "http://flowli.example", "a b"])
def test_an_allowed_host_that_is_no_host_name_is_refused(value):
    with pytest.raises(ValueError, match="is not a host name"):
        AllowedHosts(extra=[value])


def test_an_origin_is_trusted_when_it_is_the_requests_own_or_an_allowed_name():
    hosts = AllowedHosts(extra=["flowli.example"])
    assert hosts.trusts_origin("http://127.0.0.1:8081", "127.0.0.1:8081", "http")
    assert hosts.trusts_origin("http://127.0.0.1:8081/runs/x?y=1", "127.0.0.1:8081", "http")  # a Referer
    assert hosts.trusts_origin("https://dash.internal", "dash.internal", "https")
    assert hosts.trusts_origin("https://dash.internal", "dash.internal:443", "https")
    assert hosts.trusts_origin("https://dash.internal", "dash.internal", "http")  # TLS ended by a proxy
    assert hosts.trusts_origin("https://flowli.example", "127.0.0.1:8081", "http")  # an allowed name
    assert not hosts.trusts_origin("http://127.0.0.1:9999", "127.0.0.1:8081", "http")  # another port
    assert not hosts.trusts_origin("http://localhost:8081", "127.0.0.1:8081", "http")
    assert not hosts.trusts_origin("http://attacker.example:8081", "127.0.0.1:8081", "http")
    assert not hosts.trusts_origin("null", "127.0.0.1:8081", "http")
    assert not hosts.trusts_origin("file:///etc/passwd", "127.0.0.1:8081", "http")
    assert not hosts.trusts_origin("http://[::1", "127.0.0.1:8081", "http")


def test_answers_are_remembered_per_host_value_and_the_memory_stays_bounded():
    hosts = AllowedHosts("10.0.0.5", ["api.example.com:8443"])
    for _ in range(2):  # the second time from what it remembered: the same answers
        assert hosts.allows("10.0.0.5:7700") and hosts.allows("API.example.com:8443")
        assert not hosts.allows("api.example.com:80") and not hosts.allows("evil.example")
    for i in range(1000):  # a client sending many names
        assert not hosts.allows(f"n{i}.evil.example")
    assert hosts.allows("localhost:1") and not hosts.allows("n3.evil.example")
    assert len(hosts._seen) <= 64  # private: the memory of answers, bounded whatever the names sent
