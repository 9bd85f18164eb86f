// Small helpers shared by the views: DOM building (text only, never HTML strings, so a
// recorded prompt cannot inject markup), API calls that surface OpenAI error objects, formatting.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : String(child));
  }
}

export function clear(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];

export class ApiError extends Error {
  constructor(message, status, body) {
    super(message);
    this.status = status;
    this.body = body || {};
    this.problems = (body && body.problems) || [];
  }
}

// fetch + JSON; a non-2xx answer throws ApiError carrying the server's message and problems.
export async function api(path, { method = "GET", json, text, type, raw = false } = {}) {
  const init = { method, headers: {} };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["content-type"] = "application/json";
  } else if (text !== undefined) {
    init.body = text;
    init.headers["content-type"] = type || "application/yaml";
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new ApiError(`cannot reach the router: ${e.message}`, 0, null);
  }
  if (raw && resp.ok) return resp;
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    const msg = (body && body.error && body.error.message) || `${resp.status} ${resp.statusText}`;
    throw new ApiError(msg, resp.status, body);
  }
  return raw ? { resp, body } : body;
}

export function ms(value) {
  if (value === undefined || value === null || value === "") return "–";
  const n = Number(value);
  if (!Number.isFinite(n)) return String(value);
  return n < 10 ? `${n.toFixed(2)} ms` : n < 1000 ? `${n.toFixed(1)} ms` : `${(n / 1000).toFixed(2)} s`;
}

export function pct(x) {
  return x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)}%`;
}

export function when(unixSeconds) {
  if (!unixSeconds) return "–";
  const d = new Date(unixSeconds * 1000);
  return d.toLocaleString(undefined, { hour12: false });
}

// A status line: kind is "ok" | "error" | "busy" | "" (neutral).
export function say(node, kind, ...children) {
  node.className = `msg ${kind}`.trim();
  clear(node, ...children);
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}
