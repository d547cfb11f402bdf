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
from collections.abc import Callable
from datetime import UTC, datetime

from tablesafe._errors import UserError
from tablesafe._settings import ApiKeySettings, SiteConfig
from tablesafe.service import Principal
from tablesafe.state import MemoryRates, RateCounter, StateStore

__all__ = [
    "AuthError",
    "Authenticator",
    "Principal",
    "RateLimited",
    "hash_key",
    "new_key",
    "site_authenticator",
]


class AuthError(UserError):
    """A missing, unknown, expired or revoked API key.

    Args:
        message: What was wrong and what to do.
        key_id: The id of a known key that may no longer be used (for the audit log).
    """

    status_code = 401

    def __init__(self, message: str, *, key_id: str | None = None) -> None:
        super().__init__(message)
        self.key_id = key_id


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


class Authenticator:
    """Identify callers by API key and apply per-key rate limits.

    Args:
        keys: The configured keys; with none, every caller is ``anonymous``
            (rate-limited per client address) and admin endpoints are closed.
        default_rate: Requests per minute for keys without their own limit.
        failures_per_minute: Requests per minute and client address that may
            fail authentication before they are refused with 429.
        revoked: When a stored key hash was revoked (an ISO time), or None;
            asked on every request, so a revocation needs no restart.
        clock: The current time (for tests of expiry).
        rates: Where requests are counted: the state store, shared by every
            replica (default: this process's memory).
    """

    def __init__(
        self,
        keys: list[ApiKeySettings],
        default_rate: int,
        *,
        failures_per_minute: int = 30,
        revoked: Callable[[str], str | None] | None = None,
        clock: Callable[[], datetime] | None = None,
        rates: RateCounter | None = None,
    ) -> None:
        self._keys = keys
        self._default = default_rate
        self._failures = failures_per_minute
        self._revoked = revoked or (lambda _hash: None)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._rates = rates or MemoryRates()

    @property
    def open(self) -> bool:
        """Whether the API is open to anonymous callers (no keys configured)."""
        return not self._keys

    def identify(self, key: str | None, client: str = "unknown") -> Principal:
        """Return the caller, or raise :class:`AuthError`.

        A failure is counted against ``client``: past ``failures_per_minute``
        in the last minute it raises :class:`RateLimited` instead.
        """
        if self.open:
            return Principal(f"anonymous@{client}", "anonymous", self._default)
        try:
            return self._match(key)
        except AuthError:
            self._count(f"unknown@{client}", self._failures)
            raise

    def _match(self, key: str | None) -> Principal:
        if not key:
            raise AuthError("an API key is required: send it in the X-API-Key header")
        digest = hash_key(key)
        for k in self._keys:
            if hmac.compare_digest(digest, k.hash):
                if k.expires is not None and self._clock() >= k.expires:
                    raise AuthError(
                        f"this API key expired on {k.expires.isoformat()}; ask the site for "
                        "a new one",
                        key_id=k.id,
                    )
                if self._revoked(k.hash) is not None:
                    raise AuthError(
                        "this API key was revoked; ask the site for a new one", key_id=k.id
                    )
                return Principal(k.id, k.role, k.rate_limit_per_minute or self._default)
        raise AuthError("unknown API key")

    def require_admin(self, who: Principal) -> None:
        """Raise unless ``who`` is an admin."""
        if who.role != "admin":
            raise Forbidden("this endpoint is for admin keys only")

    def throttle(self, who: Principal) -> None:
        """Count one request for ``who``; raise :class:`RateLimited` past the limit."""
        self._count(who.id, who.rate_limit_per_minute)

    def _count(self, bucket: str, limit: int) -> None:
        if not self._rates.hit(bucket, limit):
            raise RateLimited(
                f"rate limit of {limit} requests per minute reached; try again in a minute"
            )


def site_authenticator(site: SiteConfig, state: StateStore) -> Authenticator:
    """The keys and rate limits of a site, counted and revoked in its state store.

    Every door that identifies callers (the HTTP API and the agent interface,
    over HTTP or standard input and output) uses one of these, so a key's
    requests are counted together wherever they come from.
    """
    return Authenticator(
        site.keys,
        site.server.rate_limit_per_minute,
        failures_per_minute=site.server.auth_failures_per_minute,
        revoked=state.revoked,
        rates=state,
    )
