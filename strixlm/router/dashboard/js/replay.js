// Replay browser: recorded requests from GET /api/v1/replay (newest first, filterable), and
// one record's signals, attempts and bodies from GET /api/v1/replay/{id}.
import { api, $, el, clear, say, ms, when, json } from "./util.js";

const PAGE = 25;
let offset = 0;
let total = 0;

export function init(app) {
  $("#replay-refresh").addEventListener("click", () => { offset = 0; load(); });
  $("#replay-decision").addEventListener("change", () => { offset = 0; load(); });
  $("#replay-model").addEventListener("change", () => { offset = 0; load(); });
  $("#replay-prev").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); load(); });
  $("#replay-next").addEventListener("click", () => {
    if (offset + PAGE < total) { offset += PAGE; load(); }
  });
}

export function invalidate() {}

export async function show(app) {
  const select = $("#replay-decision");
  const chosen = select.value;
  clear(select, el("option", { value: "" }, "any"),
    (app.state ? app.state.decisions : []).map((d) => el("option", { value: d }, d)));
  select.value = chosen;
  await load();
}

function matched(signals) {
  return Object.entries(signals || {}).filter(([, r]) => r.matched)
    .map(([name, r]) => (r.value && r.value !== "true" ? `${name}=${r.value}` : name));
}

async function load() {
  const out = $("#replay-result");
  const params = new URLSearchParams({ limit: PAGE, offset });
  if ($("#replay-decision").value) params.set("decision", $("#replay-decision").value);
  if ($("#replay-model").value.trim()) params.set("model", $("#replay-model").value.trim());
  const body = $("#replay-table tbody");
  try {
    const r = await api(`/api/v1/replay?${params}`);
    total = r.total;
    say(out, "", "");
    $("#replay-meta").textContent = total
      ? `${offset + 1}–${offset + r.records.length} of ${total}` : "no requests recorded yet";
    clear(body, r.records.map(row));
  } catch (e) {
    clear(body);
    $("#replay-meta").textContent = "";
    if (e.status === 404) {
      say(out, "error", "Replay is off: add a router_replay plugin in the ",
        el("a", { href: "#config" }, "config"), " (setup adds one).");
    } else say(out, "error", e.message);
  }
}

function row(rec) {
  const sig = matched(rec.signals);
  const status = rec.fast_response ? `${rec.status} fast` : rec.cache_hit ? `${rec.status} cached` : rec.status;
  const tr = el("tr", { class: rec.error || rec.status >= 400 ? "bad" : "",
    dataset: { id: rec.id, requestId: rec.request_id }, onclick: () => detail(rec.id, tr) },
  el("td", {}, rec.id),
  el("td", { title: rec.request_id }, when(rec.created_at)),
  el("td", {}, rec.decision || "–",
    rec.decision_confidence !== null ? el("span", { class: "hint" }, ` ${rec.decision_confidence.toFixed(2)}`) : null),
  el("td", {}, rec.model || "–"),
  el("td", {}, rec.backend || "–"),
  el("td", {}, status ?? "–"),
  el("td", { class: "signals" }, sig.length ? sig.join(", ") : "–"),
  el("td", { class: "num" }, ms(rec.routing_ms)),
  el("td", { class: "num" }, ms(rec.ttft_ms)),
  el("td", { class: "num" }, ms(rec.total_ms)));
  return tr;
}

async function detail(id, tr) {
  for (const other of tr.parentNode.children) other.classList.toggle("selected", other === tr);
  const panel = $("#replay-detail");
  panel.hidden = false;
  try {
    const rec = await api(`/api/v1/replay/${id}`);
    clear(panel, render(rec));
    panel.scrollIntoView({ block: "nearest" });
  } catch (e) {
    clear(panel, el("p", { class: "msg error" }, e.message));
  }
}

function kv(pairs) {
  return el("table", { class: "kv" }, pairs.filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, String(v)))));
}

function render(rec) {
  const signals = Object.entries(rec.signals || {});
  const attempts = rec.attempts || [];
  return [
    el("h3", {}, `Request ${rec.request_id}`),
    kv([
      ["time", when(rec.created_at)],
      ["requested model", rec.requested_model],
      ["decision", rec.decision ? `${rec.decision} (confidence ${rec.decision_confidence?.toFixed(3)})` : "none"],
      ["model", rec.model], ["backend", rec.backend], ["status", rec.status],
      ["stream", rec.stream], ["cache hit", rec.cache_hit], ["fast response", rec.fast_response],
      ["routing", ms(rec.routing_ms)], ["time to first token", ms(rec.ttft_ms)],
      ["upstream", ms(rec.upstream_ms)], ["total", ms(rec.total_ms)], ["error", rec.error],
    ]),
    el("h4", {}, "Signals"),
    el("table", { class: "grid signals-table" },
      el("thead", {}, el("tr", {}, ["signal", "matched", "value", "confidence", "latency"].map((h) => el("th", {}, h)))),
      el("tbody", {}, signals.map(([name, r]) => el("tr", { class: r.matched ? "matched" : "" },
        el("td", {}, name), el("td", {}, r.matched ? "yes" : "no"), el("td", {}, r.value ?? "–"),
        el("td", { class: "num" }, r.confidence?.toFixed(3)), el("td", { class: "num" }, ms(r.latency_ms)))))),
    attempts.length ? [el("h4", {}, "Upstream attempts"), el("pre", { class: "code" }, json(attempts))] : null,
    rec.request_body ? [el("h4", {}, "Request"), el("pre", { class: "code" }, json(rec.request_body))] : null,
    rec.response_body ? [el("h4", {}, "Response"), el("pre", { class: "code" }, json(rec.response_body))] : null,
  ];
}
