"""The viewer's JSON API under ``/api/v1/``: thin handlers over the synchronous core.

Each handler parses its parameters (strictly and range-checked, in ``_params``), runs one core
call on a worker thread (the core blocks on SQLite and files) and returns the pydantic model as
JSON. ``CofferError`` becomes ``{code, message, hint}`` with a status that says whose fault it
was.

    GET  /api/v1/knowledge_bases                                 list knowledge bases
    GET  /api/v1/knowledge_bases/{kb}                            details and metrics
    GET  /api/v1/knowledge_bases/{kb}/documents?q=&limit=&offset=&FILTERS
    GET  /api/v1/knowledge_bases/{kb}/documents/{id}?offset=&limit=   Markdown, metadata, path, folder
    GET  /api/v1/knowledge_bases/{kb}/documents/{id}/original    the original file, as ingested (read-only)
    GET  /api/v1/knowledge_bases/{kb}/search?q=&top_k=&FILTERS   passages from one KB
    GET  /api/v1/search?q=&top_k=&kb=&kb=&FILTERS                passages from some KBs, or all

FILTERS are the MCP tools' ``filters`` as query parameters: ``tag=`` and ``format=`` (repeatable),
``path_prefix=``, ``created_after=``, ``created_before=``, ``updated_after=``, ``updated_before=``.
    POST /api/v1/knowledge_bases/{kb}/open | /reveal             the KB folder
    POST /api/v1/knowledge_bases/{kb}/documents/{id}/open | /reveal

A search answers the core's ``SearchResult`` plus ``highlight``: the words of its passages that
match the query's words as the index analysed them (stemmed, stopwords left out), for the viewer
to mark.

A document's original is served as the bytes it was ingested as, never as a page of this site:
a PDF or an image inline (a browser's own viewer opens a PDF at ``#page=N``), anything else as
an attachment, with ``nosniff`` and a policy that lets no script run (``original_response``).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import anyio.to_thread
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from coffer_mcp.errors import (
    CofferError,
    EmbeddingError,
    ForbiddenActionError,
    InvalidArgumentError,
    KnowledgeBaseExistsError,
    NotFoundError,
)
from coffer_mcp.index.fts import STOPWORDS, analyze
from coffer_mcp.index.tokens import terms
from coffer_mcp.limits import MAX_TOP_K
from coffer_mcp.models import OriginalFile
from coffer_mcp.services import Coffer
from coffer_mcp.services.pages import MAX_PAGE_CHARS
from coffer_mcp.web._actions import (
    Action,
    NoOpenerError,
    OutsideStoreError,
    document_target,
    kb_target,
    run_action,
)
from coffer_mcp.web._params import (
    FILTER_PARAMS,
    MAX_OFFSET,
    check_known,
    doc_id,
    filters,
    kb_name,
    kb_selector,
    query_int,
    query_text,
)
from coffer_mcp.web._security import same_origin, tokens_equal

__all__ = ["ACTION_HEADER", "api_routes", "error_response"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Any]]

ACTION_HEADER = "x-coffer-action-token"
MAX_PAGE_DOCUMENTS = 1000  # the core's bound on a page of the document list
MAX_HIGHLIGHT = 200  # words a search answers for the viewer to mark
_WORD = re.compile(r"[^\W_]+")  # a word as the index's tokenizer cuts it ("snake_case" is two)


_STATUS: list[tuple[type[CofferError], int]] = [
    (InvalidArgumentError, 400),
    (OutsideStoreError, 403),
    (ForbiddenActionError, 403),
    (NotFoundError, 404),
    (KnowledgeBaseExistsError, 409),
    (NoOpenerError, 501),
    (EmbeddingError, 503),
]


def error_response(exc: CofferError) -> JSONResponse:
    """The JSON body and status for a core error."""
    status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
    # The API serves the viewer: its hints name the viewer's controls, not MCP tools.
    return JSONResponse(exc.to_dict("web"), status_code=status, headers={"cache-control": "no-store"})


def _endpoint(handler: Handler, params: tuple[str, ...] | None = ()) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a handler: query parameters other than ``params`` refused (None: not checked), JSON out,
    ``CofferError`` mapped, anything else logged as a 500."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        try:
            if params is not None:
                check_known(request, params)
            result = await handler(request)
        except CofferError as exc:
            return error_response(exc)
        except Exception:  # the edge: log it, answer JSON rather than a bare 500
            log.exception("viewer API %s %s failed", request.method, request.url.path)
            return JSONResponse(
                {"code": "internal", "message": "The server failed; see its log.", "hint": ""}, status_code=500
            )
        if isinstance(result, Response):  # a file, not JSON: the original of a document
            return result
        body = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
        return JSONResponse(body, headers={"cache-control": "no-store"})

    return endpoint


async def _run(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await anyio.to_thread.run_sync(functools.partial(call, *args, **kwargs))


def api_routes(service: Coffer, action_token: str) -> list[Route]:
    """The routes of ``/api/v1`` (mount them there) over ``service``.

    Args:
        service: The core service.
        action_token: The per-process secret the viewer page carries; filesystem actions need it.
    """
    api = _Handlers(service, action_token)
    kb, doc = "/knowledge_bases/{kb}", "/knowledge_bases/{kb}/documents/{doc_id}"
    get, post = ["GET"], ["POST"]
    return [
        Route("/knowledge_bases", _endpoint(api.list_kbs), methods=get),
        Route(kb, _endpoint(api.describe_kb), methods=get),
        Route(kb + "/documents", _endpoint(api.list_documents, ("q", "limit", "offset", *FILTER_PARAMS)), methods=get),
        Route(doc, _endpoint(api.read_document, ("offset", "limit")), methods=get),
        Route(doc + "/original", _endpoint(api.read_original), methods=get),
        Route(kb + "/search", _endpoint(api.search, ("q", "top_k", *FILTER_PARAMS)), methods=get),
        Route("/search", _endpoint(api.search, ("q", "top_k", "kb", *FILTER_PARAMS)), methods=get),
        Route(kb + "/open", _endpoint(api.action("open", api.kb_target)), methods=post),
        Route(kb + "/reveal", _endpoint(api.action("reveal", api.kb_target)), methods=post),
        Route(doc + "/open", _endpoint(api.action("open", api.document_target)), methods=post),
        Route(doc + "/reveal", _endpoint(api.action("reveal", api.document_target)), methods=post),
        # Every other method too, so that what no endpoint serves is refused in JSON, not Starlette's text 405.
        Route("/{rest:path}", _endpoint(_unknown, None), methods=_EVERY_METHOD),  # 404 whatever its query
    ]


class _Handlers:
    """The endpoints, each a thin call on the core."""

    def __init__(self, service: Coffer, action_token: str) -> None:
        self.service = service
        self.action_token = action_token

    async def list_kbs(self, request: Request) -> Any:
        return {"knowledge_bases": [kb.model_dump(mode="json") for kb in await _run(self.service.list_kbs)]}

    async def describe_kb(self, request: Request) -> Any:
        return await _run(self.service.describe_kb, kb_name(request))

    async def list_documents(self, request: Request) -> Any:
        kb, title_filter = kb_name(request), query_text(request, "q")
        limit = query_int(request, "limit", default=50, low=1, high=MAX_PAGE_DOCUMENTS)
        offset = query_int(request, "offset", default=0, low=0, high=MAX_OFFSET)
        return await _run(self.service.list_documents, kb, title_filter, limit, offset, filters=filters(request))

    async def read_document(self, request: Request) -> Any:
        kb, doc = kb_name(request), doc_id(request)
        offset = query_int(request, "offset", default=0, low=0, high=MAX_OFFSET)
        limit = query_int(request, "limit", default=None, low=1, high=MAX_PAGE_CHARS)
        document = await _run(self.service.read_document, kb, doc, offset=offset, limit=limit)
        folder = str(Path(document.path).parent) if document.path else None  # the core always gives the path
        return {**document.model_dump(mode="json"), "folder": folder}

    async def read_original(self, request: Request) -> Response:
        original = await _run(self.service.read_original, kb_name(request), doc_id(request))
        return original_response(original)

    async def search(self, request: Request) -> Any:
        kbs, query = kb_selector(request), query_text(request, "q")
        top_k = query_int(request, "top_k", default=10, low=1, high=MAX_TOP_K)
        result = await _run(self.service.search, kbs, query, top_k, filters=filters(request))
        marks = await _run(highlight, query, [passage.text for passage in result.passages])
        return {**result.model_dump(mode="json"), "highlight": marks}

    def kb_target(self, request: Request) -> Path:
        return kb_target(self.service, kb_name(request))

    def document_target(self, request: Request) -> Path:
        return document_target(self.service, kb_name(request), doc_id(request))

    def action(self, name: Action, target: Callable[[Request], Path]) -> Handler:
        """A filesystem action: checked for origin and action token first, then resolved and run."""

        async def act(request: Request) -> Any:
            _check_action(request, self.action_token)

            def work() -> dict[str, Any]:
                path = target(request)  # validates names and ids, stays inside the store
                launch = run_action(self.service, name, path)
                return {"ok": True, "action": name, "path": str(path), "opener": launch.opener}

            return await _run(work)

        return act


# What a browser may show in place: a PDF in its own viewer, images that carry no script (never SVG).
_INLINE = {
    "pdf": "application/pdf",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}
# A PDF: Chrome's viewer is an embedded plugin in a page with inline styles, which object-src 'none'
# or default-src 'none' alone would block (a blank or tiny view); nothing else is allowed.
_PDF_POLICY = (
    "default-src 'none'; object-src 'self'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
_FILE_POLICY = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; sandbox"


def original_response(original: OriginalFile) -> Response:
    """A document's original as a download, or shown in place when it is a PDF or an image."""
    media = _INLINE.get(original.original_format)
    disposition = "inline" if media else "attachment"
    headers = {
        "content-disposition": f"{disposition}; {_filename_parameters(original.filename)}",
        "content-security-policy": _PDF_POLICY if original.original_format == "pdf" else _FILE_POLICY,
        "x-content-type-options": "nosniff",
        "cache-control": "private, no-store",
    }
    return Response(original.data, media_type=media or "application/octet-stream", headers=headers)


def _filename_parameters(name: str) -> str:
    """``filename="..."`` (ASCII, quotes and controls replaced) and ``filename*`` (RFC 5987, exact)."""
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name) or "original"
    return f"filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


def highlight(query: str, texts: Iterable[str]) -> list[str]:
    """The words of ``texts`` a keyword search for ``query`` matches, lower-cased, for the viewer to mark.

    A word matches when its index term is one of the query's words' terms, stopwords left out:
    ``running`` marks "runs" and "Running", ``process`` never "subprocess", ``the`` nothing. Text
    written without spaces is searched by its bigrams, so those of the query are answered as they
    are (the viewer marks them wherever they occur).
    """
    analysed = analyze(query)
    wanted = {term for word in analysed.words if word not in STOPWORDS for term in terms(word)}
    found = dict.fromkeys(
        word.lower() for text in texts if wanted for word in _WORD.findall(text) if wanted.intersection(terms(word))
    )
    bigrams = [] if analysed.only_stopwords else [t for t in analysed.index_terms() if t not in analysed.words]
    return [*bigrams, *found][:MAX_HIGHLIGHT]


_EVERY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"]


async def _unknown(request: Request) -> Any:
    raise NotFoundError(
        f"No API endpoint {request.method} {request.url.path[:200]}.",
        hint="The endpoints are listed in docs/http.md; GET /api/v1/knowledge_bases lists the knowledge bases.",
    )


def _check_action(request: Request, action_token: str) -> None:
    """Filesystem actions: only from this server's own page (same origin) carrying its action token.

    The guard already refused a foreign Origin; here the Origin must be *present* (browsers send
    it on every POST from script), and a custom header cannot be sent cross-origin without a CORS
    preflight, which this server never grants.
    """
    origin = request.headers.get("origin")
    fetch_site = request.headers.get("sec-fetch-site")
    if (
        origin is None
        or not same_origin(origin, request.headers.get("host", ""))
        or fetch_site not in (None, "same-origin")
    ):
        raise ForbiddenActionError(
            "Filesystem actions are only accepted from the viewer page itself.",
            hint="Use the buttons of the viewer served by this server.",
        )
    if not tokens_equal(request.headers.get(ACTION_HEADER), action_token):
        raise ForbiddenActionError(
            "The action token is missing or stale.",
            hint="Reload the viewer page; it carries the server's current token.",
        )
