// The dashboard shell: loads the router's state, switches views by URL hash (#config, ...),
// and keeps the sidebar's status (config version, file, backends) current.
import { api, $, $$, el, clear } from "./util.js";
import * as setup from "./setup.js";
import * as config from "./config.js";
import * as topology from "./topology.js";
import * as replay from "./replay.js";
import * as evaluation from "./evaluation.js";
import * as playground from "./playground.js";

const VIEWS = { setup, config, topology, replay, evaluation, playground };

const app = {
  state: null, // GET /api/v1/dashboard/state
  current: null,

  async refresh() {
    try {
      app.state = await api("/api/v1/dashboard/state");
      renderStatus(app.state);
    } catch (e) {
      clear($("#router-status"), el("p", { class: "bad" }, e.message));
    }
    return app.state;
  },

  // After a config change: new state, and every view drops what it cached.
  async configChanged() {
    await app.refresh();
    for (const view of Object.values(VIEWS)) view.invalidate?.(app);
  },

  go(name) {
    if (location.hash !== `#${name}`) location.hash = name;
    else show(name);
  },
};

function renderStatus(s) {
  const backends = s.backends.map((b) =>
    el("li", { class: b.error ? "bad" : b.models.length ? "good" : "" , title: b.error || b.base_url },
      el("span", { class: "dot" }), `${b.name}: `,
      b.error ? "unreachable" : b.models.join(", ") || "no models"));
  clear($("#router-status"),
    el("div", {}, el("b", {}, "config v", String(s.version))),
    el("div", { class: "hint", id: "status-source" }, s.source || "default config (no file)"),
    el("div", { class: "hint" }, `${s.signals.length} signals · ${s.decisions.length} decisions`),
    el("ul", { class: "backends" }, backends),
    el("div", { class: "hint" }, s.replay_enabled ? "replay: recording" : "replay: off"));
}

async function show(name) {
  if (!VIEWS[name]) name = app.state && app.state.first_run ? "setup" : "topology";
  for (const section of $$(".view")) section.hidden = section.id !== `view-${name}`;
  for (const link of $$("#nav a")) link.classList.toggle("active", link.dataset.view === name);
  app.current = name;
  document.title = `${name} · strixlm router`;
  await VIEWS[name].show(app);
}

async function main() {
  await app.refresh();
  for (const view of Object.values(VIEWS)) view.init(app);
  window.addEventListener("hashchange", () => show(location.hash.slice(1)));
  await show(location.hash.slice(1));
  document.body.dataset.ready = "true"; // the views are wired up (tests wait for this)
}

main();
