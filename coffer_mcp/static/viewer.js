// The Coffer viewer: knowledge bases, documents, search; read-only, no build step.
//
// State lives in the URL hash (#/kb/NAME, #/kb/NAME/doc/ID, #/search/QUERY, #/kb/NAME/search/QUERY,
// a search's filters after a "?": #/search/QUERY?tag=draft&format=pdf) so Back works and a view can
// be bookmarked. Everything from the server is shown through
// textContent or the DOM-building Markdown renderer: no server string is ever parsed as HTML.

import { renderMarkdown } from "./markdown.js";

const ACTION_TOKEN = document.querySelector('meta[name="coffer-action-token"]').content;
const PAGE_SIZE = 50;
const FEW_DOCUMENTS = 10; // a list this short is read at a glance: no title filter
const $ = (id) => document.getElementById(id);
const state = { kb: null, filter: "", offset: 0, total: 0, unfiltered: 0, doc: null, kbs: [], seq: 0, mainSeq: 0 };

class ApiError extends Error {
  constructor(body, status) {
    super(body.message || `HTTP ${status}`);
    this.hint = body.hint || "";
    this.code = body.code || "http_error";
    this.status = status;
  }
}

async function api(path, options = {}) {
  const response = await fetch(`/api/v1${path}`, { credentials: "same-origin", ...options });
  if (response.status === 401) {
    // The login went stale (the server restarted with another token): reloading shows the login
    // page, whose form brings the reader back to this very view (#/… survives it).
    location.reload();
    return new Promise(() => {});
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(body, response.status);
  return body;
}

const enc = encodeURIComponent;

function make(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function toast(message, hint = "", isError = false) {
  const box = $("toast");
  box.replaceChildren(make("strong", "", message));
  if (hint) box.append(make("span", "hint", hint));
  box.classList.toggle("error", isError);
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.hidden = true; }, isError ? 9000 : 4000);
}

function fail(error) {
  toast(error.message, error.hint, true);
}

function show(view) {
  for (const id of ["welcome", "results", "document"]) $(id).hidden = id !== view;
}

function counted(n, noun) {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

function formatBytes(bytes) {
  const units = ["B", "KB", "MB", "GB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

// -- knowledge bases ---------------------------------------------------------------------------

async function loadKbs() {
  const { knowledge_bases: kbs } = await api("/knowledge_bases");
  state.kbs = kbs;
  const list = $("kb-list");
  list.replaceChildren();
  if (!kbs.length) list.append(make("li", "empty", "No knowledge bases yet. Create one with: coffer kb create NAME"));
  for (const kb of kbs) {
    const link = make("a", "item", "");
    link.href = `#/kb/${enc(kb.name)}`;
    link.dataset.kb = kb.name;
    link.title = kb.description || kb.name;
    link.append(make("span", "name", kb.name), make("span", "count", String(kb.document_count)));
    const li = make("li");
    li.append(link);
    list.append(li);
  }
  const scope = $("search-scope");
  scope.replaceChildren(new Option("All knowledge bases", ""));
  for (const kb of kbs) scope.append(new Option(kb.name, kb.name));
  scope.value = state.kb || "";
  markActive();
}

function markActive() {
  for (const link of document.querySelectorAll("#kb-list a")) link.classList.toggle("active", link.dataset.kb === state.kb);
  for (const link of document.querySelectorAll("#doc-list a")) link.classList.toggle("active", link.dataset.doc === state.doc);
}

async function selectKb(kb) {
  state.kb = kb;
  state.filter = "";
  state.offset = 0;
  state.total = 0;
  state.unfiltered = 0;
  $("doc-filter").value = "";
  $("search-scope").value = kb || "";
  markActive();
  if (!kb) {
    $("kb-meta").hidden = true;
    $("doc-list").replaceChildren(make("li", "empty", "Pick a knowledge base to see its documents."));
    updatePager();
    return;
  }
  await Promise.all([loadKbMeta(kb), loadDocs()]);
}

async function loadKbMeta(kb) {
  const details = await api(`/knowledge_bases/${enc(kb)}`);
  const meta = $("kb-meta");
  const facts = `${counted(details.document_count, "document")} · ${counted(details.chunk_count, "chunk")} · ${formatBytes(details.disk_bytes)}`;
  const actions = make("div", "actions small");
  actions.append(actionButton("Open folder", `/knowledge_bases/${enc(kb)}/open`),
    actionButton("Reveal", `/knowledge_bases/${enc(kb)}/reveal`));
  meta.replaceChildren(make("h2", "", details.name), make("p", "desc", details.description || ""),
    make("p", "facts", facts), make("p", "facts", `search: ${details.modes.join(", ")}`), actions);
  meta.hidden = false;
}

// -- documents ---------------------------------------------------------------------------------

async function loadDocs() {
  const seq = ++state.seq; // answers to an older filter must not overwrite a newer one
  const kb = state.kb;
  const query = `q=${enc(state.filter)}&limit=${PAGE_SIZE}&offset=${state.offset}`;
  const page = await api(`/knowledge_bases/${enc(kb)}/documents?${query}`);
  if (seq !== state.seq) return;
  state.total = page.total;
  if (!state.filter) state.unfiltered = page.total;
  const list = $("doc-list");
  list.replaceChildren();
  if (!page.documents.length) list.append(make("li", "empty", state.filter ? "No title matches." : "No documents yet."));
  for (const doc of page.documents) {
    const link = make("a", "item doc", "");
    link.href = `#/kb/${enc(kb)}/doc/${enc(doc.document_id)}`;
    link.dataset.doc = doc.document_id;
    link.append(make("span", "name", doc.title), make("span", "file", doc.original_filename));
    const li = make("li");
    li.append(link);
    list.append(li);
  }
  updatePager();
  markActive();
}

// The title filter and the pager show only when they have something to do: a knowledge base with
// more than a few documents (or a filter typed), a list longer than a page.
function updatePager() {
  const shown = state.kb ? Math.min(state.total, state.offset + PAGE_SIZE) : 0;
  $("doc-filter").hidden = !state.kb || (!state.filter && state.unfiltered <= FEW_DOCUMENTS);
  $("pager").hidden = !state.kb || (state.offset === 0 && shown >= state.total);
  $("page-info").textContent = state.kb && state.total ? `${state.offset + 1}–${shown} of ${state.total}` : "";
  $("prev-page").disabled = state.offset === 0;
  $("next-page").disabled = shown >= state.total;
}

async function showDocument(kb, id) {
  const seq = ++state.mainSeq; // a slow answer for an earlier click must not replace a later view
  const doc = await api(`/knowledge_bases/${enc(kb)}/documents/${enc(id)}`);
  if (seq !== state.mainSeq) return;
  state.doc = id;
  $("doc-title").textContent = doc.title;
  const meta = doc.metadata || {};
  $("doc-meta").textContent = [meta.original_filename, meta.original_format, meta.source_mode,
    meta.updated_at && `updated ${meta.updated_at}`].filter(Boolean).join(" · ");
  $("doc-path").textContent = doc.path;
  $("doc-path").title = `In folder ${doc.folder}`;
  const body = renderMarkdown(doc.markdown);
  const first = body.firstElementChild;
  // Converted documents usually open with their title as a heading; the page header shows it already.
  if (first && first.tagName === "H1" && first.textContent.trim() === doc.title.trim()) first.remove();
  $("doc-body").replaceChildren(body);
  $("open-original").href = originalUrl(kb, id);
  $("open-doc").dataset.path = `/knowledge_bases/${enc(kb)}/documents/${enc(id)}/open`;
  $("reveal-doc").dataset.path = `/knowledge_bases/${enc(kb)}/documents/${enc(id)}/reveal`;
  show("document");
  markActive();
  $("main").scrollTop = 0;
}

// -- search ------------------------------------------------------------------------------------

// The search filters: each is the API's query parameter of the same name (the MCP tools' filters);
// tag and format take several values, written comma-separated in their boxes.
const FILTERS = ["tag", "format", "path_prefix", "created_after", "created_before", "updated_after", "updated_before"];
const LISTED = new Set(["tag", "format"]);

function filterParams() {
  const params = new URLSearchParams();
  for (const name of FILTERS) {
    const value = $(`filter-${name}`).value.trim();
    const values = LISTED.has(name) ? value.split(",").map((v) => v.trim()) : [value];
    for (const one of values) if (one) params.append(name, one);
  }
  return params;
}

function showFilters(params) {
  for (const name of FILTERS) {
    $(`filter-${name}`).value = LISTED.has(name) ? params.getAll(name).join(", ") : (params.get(name) || "");
  }
  const active = FILTERS.some((name) => params.has(name));
  $("search-filters").classList.toggle("active", active);
  $("search-filters").querySelector("summary").textContent = active ? "Filters ●" : "Filters";
}

function describeFilters(params) {
  return FILTERS.filter((name) => params.has(name))
    .map((name) => `${name.replace("_", " ")} ${params.getAll(name).join(", ")}`).join(" · ");
}

async function runSearch(kb, q, filters) {
  $("search-input").value = q;
  showFilters(filters);
  const path = kb ? `/knowledge_bases/${enc(kb)}/search` : "/search";
  const seq = ++state.mainSeq;
  const extra = filters.toString();
  const result = await api(`${path}?q=${enc(q)}&top_k=10${extra ? `&${extra}` : ""}`);
  if (seq !== state.mainSeq) return;
  const box = $("results");
  const n = result.passages.length;
  const heading = make("h1", "", `${counted(n, "passage")} for “${q}”`);
  const where = [kb ? `in ${kb}` : "in all knowledge bases", `${result.strategy} search`];
  if (extra) where.push(`only ${describeFilters(filters)}`);
  const scope = make("p", "facts", where.join(" · "));
  box.replaceChildren(heading, scope);
  // Why the search ran as it did, or found what it found: a vector search that ran as keyword,
  // a query of common words or symbols only.
  if (result.hint) box.append(make("p", "search-hint", result.hint));
  const words = markPattern(result.highlight || []);
  const list = make("ol", "passages");
  for (const passage of result.passages) list.append(passageItem(passage, words));
  box.append(list);
  state.doc = null;
  show("results");
  markActive();
}

function passageItem(passage, words) {
  const li = make("li", "passage");
  const link = make("a", "", "");
  link.href = `#/kb/${enc(passage.kb)}/doc/${enc(passage.document_id)}`;
  link.append(make("span", "title", passage.title), make("span", "kb", passage.kb));
  li.append(link);
  // Where in the document, less its title heading (shown just above).
  const path = passage.heading_path[0] === passage.title ? passage.heading_path.slice(1) : passage.heading_path;
  if (path.length) li.append(make("p", "where", path.join(" › ")));
  if (passage.source_location) li.append(sourceLine(passage));
  // A passage is a piece of a document's Markdown: rendered as the document is (a fence left open
  // at its end runs to the end of the passage), its matching words marked in the text it shows.
  const text = make("div", "text markdown");
  text.append(renderMarkdown(passage.text));
  markWords(text, words);
  li.append(text);
  const more = passage.more_positions || [];
  if (more.length) {
    // One passage per document: say where the document's other matches are.
    const label = `${counted(more.length, "more matching passage")} in this document`;
    li.append(make("p", "more", `${label} (#${more.join(", #")})`));
  }
  return li;
}

// Where a passage is in its document's original: "report.pdf · pp. 36–37", the file name a link
// to the original, opened at the passage's first page when it is a PDF (the browser's viewer
// reads #page=N); other originals open, or download, whole.
function sourceLine(passage) {
  const line = make("p", "source", "");
  const location = passage.source_location;
  let href = originalUrl(passage.kb, passage.document_id);
  const page = location.page || (location.pages && location.pages[0]);
  if (page) href += `#page=${page}`;
  const link = make("a", "", passage.original_filename || "original");
  link.href = href;
  link.target = "_blank";
  link.rel = "noopener";
  link.title = page ? `Open the original at page ${page}` : "Open the original";
  line.append(link, ` · ${describeLocation(location)}`);
  return line;
}

function originalUrl(kb, id) {
  return `/api/v1/knowledge_bases/${enc(kb)}/documents/${enc(id)}/original`;
}

const COUNTED = { page: ["p.", "pp."], slide: ["slide", "slides"], line: ["line", "lines"], row: ["row", "rows"] };

// A source_location as a reader cites it (the server's store/locations.py describe()).
function describeLocation(location) {
  if (location.heading) return `§ ${location.heading.join(" › ")}`;
  if (location.part) return location.part === "body" ? "e-mail body" : "e-mail headers";
  if (location.sheets) return `sheets ${location.sheets.join(", ")}`;
  const parts = location.sheet ? [`sheet ${location.sheet}`] : [];
  for (const [one, [single, plural]] of Object.entries(COUNTED)) {
    const range = location[`${one}s`];
    if (location[one] !== undefined) parts.push(`${single} ${location[one]}`);
    else if (range) parts.push(`${plural} ${range[0]}–${range[1]}`);
  }
  return parts.join(", ");
}

// Text written without spaces between words: the server's highlight holds its bigrams, marked
// wherever they occur. Any other word is marked only whole ("process", never in "subprocess").
const UNSPACED = /[\p{sc=Han}\p{sc=Hiragana}\p{sc=Katakana}\p{sc=Hangul}]/u;
const WORD_EDGE = "[\\p{L}\\p{N}\\p{M}]";

function markPattern(words) {
  if (!words.length) return null;
  const escaped = [...words].sort((a, b) => b.length - a.length).map((word) => {
    const literal = word.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    return UNSPACED.test(word) ? literal : `(?<!${WORD_EDGE})${literal}(?!${WORD_EDGE})`;
  });
  return new RegExp(escaped.join("|"), "giu");
}

// Marks the words in the text nodes under root; the elements the renderer built stay as they are.
function markWords(root, pattern) {
  if (!pattern) return;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  for (const node of nodes) {
    const text = node.nodeValue;
    const parts = [];
    let last = 0;
    for (const match of text.matchAll(pattern)) {
      parts.push(text.slice(last, match.index), make("mark", "", match[0]));
      last = match.index + match[0].length;
    }
    if (parts.length) node.replaceWith(...[...parts, text.slice(last)].filter((part) => part !== ""));
  }
}

// -- filesystem actions ------------------------------------------------------------------------

function actionButton(label, path) {
  const button = make("button", "", label);
  button.type = "button";
  button.dataset.path = path;
  button.addEventListener("click", () => act(button));
  return button;
}

async function act(button) {
  try {
    const result = await api(button.dataset.path, { method: "POST", headers: { "X-Coffer-Action-Token": ACTION_TOKEN } });
    toast(`${result.action === "open" ? "Opened" : "Revealed"} ${result.path}`, `with ${result.opener}`);
  } catch (error) {
    fail(error);
  }
}

// -- routing -----------------------------------------------------------------------------------

function parseHash() {
  const hash = location.hash.replace(/^#\/?/, "");
  const cut = hash.indexOf("?"); // the query is encoded: a "?" of its own is %3F
  const parts = (cut < 0 ? hash : hash.slice(0, cut)).split("/").map(decodeURIComponent);
  const route = { kb: null, doc: null, q: null, filters: new URLSearchParams(cut < 0 ? "" : hash.slice(cut + 1)) };
  if (parts[0] === "kb" && parts[1]) {
    route.kb = parts[1];
    if (parts[2] === "doc" && parts[3]) route.doc = parts[3];
    if (parts[2] === "search") route.q = parts.slice(3).join("/");
  } else if (parts[0] === "search") route.q = parts.slice(1).join("/");
  return route;
}

async function route() {
  const { kb, doc, q, filters } = parseHash();
  try {
    if (kb !== state.kb) await selectKb(kb);
    if (doc) await showDocument(kb, doc);
    else if (q) await runSearch(kb, q, filters);
    else { state.mainSeq += 1; state.doc = null; show("welcome"); markActive(); }
  } catch (error) {
    fail(error);
  }
}

function debounce(fn, ms) {
  let timer;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

function wire() {
  $("doc-filter").addEventListener("input", debounce(() => {
    state.filter = $("doc-filter").value.trim();
    state.offset = 0;
    loadDocs().catch(fail);
  }, 150));
  $("prev-page").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE_SIZE); loadDocs().catch(fail); });
  $("next-page").addEventListener("click", () => { state.offset += PAGE_SIZE; loadDocs().catch(fail); });
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const q = $("search-input").value.trim();
    if (!q) return;
    const kb = $("search-scope").value;
    const filters = filterParams().toString();
    const target = (kb ? `#/kb/${enc(kb)}/search/${enc(q)}` : `#/search/${enc(q)}`) + (filters ? `?${filters}` : "");
    $("search-filters").open = false;
    if (location.hash === target) route(); // the same search again: no hashchange fires
    else location.hash = target;
  });
  $("clear-filters").addEventListener("click", () => showFilters(new URLSearchParams()));
  for (const id of ["open-doc", "reveal-doc"]) $(id).addEventListener("click", () => act($(id)));
  window.addEventListener("hashchange", route);
}

wire();
loadKbs().then(route).catch(fail);
