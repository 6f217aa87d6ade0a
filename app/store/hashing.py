"""Secrets at rest: passwords as salted scrypt (memory-hard, in the standard library), API tokens and session
cookies as SHA-256 of their 256-bit random secret (a slow hash adds nothing to a secret nobody can guess)."""

from __future__ import annotations

import hashlib
import hmac
import secrets

# OWASP's scrypt settings (N=2^14, r=8, p=5: 16 MiB and ~0.1 s per hash on this class of machine)
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 5
SCRYPT_MAXMEM = 64 * 2**20
MIN_PASSWORD_CHARS = 12
MAX_PASSWORD_CHARS = 1024


def sha256_hex(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=SCRYPT_MAXMEM, dklen=32)


def check_password_rules(password: str) -> None:
    if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        raise ValueError(f"password: {len(password)} characters; it needs {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS}")


def hash_password(password: str) -> str:
    """`scrypt$N$r$p$salt$hash`, parameters stored so that they can be raised later."""
    check_password_rules(password)
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str | None) -> bool:
    """Constant-time check; False for a malformed or missing hash (the account has no web login)."""
    if not stored or len(password) > MAX_PASSWORD_CHARS:
        return False
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        computed = _scrypt(password, bytes.fromhex(salt), int(n), int(r), int(p))
    except ValueError:
        return False
    return hmac.compare_digest(computed.hex(), digest)


def new_password() -> str:
    """A generated password: 20 URL-safe characters (120 bits)."""
    return secrets.token_urlsafe(15)
