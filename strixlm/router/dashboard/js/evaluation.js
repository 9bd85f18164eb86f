// Evaluation: a labelled set run through POST /api/v1/eval; accuracy per decision, the
// confusion matrix (rows expected, columns predicted) and per-signal latency.
import { api, $, el, clear, say, pct, ms } from "./util.js";

const SAMPLE = [
  { prompt: "How do I reverse a list in python?", expected_decision: "general" },
  { prompt: "Write a haiku about autumn", expected_decision: "general" },
];

export function init() {
  $("#eval-rows").value = SAMPLE.map((r) => JSON.stringify(r)).join("\n");
  $("#eval-run").addEventListener("click", () => runRows());
  $("#eval-run-shipped").addEventListener("click", () => run({}, "the shipped routing set"));
}

export function invalidate() {}

export async function show() {}

function parseRows(text) {
  const rows = [];
  text.split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    try {
      rows.push(JSON.parse(line));
    } catch (e) {
      throw new Error(`line ${i + 1}: invalid JSON: ${e.message}`);
    }
  });
  return rows;
}

async function runRows() {
  let rows;
  try {
    rows = parseRows($("#eval-rows").value);
  } catch (e) {
    say($("#eval-result"), "error", e.message);
    return;
  }
  await run({ rows }, `${rows.length} rows`);
}

async function run(body, what) {
  const out = $("#eval-result");
  say(out, "busy", `evaluating ${what}…`);
  try {
    const r = await api("/api/v1/eval", { method: "POST", json: body });
    say(out, "ok", `accuracy ${pct(r.accuracy)} (${r.correct}/${r.n}) on config v${r.config_version}`);
    clear($("#eval-report"), report(r));
  } catch (e) {
    say(out, "error", e.message);
  }
}

function bar(fraction, cls = "") {
  const f = Math.max(0, Math.min(1, fraction || 0));
  return el("span", { class: `bar ${cls}`.trim() }, el("span", { style: `width:${(100 * f).toFixed(1)}%` }));
}

function report(r) {
  const perDecision = el("table", { class: "grid", id: "eval-per-decision" },
    el("thead", {}, el("tr", {}, ["decision", "support", "correct", "accuracy", "", "predicted", "precision"]
      .map((h) => el("th", {}, h)))),
    el("tbody", {}, r.labels.map((label) => {
      const d = r.per_decision[label];
      return el("tr", { dataset: { decision: label } }, el("td", {}, label),
        el("td", { class: "num" }, d.support), el("td", { class: "num" }, d.correct),
        el("td", { class: "num accuracy" }, pct(d.accuracy)), el("td", {}, bar(d.accuracy)),
        el("td", { class: "num" }, d.predicted), el("td", { class: "num" }, pct(d.precision)));
    })));

  const peak = Math.max(1, ...r.labels.flatMap((a) => r.labels.map((b) => (r.confusion[a] || {})[b] || 0)));
  const confusion = el("table", { class: "grid confusion", id: "eval-confusion" },
    el("thead", {}, el("tr", {}, el("th", { class: "corner" }, "expected ↓ predicted →"),
      r.labels.map((l) => el("th", { class: "col" }, l)))),
    el("tbody", {}, r.labels.map((exp) => el("tr", {}, el("th", {}, exp),
      r.labels.map((pred) => {
        const n = (r.confusion[exp] || {})[pred] || 0;
        const alpha = n ? 0.15 + 0.85 * (n / peak) : 0;
        const hue = exp === pred ? "46, 160, 67" : "207, 34, 46";
        return el("td", { class: `num ${exp === pred ? "diag" : ""}`.trim(),
          dataset: { expected: exp, predicted: pred },
          style: n ? `background: rgba(${hue}, ${alpha.toFixed(2)})` : "" }, n || "");
      })))));

  const lat = Object.entries(r.signal_latency_ms);
  const slowest = Math.max(0.001, r.routing_latency_ms.p95, ...lat.map(([, s]) => s.p95));
  const latency = el("table", { class: "grid", id: "eval-latency" },
    el("thead", {}, el("tr", {}, ["signal", "mean", "p50", "p95", "max", "p95"].map((h) => el("th", {}, h)))),
    el("tbody", {}, [...lat, ["routing (all)", r.routing_latency_ms]].map(([name, s]) =>
      el("tr", { class: name === "routing (all)" ? "total" : "" }, el("td", {}, name),
        ["mean", "p50", "p95", "max"].map((k) => el("td", { class: "num" }, ms(s[k]))),
        el("td", {}, bar(s.p95 / slowest, "latency"))))));

  return [
    r.unknown_expected.length
      ? el("p", { class: "msg error" }, `expected decisions missing from the config: ${r.unknown_expected.join(", ")}`)
      : null,
    el("div", { class: "cards" },
      el("div", { class: "card" }, el("h3", {}, "Accuracy per decision"), perDecision),
      el("div", { class: "card" }, el("h3", {}, "Confusion matrix"), confusion)),
    el("div", { class: "card" }, el("h3", {}, "Signal latency"), latency),
    r.mistakes.length ? el("div", { class: "card" }, el("h3", {}, `Mistakes (first ${r.mistakes.length})`),
      el("div", { class: "scroll" }, el("table", { class: "grid" },
        el("thead", {}, el("tr", {}, ["id", "expected", "predicted", "text"].map((h) => el("th", {}, h)))),
        el("tbody", {}, r.mistakes.map((m) => el("tr", {}, el("td", {}, m.id), el("td", {}, m.expected),
          el("td", {}, m.predicted), el("td", {}, m.text))))))) : null,
  ];
}
