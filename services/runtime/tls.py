"""Optional TLS and mutual TLS for every gRPC hop.

Each service config has `tls_cert`, `tls_key`, `tls_ca` (flags --tls-*, env BIDAW_<SVC>_TLS_*);
all empty means plaintext, as before. A server with a cert and key serves TLS; given a CA too it
requires every client to present a certificate signed by that CA (mTLS). A client trusts the
servers the CA signed (the system roots without one) and presents its cert and key when it has
them. `bidaw certs` writes a dev CA and one cert that is both server and client.

Files are read and checked once, at start: a bad path or a key that does not match its cert
fails there, naming the flag, instead of at the first handshake. Key bytes are never logged.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from services.runtime.cluster_auth import configure_token
from services.runtime.membership_auth import resolve_token

CERT_FILE, KEY_FILE, CA_FILE = "tls.crt", "tls.key", "ca.crt"  # as `bidaw certs` names them
TOKEN_FILE_ENV = "BIDAW_CLUSTER_TOKEN_FILE"  # the client commands' --cluster-token-file


class TLSConfigError(ValueError):
    """A TLS setting that cannot work; the message names the flag."""


@dataclass(frozen=True)
class TLSFiles:
    """PEM file paths. `server_name`: the name to check in the server's certificate when the
    address dialled is not in it (grpc.ssl_target_name_override)."""
    cert: str = ""
    key: str = ""
    ca: str = ""
    server_name: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.cert or self.key or self.ca)

    @classmethod
    def from_config(cls, config) -> "TLSFiles | None":
        """From a service config's tls_* fields; None when TLS is off."""
        files = cls(getattr(config, "tls_cert", "") or "", getattr(config, "tls_key", "") or "",
                    getattr(config, "tls_ca", "") or "")
        return files if files.enabled else None

    @classmethod
    def from_dir(cls, directory: str, client_cert: bool = True) -> "TLSFiles":
        """The files `bidaw certs --out DIR` wrote; `client_cert=False`: the CA only."""
        path = lambda name: os.path.join(directory, name)  # noqa: E731
        if not client_cert:
            return cls(ca=path(CA_FILE))
        return cls(path(CERT_FILE), path(KEY_FILE), path(CA_FILE))


@dataclass(frozen=True)
class TLSMaterial:
    """The bytes of a checked TLSFiles, ready to build credentials (repr hides the key)."""
    cert: bytes | None
    key: bytes | None
    ca: bytes | None
    server_name: str = ""
    mutual: bool = False  # servers: require client certificates

    def __repr__(self) -> str:
        return (f"TLSMaterial(cert={self.cert is not None}, key={'<hidden>' if self.key else None}"
                f", ca={self.ca is not None}, mutual={self.mutual})")

    def server_credentials(self) -> "grpc.ServerCredentials":  # noqa: F821
        import grpc

        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=self.mutual)

    def channel_credentials(self) -> "grpc.ChannelCredentials":  # noqa: F821
        import grpc

        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)

    def channel_options(self) -> list[tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def _read(path: str, flag: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise TLSConfigError(f"{flag} {path}: cannot read it ({exc.strerror})") from None
    if b"-----BEGIN " not in data:
        raise TLSConfigError(f"{flag} {path}: not a PEM file")
    return data


def load(files: TLSFiles, *, server: bool) -> TLSMaterial:
    """Read and check `files` for a server (needs cert and key) or a client (a CA alone is
    enough: TLS without a client certificate). TLSConfigError names the flag at fault."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if files.key and not files.cert:
        raise TLSConfigError("--tls-key is set but --tls-cert is not: give both")
    if files.cert and not files.key:
        raise TLSConfigError("--tls-cert is set but --tls-key is not: give both")
    if server and not files.cert:
        raise TLSConfigError("--tls-ca is set but --tls-cert/--tls-key are not: a server "
                             "needs its own certificate and key")
    cert = _read(files.cert, "--tls-cert") if files.cert else None
    key = _read(files.key, "--tls-key") if files.key else None
    ca = _read(files.ca, "--tls-ca") if files.ca else None
    try:
        certs = x509.load_pem_x509_certificates(cert) if cert else []
    except ValueError:
        raise TLSConfigError(f"--tls-cert {files.cert}: no valid PEM certificate in it") from None
    try:
        if ca:
            x509.load_pem_x509_certificates(ca)
    except ValueError:
        raise TLSConfigError(f"--tls-ca {files.ca}: no valid PEM certificate in it") from None
    if key:
        try:
            private = serialization.load_pem_private_key(key, password=None)
        except (ValueError, TypeError):  # never echo the exception: it may quote the key
            raise TLSConfigError(f"--tls-key {files.key}: not an unencrypted PEM private "
                                 "key") from None
        mine = serialization.PublicFormat.SubjectPublicKeyInfo
        if private.public_key().public_bytes(serialization.Encoding.DER, mine) != \
                certs[0].public_key().public_bytes(serialization.Encoding.DER, mine):
            raise TLSConfigError(f"--tls-key {files.key} does not match the certificate in "
                                 f"--tls-cert {files.cert}")
    return TLSMaterial(cert, key, ca, files.server_name, mutual=server and ca is not None)


# The process-wide TLS setting (None: plaintext), installed once at start and used by every
# Server and channel that is not given one (services/runtime/grpc_util.py).
_process: TLSMaterial | None = None
_process_files: TLSFiles | None = None


def configure_tls(files: TLSFiles | None, *, server: bool = True) -> None:
    """Check `files` and use them for every Server and channel of this process from now on
    (None: plaintext). `server`: this process serves, so it needs a cert and key, and a CA
    given means mTLS. TLSConfigError (naming the flag) when they cannot work."""
    global _process, _process_files
    _process = load(files, server=server) if files is not None and files.enabled else None
    _process_files = files if _process is not None else None


def process_material() -> TLSMaterial | None:
    return _process


def tls_files() -> TLSFiles | None:
    """The process-wide TLS files (for a child process, e.g. the Ray engine actor)."""
    return _process_files


def add_client_args(parser, env_prefix: str = "BIDAW_CLIENT_TLS_") -> None:
    """--tls-dir/--tls-cert/--tls-key/--tls-ca for a command that only dials (chat, replay);
    each defaults to env <env_prefix>DIR/CERT/KEY/CA."""
    for name, what in (("dir", "directory from `bidaw certs` (its ca.crt, tls.crt, tls.key)"),
                       ("cert", "client certificate (PEM), for mTLS"),
                       ("key", "its private key (PEM)"),
                       ("ca", "CA that signed the servers' certificates (PEM); with any "
                              "--tls-* the channels use TLS")):
        env = f"{env_prefix}{name.upper()}"
        parser.add_argument(f"--tls-{name}", default=os.environ.get(env, ""),
                            help=f"{what} (env {env})")
    parser.add_argument("--cluster-token-file", default=os.environ.get(TOKEN_FILE_ENV, ""),
                        help="file holding the deployment's cluster token, sent on every gRPC "
                             f"call (`bidaw up` prints its path; env {TOKEN_FILE_ENV})")


def configure_client(args, command: str) -> None:
    """Install the TLS and cluster token of add_client_args' flags process-wide; SystemExit
    naming the flag."""
    files = TLSFiles.from_dir(args.tls_dir) if args.tls_dir else TLSFiles()
    files = TLSFiles(args.tls_cert or files.cert, args.tls_key or files.key,
                     args.tls_ca or files.ca)
    try:
        configure_tls(files if files.enabled else None, server=False)
        if args.cluster_token_file:
            configure_token(resolve_token("", args.cluster_token_file))
    except (TLSConfigError, ValueError) as exc:
        raise SystemExit(f"bidaw {command}: {exc}") from None
