"""Where each setting is named outside the model: its environment variable and its ``config.yaml`` group.

``load_settings`` reads the sources by these names, and ``scripts/gen_docs.py`` writes the
configuration reference, README's table and ``server.json`` from them.
"""

from __future__ import annotations

__all__ = ["AUTH_ALGORITHMS", "AUTH_SCOPES", "CONFIG_GROUPS", "ENV_VARS"]

# The scopes an access token may grant on Coffer (SPEC section 10); auth_scope_map maps onto them.
AUTH_SCOPES = ("coffer:read", "coffer:write", "coffer:admin")
# Signature algorithms an external identity provider's tokens may use: asymmetric ones only. An
# HMAC ("HS256") key is a shared secret, and a verifier that accepted one could be handed a token
# "signed" with the issuer's public key; "none" is no signature at all.
AUTH_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")

# Environment variable -> settings field. Documented in README and server.json.
ENV_VARS: dict[str, str] = {
    "COFFER_HOME": "home",
    "COFFER_MAX_DOCUMENT_BYTES": "max_document_bytes",
    "COFFER_GREP_TIMEOUT": "grep_timeout",
    "COFFER_RG_PATH": "rg_path",
    "COFFER_CHUNK_SIZE": "chunk_size",
    "COFFER_CHUNK_OVERLAP": "chunk_overlap",
    "COFFER_CURATION_TOOLS": "curation_tools",
    "COFFER_LOG_LEVEL": "log_level",
    "COFFER_EMBEDDING_PROVIDER": "embedding_provider",
    "COFFER_EMBEDDING_MODEL": "embedding_model",
    "COFFER_EMBEDDING_MODEL_PATH": "embedding_model_path",
    "COFFER_EMBEDDING_BASE_URL": "embedding_base_url",
    "COFFER_EMBEDDING_API_KEY_ENV": "embedding_api_key_env",
    "COFFER_EMBEDDING_DIMENSIONS": "embedding_dimensions",
    "COFFER_RERANK_PROVIDER": "rerank_provider",
    "COFFER_RERANK_MODEL": "rerank_model",
    "COFFER_RERANK_MODEL_PATH": "rerank_model_path",
    "COFFER_RERANK_URL": "rerank_url",
    "COFFER_RERANK_API_KEY_ENV": "rerank_api_key_env",
    "COFFER_RERANK_CANDIDATES": "rerank_candidates",
    "COFFER_RERANK_TIMEOUT_MS": "rerank_timeout_ms",
    "COFFER_RERANK_COOLDOWN_SECONDS": "rerank_cooldown_seconds",
    "COFFER_READ_ONLY": "read_only",
    "COFFER_ALLOWED_DIRS": "allowed_dirs",
    "COFFER_HTTP_TOKEN": "http_token",
    "COFFER_AUTH": "auth",
    "COFFER_PUBLIC_URL": "public_url",
    "COFFER_HTTP_HEADER_TIMEOUT": "http_header_timeout",
    "COFFER_HTTP_BODY_TIMEOUT": "http_body_timeout",
    "COFFER_HTTP_MAX_CONNECTIONS": "http_max_connections",
    "COFFER_HTTP_SESSION_IDLE_TIMEOUT": "http_session_idle_timeout",
    "COFFER_EDITOR": "editor",
    "COFFER_HTML_MAIN_CONTENT": "html_main_content",
    "COFFER_INDEX_BACKEND": "index_backend",
    "COFFER_DATABASE_URL": "database_url",
    "COFFER_WATCH": "watch",
    "COFFER_WATCH_POLLING": "watch_polling",
    "COFFER_AUTH_ISSUER": "auth_issuer",
    "COFFER_AUTH_AUDIENCE": "auth_audience",
    "COFFER_AUTH_JWKS_URL": "auth_jwks_url",
    "COFFER_AUTH_ALGORITHMS": "auth_algorithms",
    "COFFER_AUTH_CLOCK_SKEW": "auth_clock_skew",
    "COFFER_AUTH_SCOPE_MAP": "auth_scope_map",
    "COFFER_AUTH_INTROSPECTION_URL": "auth_introspection_url",
    "COFFER_AUTH_CLIENT_ID_ENV": "auth_client_id_env",
    "COFFER_AUTH_CLIENT_SECRET_ENV": "auth_client_secret_env",
}
# config.yaml may group the embedding and the reranker's settings: ``embedding: {provider: openai,
# model: ...}`` is the settings ``embedding_provider`` and ``embedding_model``.
CONFIG_GROUPS: dict[str, tuple[str, ...]] = {
    "embedding": (
        "provider",
        "model",
        "model_path",
        "base_url",
        "api_key_env",
        "dimensions",
        "batch_size",
        "cooldown_seconds",
        "service",
        "service_idle_seconds",
    ),
    "rerank": ("provider", "model", "model_path", "url", "api_key_env", "candidates", "timeout_ms", "cooldown_seconds"),
}
