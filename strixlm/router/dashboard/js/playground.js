// Playground: chat through the router (model `auto` is routed) and show, under each answer,
// the routing outcome the router reports in its x-vsr-* response headers.
import { api, $, el, clear, say, ms } from "./util.js";

let messages = [];
let modelsLoaded = false;

export function init() {
  $("#chat-form").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("#chat-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
  });
  $("#chat-clear").addEventListener("click", () => {
    messages = [];
    clear($("#chat-log"));
    say($("#chat-result"), "", "");
  });
}

export function invalidate() { modelsLoaded = false; }

export async function show() {
  if (modelsLoaded) return;
  try {
    const r = await api("/v1/models");
    const select = $("#chat-model");
    const chosen = select.value;
    clear(select, r.data.map((m) => el("option", { value: m.id },
      m.id === "auto" ? "auto (routed)" : `${m.id} (${m.owned_by})`)));
    if ([...select.options].some((o) => o.value === chosen)) select.value = chosen;
    modelsLoaded = true;
  } catch (e) {
    say($("#chat-result"), "error", e.message);
  }
}

// The routing outcome from the response headers (values are percent-encoded by the router).
export function routing(headers) {
  const get = (k) => {
    const v = headers.get(k);
    return v === null ? null : decodeURIComponent(v);
  };
  const matched = [];
  headers.forEach((value, key) => {
    if (key.startsWith("x-vsr-matched-")) {
      const v = decodeURIComponent(value);
      matched.push(v === "true" ? key.slice(14) : `${key.slice(14)}: ${v}`);
    }
  });
  return {
    decision: get("x-vsr-selected-decision"),
    confidence: get("x-vsr-decision-confidence"),
    model: get("x-vsr-selected-model"),
    backend: get("x-vsr-selected-backend"),
    routing_ms: get("x-vsr-routing-ms"),
    signals_ms: get("x-vsr-signals-ms"),
    cache_hit: get("x-vsr-cache-hit"),
    fast_response: get("x-vsr-fast-response"),
    request_id: get("x-vsr-request-id"),
    matched: matched.sort(),
  };
}

function bubble(role, ...children) {
  const node = el("div", { class: `bubble ${role}` }, el("div", { class: "role" }, role), ...children);
  $("#chat-log").append(node);
  node.scrollIntoView({ block: "end" });
  return node;
}

function routingCard(r) {
  const item = (label, value, cls) => el("div", { class: `fact ${cls}` },
    el("span", { class: "k" }, label), el("span", { class: "v" }, value ?? "–"));
  return el("div", { class: "routing" },
    item("decision", r.decision ? `${r.decision}${r.confidence ? ` (${Number(r.confidence).toFixed(2)})` : ""}` : "none", "r-decision"),
    item("model", r.model, "r-model"),
    item("backend", r.backend, "r-backend"),
    item("matched signals", r.matched.length ? r.matched.join(", ") : "none", "r-signals"),
    item("routing", ms(r.routing_ms), "r-routing-ms"),
    item("signals", ms(r.signals_ms), "r-signals-ms"),
    r.cache_hit === "true" ? item("cache", "hit", "r-cache") : null,
    r.fast_response === "true" ? item("fast response", "yes", "r-fast") : null,
    item("request", r.request_id, "r-request-id"));
}

async function send() {
  const input = $("#chat-input");
  const text = input.value.trim();
  if (!text) return;
  const maxTokens = parseInt($("#chat-max-tokens").value, 10);
  const body = { model: $("#chat-model").value, messages: [...messages, { role: "user", content: text }] };
  if (Number.isFinite(maxTokens) && maxTokens > 0) body.max_tokens = maxTokens;
  bubble("user", el("div", { class: "content" }, text));
  input.value = "";
  $("#chat-send").disabled = true;
  say($("#chat-result"), "busy", "waiting for the answer…");
  const t0 = performance.now();
  try {
    const resp = await fetch("/v1/chat/completions", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    });
    const data = await resp.json().catch(() => null);
    const r = routing(resp.headers);
    if (!resp.ok) {
      const msg = (data && data.error && data.error.message) || `${resp.status} ${resp.statusText}`;
      bubble("error", el("div", { class: "content" }, msg), routingCard(r));
      say($("#chat-result"), "error", `request failed with ${resp.status}`);
      return;
    }
    const msg = data.choices[0].message;
    messages = [...body.messages, { role: "assistant", content: msg.content || "" }];
    bubble("assistant",
      msg.reasoning_content ? el("details", {}, el("summary", {}, "reasoning"), msg.reasoning_content) : null,
      el("div", { class: "content" }, msg.content || ""), routingCard(r));
    say($("#chat-result"), "ok",
      `answered by ${data.model} in ${ms(performance.now() - t0)} (${data.usage?.completion_tokens ?? "?"} tokens)`);
  } catch (e) {
    bubble("error", el("div", { class: "content" }, `cannot reach the router: ${e.message}`));
    say($("#chat-result"), "error", e.message);
  } finally {
    $("#chat-send").disabled = false;
  }
}
