// Config editor: the running config as YAML, validated by the router (problems name their
// dotted path and line; the line is marked in the gutter), saved and reloaded without restart.
import { api, $, el, clear, say } from "./util.js";

let loadedText = null; // what the editor held when last loaded or saved
let loadedVersion = null; // the config version that text is
let errorLines = new Set();

const text = () => $("#config-text");

export function init(app) {
  const area = text();
  area.addEventListener("input", () => { errorLines.clear(); renderGutter(); });
  area.addEventListener("scroll", () => { $("#config-gutter").scrollTop = area.scrollTop; });
  area.addEventListener("keydown", (e) => {
    if (e.key === "Tab") { // indent with spaces, as YAML wants
      e.preventDefault();
      area.setRangeText("  ", area.selectionStart, area.selectionEnd, "end");
      renderGutter();
    }
  });
  $("#config-validate").addEventListener("click", () => validate());
  $("#config-save").addEventListener("click", () => save(app));
  $("#config-revert").addEventListener("click", () => load(app, true));
}

export function invalidate() {}

export async function show(app) {
  await app.refresh();
  load(app, false);
}

function load(app, force) {
  const s = app.state;
  if (!s) return;
  const dirty = loadedText !== null && text().value !== loadedText;
  if (force || (!dirty && s.version !== loadedVersion)) {
    text().value = loadedText = s.yaml;
    loadedVersion = s.version;
    errorLines.clear();
    clear($("#config-problems"));
    if (force) say($("#config-result"), "", "edits discarded");
  }
  const origin = s.yaml_origin === "file" ? `the file ${s.source}` : "the running config";
  $("#config-meta").textContent = `config v${s.version}, loaded ${new Date(s.loaded_at * 1000)
    .toLocaleTimeString(undefined, { hour12: false })}; the text is ${origin}. ${s.summary}`;
  const persist = $("#config-persist");
  persist.disabled = !s.source;
  persist.checked = Boolean(s.source);
  $("#config-file").textContent = s.source || "a file (start the router with --config, or use setup)";
  renderGutter();
}

function renderGutter() {
  const n = text().value.split("\n").length;
  const gutter = $("#config-gutter");
  const lines = [];
  for (let i = 1; i <= n; i++) {
    lines.push(el("div", { class: errorLines.has(i) ? "ln err" : "ln", dataset: { line: i } }, i));
  }
  clear(gutter, lines);
  gutter.scrollTop = text().scrollTop;
}

// "(line 12)" from a config problem, or from a YAML parse error the last "line 3, column 5"
// (PyYAML names the context first and the offending token last).
function lineOf(problem) {
  const m = /\(line (\d+)\)\s*$/.exec(problem);
  if (m) return Number(m[1]);
  const marks = [...problem.matchAll(/line (\d+), column \d+/g)];
  return marks.length ? Number(marks[marks.length - 1][1]) : null;
}

function goToLine(line) {
  const area = text();
  const lines = area.value.split("\n");
  const start = lines.slice(0, line - 1).reduce((acc, l) => acc + l.length + 1, 0);
  area.focus();
  area.setSelectionRange(start, start + (lines[line - 1] || "").length);
  const lh = parseFloat(getComputedStyle(area).lineHeight) || 18;
  area.scrollTop = Math.max(0, (line - 4) * lh);
}

function showProblems(problems) {
  errorLines = new Set(problems.map(lineOf).filter((l) => l !== null));
  renderGutter();
  clear($("#config-problems"), problems.map((p) => {
    const line = lineOf(p);
    return el("li", { dataset: line ? { line } : {}, class: line ? "jump" : "",
      title: line ? `go to line ${line}` : "", onclick: line ? () => goToLine(line) : null }, p);
  }));
}

function showError(e) {
  say($("#config-result"), "error", e.problems.length
    ? `${e.problems.length} problem${e.problems.length === 1 ? "" : "s"}:` : e.message);
  showProblems(e.problems);
}

async function validate() {
  say($("#config-result"), "busy", "validating…");
  try {
    const r = await api("/api/v1/config/validate", { method: "POST", text: text().value });
    say($("#config-result"), "ok", `valid: ${r.summary}`);
    showProblems([]);
    return true;
  } catch (e) {
    showError(e);
    return false;
  }
}

async function save(app) {
  const body = text().value;
  const persist = $("#config-persist").checked && !$("#config-persist").disabled;
  say($("#config-result"), "busy", "saving and reloading…");
  try {
    const r = await api(`/api/v1/dashboard/config?persist=${persist}`,
      { method: "POST", text: body });
    loadedText = body;
    loadedVersion = r.version; // keep the text as typed, not the router's re-dump
    showProblems([]);
    say($("#config-result"), "ok", `saved: config v${r.version} is live (${r.summary})`,
      r.written ? `; written to ${r.written}` : "; not written to a file");
    await app.configChanged();
    load(app, false);
  } catch (e) {
    showError(e);
  }
}
