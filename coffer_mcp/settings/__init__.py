"""One frozen settings model: flags > ``COFFER_*`` environment > ``config.yaml`` > defaults.

Only ``cli`` reads the real environment; it passes it here as a plain mapping, so the Python
API and the tests can build settings from anything.

- ``_names``: each setting's environment variable and ``config.yaml`` group (the names the
  configuration reference is generated with);
- ``_values``: the checks of one value (numbers, folders, URLs, scopes) the fields run;
- ``_model``: ``Settings``, each field declaring its one default, range and description;
- ``_file``: reading ``config.yaml``;
- ``_load``: ``load_settings``, the sources merged and checked as a whole, and its errors.
"""

from coffer_mcp.limits import DEFAULT_HOME
from coffer_mcp.settings._load import load_settings
from coffer_mcp.settings._model import Settings, bound_of, default_of
from coffer_mcp.settings._names import AUTH_ALGORITHMS, AUTH_SCOPES, CONFIG_GROUPS, ENV_VARS
from coffer_mcp.settings._values import check_identity_provider_url, refuse_bool

__all__ = [
    "AUTH_ALGORITHMS",
    "AUTH_SCOPES",
    "CONFIG_GROUPS",
    "DEFAULT_HOME",
    "ENV_VARS",
    "Settings",
    "bound_of",
    "check_identity_provider_url",
    "default_of",
    "load_settings",
    "refuse_bool",
]
