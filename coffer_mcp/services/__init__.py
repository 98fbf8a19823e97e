"""The services every surface calls, composed behind the ``Coffer`` facade (see ``services.coffer``)."""

from coffer_mcp.models import Progress
from coffer_mcp.services.coffer import Coffer
from coffer_mcp.services.retrieval import KbSelector
from coffer_mcp.services.store_model import embedding_config

__all__ = ["Coffer", "KbSelector", "Progress", "embedding_config"]
