// Topology: signals -> decisions -> models from GET /api/v1/topology, laid out in three
// columns. Decisions keep their priority order; signals and models are ordered by the mean
// row of the decisions they connect to (fewer crossings), then drawn as SVG with curved edges.
import { api, $, el, clear, say } from "./util.js";

const SVG = "http://www.w3.org/2000/svg";
const ROW = 52; // vertical pitch of nodes
const NODE_H = 38;
const COL_GAP = 150;
const PAD = 24;
const CHAR_W = 7.2; // label width estimate at the node font size

let stale = true;
let graph = null;

export function init() {
  $("#topology-refresh").addEventListener("click", () => load());
}

export function invalidate() { stale = true; }

export async function show() {
  if (stale) await load();
}

async function load() {
  const box = $("#topology-graph");
  try {
    graph = await api("/api/v1/topology");
    stale = false;
  } catch (e) {
    clear(box, el("p", { class: "msg error" }, e.message));
    return;
  }
  const count = (k) => graph.nodes.filter((n) => n.kind === k).length;
  $("#topology-meta").textContent = `config v${graph.version}: ${count("signal")} signals, `
    + `${count("decision")} decisions (${graph.strategy}), ${count("model")} models`;
  clear(box, draw(graph));
  $("#topology-detail").hidden = true;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function subtitle(n) {
  const d = n.detail;
  if (n.kind === "signal") return d.type;
  if (n.kind === "model") {
    if (d.resolved) return `on ${d.backend}`;
    return n.label.startsWith("auto") ? "any model; none discovered" : "not served yet";
  }
  const tags = [`priority ${d.priority}`];
  if (d.default) tags.push("default");
  if (d.catch_all) tags.push("always");
  return tags.join(" · ");
}

// Orders one column by the mean position of each node's neighbours in a placed column.
function byBarycenter(nodes, neighbours, placed) {
  const pos = new Map(placed.map((n, i) => [n.id, i]));
  const score = (n) => {
    const rows = (neighbours.get(n.id) || []).map((id) => pos.get(id)).filter((i) => i !== undefined);
    return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : Infinity;
  };
  return nodes.map((n, i) => ({ n, s: score(n), i }))
    .sort((a, b) => a.s - b.s || a.i - b.i).map((x) => x.n);
}

export function layout(g) {
  const of = (kind) => g.nodes.filter((n) => n.kind === kind);
  const neighbours = new Map();
  for (const e of g.edges) {
    for (const [a, b] of [[e.source, e.target], [e.target, e.source]]) {
      if (!neighbours.has(a)) neighbours.set(a, []);
      neighbours.get(a).push(b);
    }
  }
  const decisions = of("decision").map((n, i) => ({ n, i }))
    .sort((a, b) => b.n.detail.priority - a.n.detail.priority || a.i - b.i).map((x) => x.n);
  const columns = [
    byBarycenter(of("signal"), neighbours, decisions),
    decisions,
    byBarycenter(of("model"), neighbours, decisions),
  ];
  const widths = columns.map((col) => Math.max(130,
    ...col.map((n) => Math.max(n.label.length, subtitle(n).length * 0.85) * CHAR_W + 28)));
  const tallest = Math.max(1, ...columns.map((c) => c.length));
  const height = PAD * 2 + tallest * ROW;
  const pos = new Map();
  let x = PAD;
  columns.forEach((col, c) => {
    const top = PAD + ((tallest - col.length) * ROW) / 2;
    col.forEach((n, r) => pos.set(n.id, { x, y: top + r * ROW, w: widths[c], n }));
    x += widths[c] + COL_GAP;
  });
  return { pos, width: x - COL_GAP + PAD, height };
}

function draw(g) {
  const { pos, width, height } = layout(g);
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "topology",
    role: "img", "aria-label": "routing topology" });
  // One arrowhead per edge kind, coloured like its edges.
  root.append(svg("defs", {}, ["rule", "model"].map((kind) => svg("marker", {
    id: `arrow-${kind}`, viewBox: "0 0 8 8", refX: 8, refY: 4, markerWidth: 6, markerHeight: 6,
    orient: "auto-start-reverse" }, svg("path", { d: "M0,0 L8,4 L0,8 z", class: `arrowhead ${kind}` })))));
  const edgeLayer = svg("g", { class: "edges" });
  const nodeLayer = svg("g", { class: "nodes" });
  root.append(edgeLayer, nodeLayer);
  for (const e of g.edges) {
    const a = pos.get(e.source), b = pos.get(e.target);
    if (!a || !b) continue;
    const x1 = a.x + a.w, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
    const mid = (x1 + x2) / 2;
    const cls = ["edge", e.kind, e.detail.negated ? "negated" : ""].join(" ").trim();
    const label = edgeLabel(e);
    const group = svg("g", { class: cls, "data-source": e.source, "data-target": e.target },
      svg("path", { d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
        "marker-end": `url(#arrow-${e.kind})` }),
      svg("title", {}, `${a.n.label} → ${b.n.label}${label ? ` (${label})` : ""}`));
    if (label) {
      group.append(svg("text", { x: x2 - 8, y: y2 - 5, "text-anchor": "end", class: "edge-label" }, label));
    }
    edgeLayer.append(group);
  }
  for (const { x, y, w, n } of pos.values()) {
    const cls = ["node", n.kind, n.detail.default ? "default" : "",
      n.kind === "model" && !n.detail.resolved ? "unresolved" : ""].join(" ").trim();
    const node = svg("g", { class: cls, "data-id": n.id, transform: `translate(${x},${y})`, tabindex: 0 },
      svg("rect", { width: w, height: NODE_H, rx: 7 }),
      svg("text", { x: 12, y: 16, class: "label" }, n.label),
      svg("text", { x: 12, y: 30, class: "sub" }, subtitle(n)));
    node.addEventListener("click", () => select(root, n));
    nodeLayer.append(node);
  }
  return root;
}

function edgeLabel(e) {
  const d = e.detail;
  if (e.kind === "model") {
    const parts = [];
    if (d.weight !== 1) parts.push(`w ${d.weight}`);
    if (d.reasoning) parts.push("reasoning");
    return parts.join(", ");
  }
  const parts = [];
  if (d.negated) parts.push("not");
  if (d.value) parts.push(`= ${d.value}`);
  if (d.min_confidence !== null && d.min_confidence !== undefined) parts.push(`≥ ${d.min_confidence}`);
  return parts.join(" ");
}

// Highlights a node with its edges and neighbours, and shows its details under the graph.
function select(root, n) {
  const near = new Set([n.id]);
  for (const e of root.querySelectorAll(".edge")) {
    const on = e.dataset.source === n.id || e.dataset.target === n.id;
    e.classList.toggle("lit", on);
    if (on) { near.add(e.dataset.source); near.add(e.dataset.target); }
  }
  for (const g of root.querySelectorAll(".node")) {
    g.classList.toggle("dim", !near.has(g.dataset.id));
    g.classList.toggle("selected", g.dataset.id === n.id);
  }
  root.classList.add("focused");
  const panel = $("#topology-detail");
  panel.hidden = false;
  const rows = Object.entries(n.detail)
    .filter(([, v]) => v !== null && v !== undefined && !(Array.isArray(v) && !v.length))
    .map(([k, v]) => el("tr", {}, el("th", {}, k.replace("_", " ")),
      el("td", {}, Array.isArray(v) ? v.join(", ") : String(v))));
  const links = graph.edges.filter((e) => e.source === n.id || e.target === n.id)
    .map((e) => {
      const other = e.source === n.id ? e.target : e.source;
      const label = edgeLabel(e);
      return el("li", {}, other.replace(/^[a-z]+:/, ""), label ? ` (${label})` : "");
    });
  clear(panel, el("h3", {}, `${n.kind} ${n.label}`),
    el("table", { class: "kv" }, rows),
    links.length ? [el("h4", {}, "connected to"), el("ul", {}, links)] : null);
}
