// A small Markdown renderer that builds DOM nodes and never parses HTML.
//
// Document text is untrusted: every piece of it reaches the page through textContent or a text
// node, so raw HTML in a document shows as text. Links keep only http(s) and mailto targets.
// Covers what converted documents use: ATX and setext headings, paragraphs with hard breaks,
// nested lists, fenced code, block quotes, GFM tables, rules, and inline code, emphasis,
// strikethrough, links and autolinks. Images become links (the page loads nothing external).

const FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/;
const ATX = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;
const TABLE_SEP = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const SETEXT = /^ {0,3}(=+|-+)[ \t]*$/;
const HARD_BREAK = "\u2028";

export function renderMarkdown(source, doc = document) {
  const fragment = doc.createDocumentFragment();
  const lines = String(source).replace(/\r\n?/g, "\n").replace(/\t/g, "    ").split("\n");
  renderBlocks(lines, fragment, doc);
  return fragment;
}

function el(doc, tag, className) {
  const node = doc.createElement(tag);
  if (className) node.className = className;
  return node;
}

function indentOf(line) {
  return line.length - line.trimStart().length;
}

function startsBlock(line, next) {
  return FENCE.test(line) || ATX.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line)
    || (line.includes("|") && next !== undefined && TABLE_SEP.test(next) && next.includes("-"));
}

function renderBlocks(lines, parent, doc) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === "") { i += 1; continue; }
    const next = lines[i + 1];
    let m;
    if ((m = FENCE.exec(line))) i = fence(lines, i, m, parent, doc);
    else if ((m = ATX.exec(line))) { parent.append(heading(doc, m[1].length, m[2] || "")); i += 1; }
    else if (RULE.test(line)) { parent.append(el(doc, "hr")); i += 1; }
    else if (QUOTE.test(line)) i = quote(lines, i, parent, doc);
    else if (line.includes("|") && next !== undefined && TABLE_SEP.test(next) && next.includes("-")) {
      i = table(lines, i, parent, doc);
    } else if ((m = ITEM.exec(line)) && m[3] !== undefined) i = list(lines, i, parent, doc);
    else i = paragraph(lines, i, parent, doc);
  }
}

function heading(doc, level, text) {
  const node = el(doc, `h${level}`);
  renderInline(text.trim(), node, doc);
  return node;
}

function fence(lines, start, open, parent, doc) {
  const marker = open[1];
  const body = [];
  let i = start + 1;
  while (i < lines.length) {
    const close = lines[i].trim();
    if (close.startsWith(marker[0].repeat(marker.length)) && /^(`+|~+)$/.test(close)) { i += 1; break; }
    body.push(lines[i]);
    i += 1;
  }
  const pre = el(doc, "pre");
  const code = el(doc, "code");
  if (/^[\w+#.-]{1,32}$/.test(open[2])) code.className = `language-${open[2]}`;
  code.textContent = body.join("\n");
  pre.append(code);
  parent.append(pre);
  return i;
}

function quote(lines, start, parent, doc) {
  const inner = [];
  let i = start;
  while (i < lines.length && lines[i].trim() !== "") {
    const m = QUOTE.exec(lines[i]);
    inner.push(m ? m[1] : lines[i]); // a line without '>' continues the quote's paragraph
    i += 1;
  }
  const node = el(doc, "blockquote");
  renderBlocks(inner, node, doc);
  parent.append(node);
  return i;
}

function splitRow(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
  return row.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"));
}

function table(lines, start, parent, doc) {
  const aligns = splitRow(lines[start + 1]).map((c) => (c.endsWith(":") ? (c.startsWith(":") ? "center" : "right") : ""));
  const wrap = el(doc, "div", "table-wrap");
  const tbl = el(doc, "table");
  const head = el(doc, "thead");
  head.append(row(doc, splitRow(lines[start]), aligns, "th"));
  const body = el(doc, "tbody");
  let i = start + 2;
  while (i < lines.length && lines[i].trim() !== "" && lines[i].includes("|")) {
    body.append(row(doc, splitRow(lines[i]), aligns, "td"));
    i += 1;
  }
  tbl.append(head, body);
  wrap.append(tbl);
  parent.append(wrap);
  return i;
}

function row(doc, cells, aligns, tag) {
  const tr = el(doc, "tr");
  aligns.forEach((align, index) => {
    const cell = el(doc, tag, align ? `align-${align}` : "");
    renderInline(cells[index] || "", cell, doc);
    tr.append(cell);
  });
  return tr;
}

function list(lines, start, parent, doc) {
  const first = ITEM.exec(lines[start]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const node = el(doc, ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  let i = start;
  while (i < lines.length) {
    if (lines[i].trim() === "") {
      const j = nextContent(lines, i);
      const m = j < lines.length ? ITEM.exec(lines[j]) : null;
      if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
      i = j;
    }
    const m = ITEM.exec(lines[i]);
    if (!m || m[3] === undefined || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const [itemLines, end] = itemBody(lines, i, m, indent);
    node.append(listItem(doc, itemLines));
    i = end;
  }
  parent.append(node);
  return i;
}

function nextContent(lines, i) {
  let j = i;
  while (j < lines.length && lines[j].trim() === "") j += 1;
  return j;
}

function itemBody(lines, start, m, indent) {
  const contentIndent = m[1].length + m[2].length + 1;
  const body = [m[3]];
  let i = start + 1;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === "") {
      const j = nextContent(lines, i);
      if (j < lines.length && indentOf(lines[j]) >= contentIndent) { body.push(""); i += 1; continue; }
      break;
    }
    const sub = ITEM.exec(line);
    if (sub && sub[1].length <= indent) break;
    if (sub || indentOf(line) >= contentIndent) body.push(line.slice(Math.min(contentIndent, indentOf(line))));
    else if (!startsBlock(line, lines[i + 1])) body.push(line.trim()); // a lazy continuation line
    else break;
    i += 1;
  }
  return [body, i];
}

function listItem(doc, itemLines) {
  const li = el(doc, "li");
  const task = /^\[([ xX])\][ \t]+/.exec(itemLines[0]);
  if (task) {
    li.className = "task";
    itemLines[0] = `${task[1] === " " ? "\u2610" : "\u2611"} ${itemLines[0].slice(task[0].length)}`;
  }
  renderBlocks(itemLines, li, doc);
  if (li.childElementCount === 1 && li.firstElementChild.tagName === "P") li.firstElementChild.replaceWith(...li.firstElementChild.childNodes);
  else if (li.firstElementChild && li.firstElementChild.tagName === "P" && !itemLines.includes("")) {
    li.firstElementChild.replaceWith(...li.firstElementChild.childNodes); // tight item with a nested list
  }
  return li;
}

function paragraph(lines, start, parent, doc) {
  const text = [];
  let i = start;
  while (i < lines.length && lines[i].trim() !== "") {
    const setext = SETEXT.exec(lines[i]);
    if (setext && text.length) {
      parent.append(heading(doc, setext[1][0] === "=" ? 1 : 2, text.join(" ")));
      return i + 1;
    }
    if (text.length && startsBlock(lines[i], lines[i + 1])) break;
    text.push(lines[i]);
    i += 1;
  }
  const p = el(doc, "p");
  const joined = text.map((line, k) => (k < text.length - 1 && /( {2,}|\\)$/.test(line)
    ? line.replace(/( {2,}|\\)$/, HARD_BREAK) : line.trim())).join("\n");
  renderInline(joined, p, doc);
  parent.append(p);
  return i;
}

// -- inline ------------------------------------------------------------------------------------

const INLINE = [
  ["code", /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g],
  ["escape", /\\([!-/:-@[-`{-~])/g],
  ["image", /!\[((?:[^\]\\]|\\.)*)\]\(\s*<?((?:[^\s()<>]|\([^\s()<>]*\))*)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)/g],
  ["link", /\[((?:[^[\]\\]|\\.|\[[^\]]*\])*)\]\(\s*<?((?:[^\s()<>]|\([^\s()<>]*\))*)>?(?:\s+(?:"([^"]*)"|'([^']*)'))?\s*\)/g],
  ["autolink", /<((?:https?:\/\/|mailto:)[^\s<>]+)>/gi],
  ["url", /\bhttps?:\/\/[^\s<>()[\]]*[^\s<>()[\].,;:!?'"*_~]/gi],
  ["strong", /\*\*(?=\S)([\s\S]*?\S)\*\*|(?<![\p{L}\p{N}_\\])__(?=\S)([\s\S]*?\S)__(?![\p{L}\p{N}_])/gu],
  ["strike", /~~(?=\S)([\s\S]*?\S)~~/g],
  ["em", /(?<![\p{L}\p{N}*\\])\*(?=[^\s*])([\s\S]*?[^\s*\\])\*(?!\*)|(?<![\p{L}\p{N}_\\])_(?=[^\s_])([\s\S]*?[^\s_\\])_(?![\p{L}\p{N}_])/gu],
];

// The patterns that look behind ("\b", "(?<!...)") once more, as they behave at the very start of
// a string, where those checks always pass before the "h", "*" or "_" that follows them. The scan
// below searches the whole text from an offset, where they see the character before it; these
// sticky twins are tried at the offset when that character could make the two disagree
// (SEES_BEFORE), so each element found is the one matching the remainder on its own would find.
const AT_START = INLINE.map(([, pattern]) => {
  const source = pattern.source.replace(/^\\b/, "").replace(/\(\?<!\[[^\]]*\]\)/g, "");
  return source === pattern.source ? null : new RegExp(source, pattern.flags.replace("g", "y"));
});
const SEES_BEFORE = /(?<=[\p{L}\p{N}_*\\])/uy;

export function safeHref(url) {
  // Browsers ignore control characters and spaces inside a scheme ("java\tscript:"): drop them first.
  const cleaned = String(url).replace(/[\u0000-\u0020\u007f-\u009f]/g, "");
  return /^(https?:\/\/|mailto:)/i.test(cleaned) ? cleaned : null;
}

// One left-to-right scan. Each pattern's next match is searched for once and kept while it lies
// ahead; only the patterns whose match was passed are searched again, from the end of the element
// just taken. Searching every pattern over the whole remainder after each element made a log file
// (one paragraph, a URL per line) quadratic: 10,000 lines took 13 s and froze the tab.
function renderInline(text, parent, doc) {
  const ahead = INLINE.map(() => undefined); // a pattern's next match; null: none in the rest
  let pos = 0;
  while (pos < text.length) {
    const best = nextElement(text, pos, ahead);
    if (best === null) break;
    appendText(parent, text.slice(pos, best.m.index), doc);
    parent.append(inlineNode(best.kind, best.m, doc));
    pos = best.m.index + best.m[0].length;
  }
  if (pos < text.length) appendText(parent, text.slice(pos), doc);
}

// The earliest match at or after pos, the first pattern in INLINE order winning a tie.
function nextElement(text, pos, ahead) {
  SEES_BEFORE.lastIndex = pos;
  const edge = pos > 0 && SEES_BEFORE.test(text);
  let best = null;
  INLINE.forEach(([kind, pattern], k) => {
    let m = null;
    if (edge && AT_START[k]) {
      AT_START[k].lastIndex = pos;
      m = AT_START[k].exec(text);
    }
    if (m === null) {
      if (ahead[k] === undefined || (ahead[k] !== null && ahead[k].index < pos)) {
        pattern.lastIndex = pos;
        ahead[k] = pattern.exec(text);
      }
      m = ahead[k];
    }
    if (m && (best === null || m.index < best.m.index)) best = { kind, m };
  });
  return best;
}

function inlineNode(kind, m, doc) {
  switch (kind) {
    case "code": { const code = el(doc, "code"); code.textContent = m[2].replace(/^ (.*) $/s, "$1"); return code; }
    case "escape": return doc.createTextNode(m[1]);
    case "image": return link(doc, m[2], `[image: ${m[1] || m[2]}]`, "", false);
    case "link": return link(doc, m[2], m[1], m[3] || m[4] || "", true);
    case "autolink": return link(doc, m[1], m[1], "", false);
    case "url": return link(doc, m[0], m[0], "", false);
    case "strong": return wrap(doc, "strong", m[1] !== undefined ? m[1] : m[2]);
    case "strike": return wrap(doc, "del", m[1]);
    default: return wrap(doc, "em", m[1] !== undefined ? m[1] : m[2]);
  }
}

function wrap(doc, tag, inner) {
  const node = el(doc, tag);
  renderInline(inner, node, doc);
  return node;
}

function link(doc, url, label, title, inlineLabel) {
  const href = safeHref(url);
  const node = el(doc, href ? "a" : "span", href ? "" : "dead-link");
  if (href) {
    node.href = href;
    node.target = "_blank";
    node.rel = "noopener noreferrer nofollow";
  }
  node.title = title || url;
  if (inlineLabel) renderInline(label, node, doc);
  else node.textContent = label;
  return node;
}

function appendText(parent, text, doc) {
  const parts = text.split(HARD_BREAK);
  parts.forEach((part, index) => {
    const text = index ? part.replace(/^\n/, "") : part; // the line break after a <br> is just layout
    if (index) parent.append(el(doc, "br"));
    if (text) parent.append(doc.createTextNode(text));
  });
}
