"""Certificates for TLS tests, generated with openssl by the test run (nothing is checked in)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA: (certificate, key)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", str(key), "-out", str(cert),
    )  # fmt: skip
    return cert, key


def make_leaf(
    directory: Path, name: str, ca: tuple[Path, Path], *, san: str, client: bool = False
) -> tuple[Path, Path]:
    """A certificate signed by ``ca`` for ``san`` (e.g. ``IP:127.0.0.1``): (certificate, key)."""
    cert, key, csr = directory / f"{name}.pem", directory / f"{name}-key.pem", directory / "x.csr"
    ext = directory / f"{name}.ext"
    usage = "clientAuth" if client else "serverAuth"
    ext.write_text(f"subjectAltName={san}\nextendedKeyUsage={usage}\n")
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", str(key), "-out", str(csr),
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert),
    )  # fmt: skip
    return cert, key


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1, one for another host, and an unrelated CA."""

    ca: Path
    server: tuple[Path, Path]
    wrong_host: tuple[Path, Path]
    other_ca: Path


def make_pki(directory: Path) -> Pki:
    ca = make_ca(directory, "test-ca")
    other = make_ca(directory, "other-ca")
    server = make_leaf(directory, "server", ca, san="IP:127.0.0.1")
    wrong = make_leaf(directory, "wrong-host", ca, san="DNS:wrong.example")
    return Pki(ca=ca[0], server=server, wrong_host=wrong, other_ca=other[0])
