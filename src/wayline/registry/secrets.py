"""Secrets: encryption at rest, Standard Webhooks signing secrets, and API keys.

Endpoint credentials and signing secrets (`wayline.delivery.signing.Secret`) are stored encrypted with Fernet (AES-128-CBC
plus HMAC-SHA256, from `cryptography`); several keys may be configured so the newest
encrypts while older ones still decrypt during a key rotation. API keys are random
tokens stored only as a SHA-256 hash: they carry 256 bits of entropy, so a fast hash
suffices and lookups stay cheap.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets as token_source
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from wayline.core.errors import ConfigError
from wayline.core.settings import Settings

API_KEY_PREFIX = "wl"


class SecretBox:
    def __init__(self, keys: list[bytes]) -> None:
        if not keys:
            raise ConfigError("no encryption key: set WAYLINE_REGISTRY__ENCRYPTION_KEYS")
        try:
            self._fernet = MultiFernet([Fernet(key) for key in keys])
            self._fingerprint_key = hmac.new(keys[0], b"wayline fingerprint", hashlib.sha256).digest()
            # A Fernet token never changes its plaintext, so a rebuilt snapshot need not
            # decrypt every secret again, a large part of each build (see
            # docs/benchmarks.md#registry-snapshot-and-matching-issue-3--2026-11-22).
            self.open = functools.lru_cache(maxsize=100_000)(self._decrypt)  # type: ignore[method-assign]
        except ValueError as exc:
            raise ConfigError(f"an encryption key is not a Fernet key ({exc}); make one with cryptography's Fernet.generate_key()") from exc

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretBox:
        configured = [key.get_secret_value().encode() for key in settings.registry.encryption_keys]
        return cls(configured or [_local_key(settings.state_dir / "encryption.key")])

    def fingerprint(self, data: bytes) -> str:
        """A keyed hash of ``data`` (HMAC-SHA256 under a key derived from the newest encryption
        key): it tells equal inputs apart without revealing them, even to a reader of the database."""
        return hmac.new(self._fingerprint_key, data, hashlib.sha256).hexdigest()

    def seal(self, plaintext: bytes) -> bytes:
        return self._fernet.encrypt(plaintext)

    def open(self, sealed: bytes) -> bytes:
        return self._decrypt(sealed)

    def _decrypt(self, sealed: bytes) -> bytes:
        try:
            return self._fernet.decrypt(sealed)
        except InvalidToken as exc:
            raise ConfigError("a stored secret does not decrypt with any configured encryption key") from exc


def _local_key(path: Path) -> bytes:
    """A local run's key, made once and kept beside the data it protects."""
    if path.exists():
        return path.read_bytes().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Fernet.generate_key()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key)
    return key


def new_api_key(key_id: str) -> str:
    """The key shown once to its owner: `wl_<key id>_<secret>`; only a hash is stored."""
    return f"{API_KEY_PREFIX}_{key_id}_{token_source.token_urlsafe(32)}"


def hash_api_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def key_id_of(api_key: str) -> str | None:
    parts = api_key.split("_")
    # wl _ key _ <id> _ <secret…>: the id itself contains one underscore ("key_…").
    if len(parts) < 4 or parts[0] != API_KEY_PREFIX:
        return None
    return f"{parts[1]}_{parts[2]}"


def same_hash(a: str, b: str) -> bool:
    return hmac.compare_digest(a, b)


__all__ = ["SecretBox", "hash_api_key", "key_id_of", "new_api_key", "same_hash"]
