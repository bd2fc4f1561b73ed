"""`bidaw certs`: a development CA and one certificate every service can use, for TLS/mTLS.

Writes ca.crt, tls.crt and tls.key (the names of a Kubernetes TLS Secret plus ca.crt). The
certificate is valid as both server and client (mTLS), for localhost, 127.0.0.1, ::1 and the
given hosts (DNS names, wildcards such as *.kv-store.bidaw.svc, or IP literals). The CA's key is
not kept: to add a host, run it again and redistribute all three files. For production use your
own PKI and give each service its own certificate.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import pathlib
import re
import sys

from services.runtime.arg_types import positive_int


MAX_DAYS = 36500  # a century; X.509 dates end in 9999 (10^8 days was an OverflowError)
HOST_RE = re.compile(r"(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*"
                     r"[A-Za-z0-9])?)*")


def validity_days(text: str) -> int:
    days = positive_int(text)
    if days > MAX_DAYS:
        raise argparse.ArgumentTypeError(f"at most {MAX_DAYS} days, got {days}")
    return days


def host_problem(host: str) -> str | None:
    """Why `host` cannot be a name in the certificate (an IP literal or an ASCII DNS name, a
    wildcard first label allowed), or None."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return None
    except ValueError:
        pass
    if len(host) > 253 or not HOST_RE.fullmatch(host):
        return (f"{host!r} is neither an IP address nor a DNS name (letters, digits, '-' and "
                "'.'; IDNs in their xn-- form)")
    return None


def register(sub, groups) -> None:
    p = sub.add_parser("certs", help="write a development CA and a certificate for TLS/mTLS",
                       description=__doc__.split("\n\n", 1)[1].strip())
    p.add_argument("--out", required=True, help="directory to write ca.crt, tls.crt, tls.key")
    p.add_argument("--hosts", default="", help="extra names and addresses the certificate is "
                   "valid for, comma separated (localhost, 127.0.0.1 and ::1 always are)")
    p.add_argument("--days", type=validity_days, default=365,
                   help=f"validity (default: 365; at most {MAX_DAYS})")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(func=run)


def _write(path: pathlib.Path, data: bytes, mode: int) -> None:
    # Created with its final mode, so a key is never readable by others, even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)  # an existing file keeps its old mode through O_CREAT


def make_certs(out: str, hosts: list[str], days: int = 365) -> dict[str, pathlib.Path]:
    """Write the CA certificate and a server+client certificate and key under `out`."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from services.runtime.tls import CA_FILE, CERT_FILE, KEY_FILE

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Bidaw development"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (x509.CertificateBuilder().subject_name(name("Bidaw development CA"))
               .issuer_name(name("Bidaw development CA")).public_key(ca_key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(start)
               .not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                            crl_sign=True, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                              critical=False)
               .sign(ca_key, hashes.SHA256()))

    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(["localhost", "127.0.0.1", "::1", *hosts]):  # keep order, once
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host.strip("[]"))))
        except ValueError:
            names.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name("bidaw")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            # one certificate for both ends of every hop: servers and mTLS clients
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))

    directory = pathlib.Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"ca": directory / CA_FILE, "cert": directory / CERT_FILE, "key": directory / KEY_FILE}
    pem = serialization.Encoding.PEM
    _write(paths["ca"], ca_cert.public_bytes(pem), 0o644)
    _write(paths["cert"], cert.public_bytes(pem), 0o644)
    _write(paths["key"], key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()), 0o600)
    return paths


def run(args) -> int:
    from services.runtime.tls import CA_FILE, CERT_FILE, KEY_FILE

    out = pathlib.Path(args.out)
    existing = [n for n in (CA_FILE, CERT_FILE, KEY_FILE) if (out / n).exists()]
    if existing and not args.force:
        print(f"bidaw certs: {', '.join(existing)} already in {out}; --force overwrites",
              file=sys.stderr)
        return 1
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    for host in hosts:  # the cryptography package raised a ValueError traceback
        problem = host_problem(host)
        if problem:
            raise SystemExit(f"bidaw certs: --hosts: {problem}")
    paths = make_certs(args.out, hosts, args.days)
    print(f"wrote {paths['ca']}, {paths['cert']}, {paths['key']} (the key with mode 0600)")
    print(f"every service: --tls-cert {paths['cert']} --tls-key {paths['key']} "
          f"--tls-ca {paths['ca']}   (or bidaw up --tls-dir {out})")
    return 0
