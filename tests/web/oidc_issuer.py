"""A small OpenID Connect issuer on loopback, for the tests of the external identity provider mode.

It serves what Coffer reads of a real one (Keycloak's paths): discovery at
``/realms/team/.well-known/openid-configuration`` (or only RFC 8414's
``/.well-known/oauth-authorization-server/realms/team``), its JWK set at ``/realms/team/certs``,
and token introspection (RFC 7662) at ``/realms/team/introspect`` for one client. Keys are made
with ``cryptography``; tokens are signed with PyJWT. A test can rotate the keys, take the JWK set
down, make it hang, or make it too large, and counts the requests each path received.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

REALM = "/realms/team"
RESOURCE = "https://coffer.example.com/mcp"
CLIENT_ID = "coffer-introspector"
CLIENT_SECRET = "introspection-secret-for-tests"


@dataclass
class SigningKey:
    """A private key, its key id and the algorithm it signs with."""

    kid: str
    alg: str
    private: Any
    publish_alg: bool = True  # Entra ID publishes RSA keys without "alg"

    @classmethod
    def make(cls, alg: str = "RS256", *, publish_alg: bool = True) -> SigningKey:
        if alg.startswith(("RS", "PS")):
            private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif alg == "ES256":
            private = ec.generate_private_key(ec.SECP256R1())
        elif alg == "EdDSA":
            private = ed25519.Ed25519PrivateKey.generate()
        else:
            raise ValueError(alg)
        return cls(kid=uuid.uuid4().hex[:12], alg=alg, private=private, publish_alg=publish_alg)

    def public_jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
        elif isinstance(public, ec.EllipticCurvePublicKey):
            jwk = ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
        return {**jwk, "kid": self.kid, "use": "sig", **({"alg": self.alg} if self.publish_alg else {})}


class Issuer:
    """The issuer's state, changed by the test while its server thread answers."""

    def __init__(self, key: SigningKey) -> None:
        self.keys = [key]
        self.url = ""  # set once the server is bound
        self.openid_configuration = True  # False: only RFC 8414 metadata
        self.jwks_status = 200
        self.jwks_padding = 0  # bytes of whitespace appended to the JWK set
        self.hang = threading.Event()  # set: the JWK set path waits until ``release`` is set
        self.release = threading.Event()
        self.introspection: dict[str, dict[str, Any]] = {}  # token -> the answer
        self.hang_introspection = threading.Event()  # set: introspection waits until ``release`` is set
        self.requests: Counter[str] = Counter()
        self.introspecting = 0  # requests being answered now
        self.most_introspecting = 0
        self._lock = threading.Lock()

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/certs"

    def token(self, key: SigningKey | None = None, **claims: Any) -> str:
        """An access token for ``RESOURCE``, valid for five minutes; ``claims`` add or replace (None removes)."""
        key = key or self.keys[0]
        now = int(time.time())
        payload = {
            "iss": self.url,
            "aud": RESOURCE,
            "sub": "alice",
            "azp": "claude-desktop",
            "scope": "openid coffer:read coffer:write",
            "iat": now,
            "exp": now + 300,
        }
        payload.update(claims)
        payload = {name: value for name, value in payload.items() if value is not None}
        return jwt.encode(payload, key.private, algorithm=key.alg, headers={"kid": key.kid})

    @contextlib.contextmanager
    def introspecting_now(self) -> Iterator[None]:
        with self._lock:
            self.introspecting += 1
            self.most_introspecting = max(self.most_introspecting, self.introspecting)
        try:
            yield
        finally:
            with self._lock:
                self.introspecting -= 1

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "jwks_uri": self.jwks_url,
            "introspection_endpoint": f"{self.url}/introspect",
            "scopes_supported": ["coffer:read", "coffer:write", "coffer:admin"],
        }


def unsigned_token(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    """A compact JWS put together by hand, as an attacker would (``alg: none``, a forged HMAC)."""
    return ".".join(_b64(part) for part in (json.dumps(header).encode(), json.dumps(payload).encode(), signature))


def signing_input(header: dict[str, Any], payload: dict[str, Any]) -> bytes:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}".encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _handler(issuer: Issuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
            pass  # quiet: pytest shows failures, not access logs

        def do_GET(self) -> None:
            issuer.requests[self.path] += 1
            openid = self.path == f"{REALM}/.well-known/openid-configuration" and issuer.openid_configuration
            if openid or self.path == f"/.well-known/oauth-authorization-server{REALM}":
                self._json(issuer.metadata())
            elif self.path == f"{REALM}/certs":
                if issuer.hang.is_set():
                    issuer.release.wait(60)
                body = {"keys": [key.public_jwk() for key in issuer.keys]}
                self._json(body, status=issuer.jwks_status, padding=issuer.jwks_padding)
            else:
                self._json({"error": "not_found"}, status=404)

        def do_POST(self) -> None:
            issuer.requests[self.path] += 1
            length = int(self.headers.get("content-length", "0"))
            form = parse_qs(self.rfile.read(length).decode("ascii"))
            expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
            if self.path != f"{REALM}/introspect":
                self._json({"error": "not_found"}, status=404)
            elif self.headers.get("authorization") != expected:
                self._json({"error": "invalid_client"}, status=401)
            else:
                with issuer.introspecting_now():
                    if issuer.hang_introspection.is_set():
                        issuer.release.wait(60)
                    self._json(issuer.introspection.get(form.get("token", [""])[0], {"active": False}))

        def _json(self, body: dict[str, Any], *, status: int = 200, padding: int = 0) -> None:
            data = json.dumps(body).encode() + b" " * padding
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def serve(issuer: Issuer) -> Iterator[Issuer]:
    """Run ``issuer`` on 127.0.0.1 (a free port) until the generator is closed."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(issuer))
    server.daemon_threads = True
    issuer.url = f"http://127.0.0.1:{server.server_address[1]}{REALM}"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), name="oidc-issuer", daemon=True)
    thread.start()
    try:
        yield issuer
    finally:
        issuer.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
