"""The injector's own CA and serving certificate: minted, checked and renewed. Pure: no I/O.

The chart renders nothing random, so two renders of the same values are
byte-identical (GitOps): the injector owns its TLS instead, as Gatekeeper's
cert-controller does. It keeps a CA of its own and the serving certificate
that CA signs in one Secret (``Material``), and puts the CA bundle into the
webhook configuration (``servingcert``). ``plan`` says what the Secret must
hold next, given what it holds and the time:

- nothing usable (the first start, a hand edit, the CA past its end): a new
  CA and a new certificate;
- the certificate in the last third of its validity, not naming every host,
  not matching its key, or not signed by a CA of the bundle: a new one;
- the CA in the last third of its validity: a new CA goes *in front of* the old
  one in the bundle, and the certificate stays the old CA's (renewed by it at
  that moment if it would be due sooner) until the new CA has been in the
  bundle for ``settle``, so the API server trusts a CA before any replica
  serves a certificate it signed. A CA past its end leaves the bundle.

Guarantees: ``plan`` never returns material whose certificate is not signed by
a CA of its bundle, and never drops a CA that signed the certificate it keeps.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Certificates start this far in the past: a node whose clock runs a little behind
#: the API server's must still find them valid.
BACKDATE = timedelta(minutes=5)
#: How long a new CA is in the bundle before a certificate it signs is served.
SETTLE = timedelta(seconds=30)
#: The Secret's keys (``ca.since``: when the bundle's first CA entered it, RFC 3339).
KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key", "ca.since")


@dataclass(frozen=True)
class Wanted:
    """What the serving certificate must name and how long each part lives."""

    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...] = ()
    ca_validity: timedelta = timedelta(days=3650)
    cert_validity: timedelta = timedelta(days=365)
    common_name: str = "grelmicro-sidecar-injector"

    @classmethod
    def of(cls, hosts: tuple[str, ...], ca_validity: float, cert_validity: float) -> Wanted:
        """From the names the API server dials (addresses among them) and lives in seconds."""

        def is_address(host: str) -> bool:
            try:
                ipaddress.ip_address(host)
            except ValueError:
                return False
            return True

        return cls(
            dns_names=tuple(h for h in hosts if not is_address(h)),
            ip_addresses=tuple(h for h in hosts if is_address(h)),
            ca_validity=timedelta(seconds=ca_validity),
            cert_validity=timedelta(seconds=cert_validity),
        )

    @property
    def settle(self) -> timedelta:
        """``SETTLE``, shorter for short lives: it fits in the CA's renewal window, and a
        certificate issued as a new CA joins is not due before that CA settles."""
        return min(SETTLE, self.ca_validity / 6, self.cert_validity / 3)


@dataclass(frozen=True)
class Material:
    """What the Secret holds, in PEM: the CA bundle (the current CA first), the current
    CA's key, the serving certificate and its key, and when the current CA entered the bundle."""

    ca_bundle: bytes
    ca_key: bytes
    cert: bytes
    key: bytes
    ca_since: datetime

    def secret_data(self) -> dict[str, str]:
        """The Secret's ``data`` (base64 of each value)."""
        since = _rfc3339(self.ca_since).encode()
        values = (self.ca_bundle, self.ca_key, self.cert, self.key, since)
        return {k: base64.b64encode(v).decode() for k, v in zip(KEYS, values, strict=True)}

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> Material | None:
        """The material in a Secret's ``data``; None when a key is missing or not base64."""
        try:
            raw = {k: base64.b64decode((data or {})[k], validate=True) for k in KEYS}
            since = datetime.fromisoformat(raw["ca.since"].decode()).astimezone(UTC)
        except (KeyError, ValueError, TypeError):
            return None
        return cls(raw["ca.crt"], raw["ca.key"], raw["tls.crt"], raw["tls.key"], since)


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def new_ca(wanted: Wanted, now: datetime) -> tuple[bytes, bytes]:
    """(certificate, key) of a new CA, valid from ``now`` for ``wanted.ca_validity``."""
    key = _key()
    name = _name(f"{wanted.common_name}-ca {int(now.timestamp())}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + wanted.ca_validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return _pem(cert), _key_pem(key)


def issue(wanted: Wanted, ca_pem: bytes, ca_key_pem: bytes, now: datetime) -> tuple[bytes, bytes]:
    """(certificate, key) for the webhook's hosts, signed by the CA; it ends with the CA at latest."""
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in wanted.dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in wanted.ip_addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(wanted.dns_names[0] if wanted.dns_names else wanted.common_name))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + wanted.cert_validity, ca.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return _pem(cert), _key_pem(key)


def _due(cert: x509.Certificate, validity: timedelta, now: datetime) -> bool:
    """In the last third of its validity (as configured now), or past its end."""
    return now >= cert.not_valid_after_utc - validity / 3


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _names(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    ips = {str(a) for a in san.get_values_for_type(x509.IPAddress)}
    return set(san.get_values_for_type(x509.DNSName)) | ips


def _matches(cert: x509.Certificate, key_pem: bytes) -> bool:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return key.public_key().public_bytes(der, spki) == cert.public_key().public_bytes(der, spki)


def bundle_of(pem: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle, in order; empty when it does not parse."""
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def _fresh(wanted: Wanted, now: datetime) -> Material:
    ca, ca_key = new_ca(wanted, now)
    cert, key = issue(wanted, ca, ca_key, now)
    return Material(ca, ca_key, cert, key, now)


def _load(pem: bytes) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None


def plan(current: Material | None, wanted: Wanted, now: datetime) -> Material | None:
    """What the Secret must hold next; None when ``current`` is right as it is (docstring)."""
    if current is None:
        return _fresh(wanted, now)
    listed = bundle_of(current.ca_bundle)
    cas = [ca for ca in listed if ca.not_valid_after_utc > now]  # a CA past its end leaves
    if not cas or listed[0] != cas[0] or not _matches(cas[0], current.ca_key):
        return _fresh(wanted, now)  # no live CA, or the key is not the current CA's
    material = current
    if len(cas) == 1 and _due(cas[0], wanted.ca_validity, now):
        # The old CA signs a fresh certificate first if this one would be due before the new
        # CA settles: its key is in the Secret for the last time.
        cert = _load(material.cert)
        if (
            cert is None
            or now + wanted.settle >= cert.not_valid_after_utc - wanted.cert_validity / 3
        ):
            cert_pem, key_pem = issue(wanted, _pem(cas[0]), material.ca_key, now)
            material = replace(material, cert=cert_pem, key=key_pem)
        ca_pem, ca_key = new_ca(wanted, now)
        cas = [x509.load_pem_x509_certificate(ca_pem), *cas]
        material = replace(material, ca_key=ca_key, ca_since=now)
    bundle = b"".join(_pem(ca) for ca in cas)
    if bundle != material.ca_bundle:
        material = replace(material, ca_bundle=bundle)

    cert = _load(material.cert)
    signer = next((ca for ca in cas if cert is not None and _signed_by(cert, ca)), None)
    healthy = (
        cert is not None
        and signer is not None
        and now < cert.not_valid_after_utc
        and _matches(cert, material.key)
        and set(wanted.dns_names) | set(wanted.ip_addresses) <= _names(cert)
    )
    stale = cert is None or _due(cert, wanted.cert_validity, now) or signer != cas[0]
    settled = now >= material.ca_since + wanted.settle
    # A usable certificate waits for a new CA to settle; an unusable one is replaced at once.
    if not healthy or (stale and settled):
        cert_pem, key_pem = issue(wanted, _pem(cas[0]), material.ca_key, now)
        material = replace(material, cert=cert_pem, key=key_pem)
    return None if material == current else material


def next_check(material: Material, wanted: Wanted, now: datetime) -> datetime:
    """When ``plan`` will next change something, if nothing else does: a renewal, a CA
    settling or ending. The caller checks at least this soon."""
    moments = [material.ca_since + wanted.settle]
    for ca in bundle_of(material.ca_bundle):
        moments += [ca.not_valid_after_utc - wanted.ca_validity / 3, ca.not_valid_after_utc]
    cert = _load(material.cert)
    if cert is not None:
        moments.append(cert.not_valid_after_utc - wanted.cert_validity / 3)
    future = [m for m in moments if m > now]
    return min(future) if future else now
