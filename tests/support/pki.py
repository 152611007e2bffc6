"""A throwaway certificate authority for tests, made with the openssl command line.

`make_ca(dir)` makes a CA certificate and key; `issue(dir, ca, name, subject, san)` a
certificate signed by it (EC P-256, PKCS#8 keys, valid two days). Test-only: the keys are
unencrypted and must never be used outside a test's temporary directory.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["issue", "make_ca", "openssl"]


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(directory: Path) -> tuple[Path, Path]:
    ca, key = directory / "ca.pem", directory / "ca-key.pem"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(ca), "-days", "2",
            "-subj", "/CN=ledgerwire test CA")
    return ca, key


def issue(directory: Path, ca: tuple[Path, Path], name: str, subject: str,
          san: str | None = None) -> tuple[Path, Path]:
    cert, key, csr = (directory / f"{name}.pem", directory / f"{name}-key.pem",
                      directory / f"{name}.csr")
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject)
    extra: list[str] = []
    if san is not None:
        ext = directory / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n")
        extra = ["-extfile", str(ext)]
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
            "-CAcreateserial", "-out", str(cert), "-days", "2", *extra)
    return cert, key
