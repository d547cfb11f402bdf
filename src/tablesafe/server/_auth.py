"""API keys and rate limits.

Keys are random 32-byte tokens shown once (``tablesafe api-key new``); the
site configuration stores only ``sha256:<hex>`` of each. A high-entropy
random key needs no slow password hash: SHA-256 cannot be inverted and the
key space cannot be searched. Comparison is in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Literal

from tablesafe._errors import UserError
from tablesafe._settings import ApiKeySettings

__all__ = ["AuthError", "Authenticator", "Principal", "RateLimited", "hash_key", "new_key"]


class AuthError(UserError):
    """A missing or unknown API key, or a role that may not use the endpoint."""

    status_code = 401


class Forbidden(UserError):
    """A valid key whose role may not use the endpoint."""

    status_code = 403


class RateLimited(UserError):
    """Too many requests for this key in the last minute."""

    status_code = 429


def hash_key(key: str) -> str:
    """The stored form of an API key: ``sha256:<hex digest>``."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """A new random API key and its stored hash."""
    key = "ts_" + secrets.token_urlsafe(32)
    return key, hash_key(key)


@dataclass(frozen=True)
class Principal:
    """Who is asking: a key id and its role (``anonymous`` when keys are off)."""

    id: str
    role: Literal["user", "admin", "anonymous"]
    rate_limit_per_minute: int


class Authenticator:
    """Identify callers by API key and apply per-key rate limits.

    Args:
        keys: The configured keys; with none, every caller is ``anonymous``
            (rate-limited per client address) and admin endpoints are closed.
        default_rate: Requests per minute for keys without their own limit.
    """

    def __init__(self, keys: list[ApiKeySettings], default_rate: int) -> None:
        self._keys = keys
        self._default = default_rate
        self._windows: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        """Whether the API is open to anonymous callers (no keys configured)."""
        return not self._keys

    def identify(self, key: str | None, client: str = "unknown") -> Principal:
        """Return the caller, or raise :class:`AuthError`."""
        if self.open:
            return Principal(f"anonymous@{client}", "anonymous", self._default)
        if not key:
            raise AuthError("an API key is required: send it in the X-API-Key header")
        digest = hash_key(key)
        for k in self._keys:
            if hmac.compare_digest(digest, k.hash):
                return Principal(k.id, k.role, k.rate_limit_per_minute or self._default)
        raise AuthError("unknown API key")

    def require_admin(self, who: Principal) -> None:
        """Raise unless ``who`` is an admin."""
        if who.role != "admin":
            raise Forbidden("this endpoint is for admin keys only")

    def throttle(self, who: Principal) -> None:
        """Count one request for ``who``; raise :class:`RateLimited` past the limit."""
        now = time.monotonic()
        with self._lock:
            window = [t for t in self._windows.get(who.id, []) if now - t < 60.0]
            if len(window) >= who.rate_limit_per_minute:
                self._windows[who.id] = window
                raise RateLimited(
                    f"rate limit of {who.rate_limit_per_minute} requests per minute reached; "
                    "try again in a minute"
                )
            window.append(now)
            self._windows[who.id] = window
