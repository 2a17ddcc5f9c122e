"""The injector's own CA and certificate (``certificates.plan``), on a virtual clock.

The safety property is checked over whole lifetimes: at every moment the Secret
holds a certificate that is valid and signed by a CA of its bundle, and a
certificate signed by a new CA is served only once that CA has been in the
bundle for ``settle``, so the API server trusts it before any replica serves it.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from sidecar.injector.certificates import (
    BACKDATE,
    Material,
    Wanted,
    bundle_of,
    issue,
    new_ca,
    next_check,
    plan,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
WANTED = Wanted(
    dns_names=("inj", "inj.ns", "inj.ns.svc"),
    ip_addresses=("127.0.0.1",),
    ca_validity=timedelta(seconds=180),
    cert_validity=timedelta(seconds=60),
)


def cert_of(material: Material) -> x509.Certificate:
    return x509.load_pem_x509_certificate(material.cert)


def signer(material: Material) -> x509.Certificate:
    cert = cert_of(material)
    (found,) = [ca for ca in bundle_of(material.ca_bundle) if ca.subject == cert.issuer]
    cert.verify_directly_issued_by(found)
    return found


def test_a_first_plan_is_a_ca_and_a_certificate_for_every_host() -> None:
    material = plan(None, WANTED, T0)
    assert material is not None
    cert = cert_of(material)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == set(WANTED.dns_names)
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert cert.not_valid_before_utc == T0 - BACKDATE
    assert cert.not_valid_after_utc == T0 + WANTED.cert_validity
    (ca,) = bundle_of(material.ca_bundle)
    assert signer(material) == ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert material.ca_since == T0
    # What the Secret holds reads back as the same material.
    assert Material.from_secret_data(material.secret_data()) == material


def test_nothing_changes_while_nothing_is_due() -> None:
    material = plan(None, WANTED, T0)
    assert material is not None
    assert plan(material, WANTED, T0 + timedelta(seconds=39)) is None
    assert next_check(material, WANTED, T0) == T0 + WANTED.settle  # the CA settles


def test_the_certificate_is_renewed_in_its_last_third_by_the_same_ca() -> None:
    first = plan(None, WANTED, T0)
    assert first is not None
    renewed = plan(first, WANTED, T0 + timedelta(seconds=41))
    assert renewed is not None
    assert renewed.cert != first.cert and renewed.ca_bundle == first.ca_bundle
    assert signer(renewed) == signer(first)


def test_a_new_ca_joins_the_bundle_first_and_signs_only_once_settled() -> None:
    first = plan(None, WANTED, T0)
    assert first is not None
    # Keep the certificate fresh until the CA is due (its last third: 120 s in).
    current, now = first, T0
    while now + timedelta(seconds=10) < T0 + timedelta(seconds=120):
        now += timedelta(seconds=10)
        current = plan(current, WANTED, now) or current
    old_ca = signer(current)
    now = T0 + timedelta(seconds=121)
    joined = plan(current, WANTED, now)
    assert joined is not None
    new, old = bundle_of(joined.ca_bundle)
    assert old == old_ca and new != old_ca
    # Still the old CA's: this one, or (when it would be due before the new CA settles) a
    # fresh one the old CA signed as it left.
    assert signer(joined) == old_ca and joined.ca_since == now
    assert cert_of(joined).not_valid_after_utc - WANTED.cert_validity / 3 > now + WANTED.settle
    settled = plan(joined, WANTED, now + WANTED.settle)
    assert settled is not None and signer(settled) == new
    assert bundle_of(settled.ca_bundle) == [new, old]  # the old CA stays until it ends
    ended = plan(settled, WANTED, T0 + timedelta(seconds=181))
    assert ended is not None and bundle_of(ended.ca_bundle) == [new]


@pytest.mark.parametrize(
    "spoil",
    [
        lambda m: Material(m.ca_bundle, m.ca_key, b"not a certificate", m.key, m.ca_since),
        lambda m: Material(m.ca_bundle, m.ca_key, m.cert, new_ca(WANTED, T0)[1], m.ca_since),
        lambda m: Material(m.ca_bundle, m.ca_key, *issue(WANTED, *new_ca(WANTED, T0), T0), T0),
    ],
    ids=["garbage certificate", "key of another", "signed by a CA not in the bundle"],
)
def test_a_certificate_that_cannot_be_served_is_replaced_at_once(spoil: object) -> None:
    first = plan(None, WANTED, T0)
    assert first is not None
    spoiled = spoil(first)  # type: ignore[operator]
    fixed = plan(spoiled, WANTED, T0 + timedelta(seconds=1))
    assert fixed is not None and fixed.ca_bundle == first.ca_bundle
    assert signer(fixed) == signer(first)


def test_new_hosts_get_a_new_certificate() -> None:
    first = plan(None, WANTED, T0)
    assert first is not None
    more = Wanted(("inj", "inj.ns", "inj.ns.svc", "other.example"), WANTED.ip_addresses,
                  WANTED.ca_validity, WANTED.cert_validity)  # fmt: skip
    fixed = plan(first, more, T0 + timedelta(seconds=1))
    assert fixed is not None and fixed.ca_bundle == first.ca_bundle
    san = cert_of(fixed).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "other.example" in san.get_values_for_type(x509.DNSName)


def test_unreadable_data_or_a_ca_key_not_its_own_starts_over() -> None:
    assert Material.from_secret_data({"ca.crt": "!!"}) is None
    assert Material.from_secret_data(None) is None
    first = plan(None, WANTED, T0)
    assert first is not None
    other_key = new_ca(WANTED, T0)[1]
    restarted = plan(
        Material(first.ca_bundle, other_key, first.cert, first.key, first.ca_since),
        WANTED,
        T0 + timedelta(seconds=1),
    )
    assert restarted is not None and bundle_of(restarted.ca_bundle) != bundle_of(first.ca_bundle)


@pytest.mark.parametrize("seed", range(5))
def test_over_three_ca_lifetimes_the_served_certificate_is_always_trusted(seed: int) -> None:
    """Random steps (1 to 15 s: a pass runs at least every 10 s, and when something is due)
    over 9 minutes; each step is one replica's pass."""
    rng = random.Random(seed)
    current = plan(None, WANTED, T0)
    assert current is not None
    entered = {bundle_of(current.ca_bundle)[0].fingerprint(hashes.SHA256()): T0}
    now, served_cas = T0, set()
    while now < T0 + timedelta(minutes=9):
        now += timedelta(seconds=rng.uniform(1, 15))
        current = plan(current, WANTED, now) or current
        cas = bundle_of(current.ca_bundle)
        for ca in cas:
            entered.setdefault(ca.fingerprint(hashes.SHA256()), now)
        ca = signer(current)  # signed by a CA of the bundle
        assert now < cert_of(current).not_valid_after_utc
        key = ca.fingerprint(hashes.SHA256())
        if key not in served_cas and key != next(iter(entered)):
            assert now - entered[key] >= WANTED.settle, "served before its CA settled"
        served_cas.add(key)
    assert len(served_cas) >= 3  # the CA turned over at least twice


def test_hosts_split_into_names_and_addresses_by_what_parses_as_an_address() -> None:
    wanted = Wanted.of(("svc.ns.svc", "10.0.0.7", "fd00::1", "1.example"), 3600.0, 60.0)
    assert wanted.dns_names == ("svc.ns.svc", "1.example")
    assert wanted.ip_addresses == ("10.0.0.7", "fd00::1")
    assert (wanted.ca_validity, wanted.cert_validity) == (timedelta(hours=1), timedelta(minutes=1))
