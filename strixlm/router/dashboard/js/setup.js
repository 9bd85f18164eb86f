// Setup: on first run (router started without --config) show the default config, let the user
// list backends (probing each for its models) and write a config file the router then loads.
import { api, $, $$, el, clear, say } from "./util.js";

let filled = false;

export function init(app) {
  $("#setup-add").addEventListener("click", () => addRow({ name: "", base_url: "" }).focus());
  $("#setup-save").addEventListener("click", () => save(app));
}

export function invalidate() {}

export async function show(app) {
  const s = app.state;
  if (!s) return;
  const notice = $("#setup-notice");
  if (s.first_run) {
    const urls = s.backends.map((b) => b.base_url).join(", ");
    clear(notice,
      el("b", {}, "First run. "),
      `The router started without a config file, so it runs the default config: every request `
        + `is routed to the models of a local strixlm serve at ${urls}. Pick the backends below `
        + `and save a config file to keep them.`);
  } else {
    clear(notice, `The router runs from ${s.source}. Change it in the `,
      el("a", { href: "#config" }, "config editor"), ".");
  }
  notice.classList.toggle("first-run", s.first_run);
  $("#setup-save").disabled = !s.first_run;
  $("#setup-current").open = s.first_run;
  $("#setup-current-yaml").textContent = s.yaml;
  if (!filled) {
    filled = true;
    for (const b of s.backends) addRow({ name: b.name, base_url: b.base_url });
    await Promise.all(rows().map((row) => probe(row)));
  }
}

function rows() {
  return $$("#setup-backends tbody tr");
}

function addRow(b) {
  const name = el("input", { class: "b-name", type: "text", size: 10, value: b.name, placeholder: "name" });
  const url = el("input", { class: "b-url", type: "text", size: 34, value: b.base_url,
    placeholder: "http://127.0.0.1:8000/v1" });
  const key = el("input", { class: "b-key", type: "password", size: 12, placeholder: "none" });
  const models = el("td", { class: "b-models hint" }, "–");
  const row = el("tr", {},
    el("td", {}, name), el("td", {}, url), el("td", {}, key),
    el("td", {}, el("button", { type: "button", class: "secondary b-probe",
      onclick: () => probe(row) }, "Probe")),
    models,
    el("td", {}, el("button", { type: "button", class: "link", title: "remove",
      onclick: () => row.remove() }, "✕")));
  $("#setup-backends tbody").append(row);
  return name;
}

async function probe(row) {
  const cell = $(".b-models", row);
  const base_url = $(".b-url", row).value.trim();
  const api_key = $(".b-key", row).value || undefined;
  cell.className = "b-models hint";
  cell.textContent = "probing…";
  try {
    const r = await api("/api/v1/setup/probe", { method: "POST", json: { base_url, api_key } });
    cell.className = r.ok ? "b-models good" : "b-models bad";
    cell.textContent = r.ok ? r.models.join(", ") || "no models" : `unreachable: ${r.error}`;
  } catch (e) {
    cell.className = "b-models bad";
    cell.textContent = e.message;
  }
}

async function save(app) {
  const out = $("#setup-result");
  const backends = rows().map((row) => {
    const b = { name: $(".b-name", row).value.trim(), base_url: $(".b-url", row).value.trim() };
    const key = $(".b-key", row).value;
    if (key) b.api_key = key;
    return b;
  });
  const body = {
    backends,
    replay: $("#setup-replay").checked,
    path: $("#setup-path").value.trim(),
    overwrite: $("#setup-overwrite").checked,
  };
  say(out, "busy", "saving…");
  try {
    const r = await api("/api/v1/setup", { method: "POST", json: body });
    say(out, "ok", `Saved ${r.written} and loaded it as config v${r.version}. Next: `,
      el("a", { href: "#config" }, "add signals and decisions"), ".");
    await app.configChanged();
    await show(app);
  } catch (e) {
    say(out, "error", e.message);
    if (e.problems.length) out.append(el("ul", { class: "problems" }, e.problems.map((p) => el("li", {}, p))));
  }
}
