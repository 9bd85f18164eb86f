"""The router dashboard (/dashboard) in headless Chromium, against a real `strixlm serve`
backend and a real router started without a config (first run):

setup picks the backend and writes a config -> the config editor adds a keyword signal and a
decision, shows an invalid edit's problem with its path and line, saves and reloads -> the
playground's `auto` request is routed by the new decision -> the topology draws the new nodes
-> a request made through the API appears in the replay browser -> evaluation shows accuracy
and the confusion matrix. Screenshots of each view go to docs/images/ with
STRIXLM_UPDATE_SCREENSHOTS=1.

Needs playwright (pip) and Chromium (Debian: `apt-get install -y chromium`; .ci/run installs
it when it can); skips saying which is missing. Tests run in file order on one browser page.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml
from server_utils import REPO, CliServer, RemoteServer, free_port

CHROMIUM = os.environ.get("STRIXLM_CHROMIUM", "/usr/bin/chromium")
# Screenshots refresh the committed ones in docs/images/ only when asked
# (STRIXLM_UPDATE_SCREENSHOTS=1); otherwise they go to a temporary folder, so a test run
# never dirties the checkout.
IMAGES = (
    REPO / "docs" / "images"
    if os.environ.get("STRIXLM_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "strixlm-dashboard-shots"
)
MODEL = "tiny-a"
KEYWORD_SIGNAL = {"name": "zebra_words", "type": "keyword", "keywords": ["zebra", "okapi"]}
WAIT_MS = 20_000  # longest a UI step may take (a chat answer from the interpreted tiny model)

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not Path(CHROMIUM).exists():
    pytest.skip(
        f"Chromium not found at {CHROMIUM} (apt-get install -y chromium, or set "
        "STRIXLM_CHROMIUM); .ci/run installs it when it runs as root with apt-get",
        allow_module_level=True,
    )
expect = sync_api.expect


class ConfiglessRouter(CliServer):
    """`strixlm router serve` with no --config, run in `workdir` (where setup writes)."""

    def __init__(self, workdir: Path, timeout: float = 120.0) -> None:
        super().__init__(["router", "serve"], cwd=workdir, label="router", timeout=timeout)

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(self.url + path, timeout=30, **kw)

    def post(self, path: str, **kw) -> httpx.Response:
        return httpx.post(self.url + path, timeout=60, **kw)


@pytest.fixture(scope="module")
def stack(tiny_llama_dir, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("dashboard")
    # The two start together: the router knows of no backend until setup picks one.
    with ThreadPoolExecutor(2) as pool:
        starting = [
            pool.submit(
                RemoteServer, tiny_llama_dir, "--served-model-name", MODEL,
                "--max-model-len", "256", "--kv-cache-memory", str(32 << 20),
            ),
            pool.submit(ConfiglessRouter, workdir),
        ]  # fmt: skip
    started = [f.result() for f in starting if f.exception() is None]
    try:
        backend, router = (f.result() for f in starting)  # raises if one failed
        yield router, backend, workdir
    finally:
        for srv in reversed(started):
            srv.close()


@pytest.fixture(scope="module")
def page(stack):
    router = stack[0]
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            pg = browser.new_page(viewport={"width": 1360, "height": 860})
            pg.set_default_timeout(WAIT_MS)
            pg.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            pg.on(
                "console",
                lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else 0,
            )
            pg.goto(router.url + "/dashboard")
            pg.wait_for_selector("body[data-ready=true]")
            yield pg
            # 4xx answers the tests provoke on purpose show in the console as failed loads.
            unexpected = [e for e in errors if "status of 4" not in e]
            assert not unexpected, unexpected
        finally:
            browser.close()


def shot(pg, name: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(IMAGES / f"{name}.png"), full_page=True)


def open_view(pg, name: str) -> None:
    pg.click(f"#nav a[data-view={name}]")
    expect(pg.locator(f"#view-{name}")).to_be_visible()


def test_first_run_setup_writes_and_loads_a_config(stack, page):
    router, backend, workdir = stack
    expect(page.locator("#view-setup")).to_be_visible()  # first run opens on setup
    notice = page.locator("#setup-notice")
    expect(notice).to_contain_text("First run")
    expect(notice).to_contain_text("http://127.0.0.1:8000/v1")  # the default config's backend
    expect(page.locator("#setup-current-yaml")).to_contain_text("default_decision: general")

    row = page.locator("#setup-backends tbody tr").first
    row.locator(".b-url").fill(f"127.0.0.1:{backend.port}/v1")  # no scheme: refused
    page.click("#setup-save")
    expect(page.locator("#setup-result")).to_contain_text(
        "backends[0].base_url: base_url must be an http:// or https:// URL"
    )
    assert not (workdir / "router.yaml").exists()
    row.locator(".b-url").fill(backend.url + "/v1")
    row.locator(".b-probe").click()
    expect(row.locator(".b-models")).to_have_text(MODEL)
    page.fill("#setup-path", "router.yaml")
    shot(page, "router-dashboard-setup")
    page.click("#setup-save")
    expect(page.locator("#setup-result")).to_contain_text("config v2")

    path = workdir / "router.yaml"
    written = yaml.safe_load(path.read_text())
    assert written["backends"] == [{"name": "local", "base_url": backend.url + "/v1"}]
    assert written["plugins"][0]["type"] == "router_replay"
    cfg = router.get("/api/v1/config").json()
    assert cfg["version"] == 2 and cfg["source"] == str(path)
    expect(page.locator("#status-source")).to_have_text(str(path))
    # Setup is for the first run only.
    again = router.post("/api/v1/setup", json={"backends": written["backends"]})
    assert again.status_code == 409 and "already runs from" in again.json()["error"]["message"]


def edited_config(text: str, signal_name: str) -> str:
    """The editor's text plus a keyword signal and a decision testing `signal_name`."""
    data = yaml.safe_load(text)
    data.setdefault("signals", []).append(KEYWORD_SIGNAL)
    data["decisions"].append(
        {
            "name": "zoology",
            "priority": 10,
            "rules": {"all": [signal_name, {"not": "pii"}]},  # PII never leaves via this one
            "models": [{"model": MODEL}],
        }
    )
    return "# edited in the dashboard\n" + yaml.safe_dump(data, sort_keys=False)


def test_config_editor_validates_saves_and_reloads(stack, page):
    router, _, workdir = stack
    open_view(page, "config")
    editor = page.locator("#config-text")
    expect(editor).to_have_value(re.compile(r"router_replay"))
    original = editor.input_value()

    # A YAML syntax error: PyYAML's message, the offending line marked.
    editor.fill("backends:\n  - name: a\n decisions: []\n")
    page.click("#config-validate")
    expect(page.locator("#config-problems li").first).to_contain_text("cannot parse")
    expect(page.locator("#config-gutter .ln.err")).to_have_attribute("data-line", "3")

    # An edit that names a signal that does not exist: the router's problem, with its line.
    bad = edited_config(original, "zebra_wordz")
    editor.fill(bad)
    page.click("#config-validate")
    problem = page.locator("#config-problems li").first
    expect(problem).to_contain_text(
        "decisions[1].rules.all[0].signal: unknown signal 'zebra_wordz'"
    )
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "zebra_wordz" in t)
    expect(problem).to_contain_text(f"(line {line})")
    expect(page.locator(f"#config-gutter .ln.err[data-line='{line}']")).to_have_count(1)
    problem.click()  # jumps to the line: the caret lands on it
    caret_line = "e => e.value.slice(0, e.selectionStart).split('\\n').length"
    assert editor.evaluate(caret_line) == line
    expect(page.locator("#config-result")).to_contain_text("1 problem")
    shot(page, "router-dashboard-config")
    assert router.get("/api/v1/config").json()["version"] == 2  # validating loads nothing

    # Saving it is refused the same way; then the fixed text validates, saves and reloads.
    page.click("#config-save")
    expect(problem).to_contain_text("unknown signal 'zebra_wordz'")
    good = edited_config(original, KEYWORD_SIGNAL["name"])
    editor.fill(good)
    page.click("#config-validate")
    expect(page.locator("#config-result")).to_contain_text("valid: 1 backends")
    expect(page.locator("#config-problems li")).to_have_count(0)
    page.click("#config-save")
    expect(page.locator("#config-result")).to_contain_text("config v3 is live")
    cfg = router.get("/api/v1/config").json()
    assert cfg["version"] == 3
    assert [d["name"] for d in cfg["config"]["decisions"]] == ["general", "zoology"]
    assert (workdir / "router.yaml").read_text() == good  # written as typed, comment kept


def test_playground_request_is_routed_by_the_new_decision(stack, page):
    open_view(page, "playground")
    expect(page.locator("#chat-model option[value='tiny-a']")).to_have_count(1)
    assert page.locator("#chat-model").input_value() == "auto"
    page.fill("#chat-max-tokens", "4")
    page.fill("#chat-input", "Where does the okapi live?")
    page.click("#chat-send")
    card = page.locator(".bubble.assistant .routing").last
    expect(card.locator(".r-decision .v")).to_contain_text("zoology")
    expect(card.locator(".r-model .v")).to_have_text(MODEL)
    expect(card.locator(".r-backend .v")).to_have_text("local")
    expect(card.locator(".r-signals .v")).to_have_text("zebra_words: okapi")
    expect(card.locator(".r-routing-ms .v")).to_have_text(re.compile(r"^\d+\.\d+ m?s$"))
    expect(page.locator("#chat-result")).to_contain_text(f"answered by {MODEL}")

    page.fill("#chat-input", "And what do they eat?")  # no keyword: the catch-all
    page.click("#chat-send")
    second = page.locator(".bubble.assistant .routing").nth(1)
    expect(second.locator(".r-decision .v")).to_contain_text("general")
    expect(second.locator(".r-signals .v")).to_have_text("none")
    shot(page, "router-dashboard-playground")


def test_topology_draws_the_new_nodes(stack, page):
    open_view(page, "topology")
    graph = page.locator("#topology-graph svg")
    for node in ("signal:zebra_words", "decision:zoology", "model:local/tiny-a", "signal:pii"):
        expect(graph.locator(f"g.node[data-id='{node}']")).to_have_count(1)
    edge = "g.edge[data-source='signal:zebra_words'][data-target='decision:zoology']"
    expect(graph.locator(edge)).to_have_count(1)
    negated = "g.edge.negated[data-source='signal:pii'][data-target='decision:zoology']"
    expect(graph.locator(negated)).to_have_count(1)
    to_model = "g.edge[data-source='decision:zoology'][data-target='model:local/tiny-a']"
    expect(graph.locator(to_model)).to_have_count(1)
    expect(page.locator("#topology-meta")).to_contain_text("config v3: 3 signals, 2 decisions")
    shot(page, "router-dashboard")
    graph.locator("g.node[data-id='decision:zoology']").click()
    expect(page.locator("#topology-detail")).to_contain_text("priority")
    expect(graph.locator(f"{edge}.lit")).to_have_count(1)
    shot(page, "router-dashboard-topology")


def test_api_request_appears_in_the_replay_browser(stack, page):
    router = stack[0]
    r = router.post(
        "/v1/chat/completions",
        json={"model": "auto", "max_tokens": 2, "messages": [{"role": "user", "content": "zebra"}]},
    )
    assert r.status_code == 200, r.text
    request_id = r.headers["x-vsr-request-id"]
    deadline = time.monotonic() + 10  # the record is written off the event loop
    while not router.get("/api/v1/replay", params={"request_id": request_id}).json()["total"]:
        assert time.monotonic() < deadline, "the request was not recorded"
        time.sleep(0.1)

    open_view(page, "replay")
    page.click("#replay-refresh")
    row = page.locator(f"#replay-table tr[data-request-id='{request_id}']")
    expect(row).to_contain_text("zoology")
    expect(row).to_contain_text("zebra_words=zebra")
    expect(page.locator("#replay-table tbody tr")).to_have_count(3)  # 2 from the playground
    row.click()
    detail = page.locator("#replay-detail")
    expect(detail).to_contain_text(f"Request {request_id}")
    matched = detail.locator(".signals-table tr.matched")
    expect(matched).to_have_count(1)
    expect(matched).to_contain_text("zebra_words")
    shot(page, "router-dashboard-replay")


def test_evaluation_reports_accuracy_and_confusion(stack, page):
    router = stack[0]
    rows = [
        {"prompt": "facts about the zebra", "expected_decision": "zoology"},
        {"prompt": "is an okapi a giraffe?", "expected_decision": "zoology"},
        {"prompt": "hello there", "expected_decision": "general"},
        {"prompt": "how fast can a cheetah run", "expected_decision": "zoology"},  # missed
    ]
    open_view(page, "evaluation")
    page.fill("#eval-rows", "\n".join(json.dumps(r) for r in rows))
    page.click("#eval-run")
    expect(page.locator("#eval-result")).to_contain_text("accuracy 75.0% (3/4) on config v3")
    # The tables show what the API computes for the same rows.
    report = router.post("/api/v1/eval", json={"rows": rows}).json()
    assert report["confusion"] == {
        "zoology": {"zoology": 2, "general": 1},
        "general": {"general": 1},
    }
    cell = "#eval-confusion td[data-expected='{}'][data-predicted='{}']"
    expect(page.locator(cell.format("zoology", "general"))).to_have_text("1")
    expect(page.locator(cell.format("zoology", "zoology"))).to_have_text("2")
    expect(page.locator("#eval-per-decision tr[data-decision=zoology] .accuracy")).to_have_text(
        "66.7%"
    )
    expect(page.locator("#eval-latency")).to_contain_text("zebra_words")
    shot(page, "router-dashboard-evaluation")


def test_bad_input_gets_clear_errors(stack):
    router = stack[0]
    r = router.post("/api/v1/setup/probe", json={"base_url": "ftp://x"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "base_url"
    r = router.post("/api/v1/setup/probe", content=b"{not json")
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    down = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    r = router.post("/api/v1/setup/probe", json={"base_url": down})
    assert r.status_code == 200 and r.json()["ok"] is False and "ConnectError" in r.json()["error"]
    before = router.get("/api/v1/config").json()["version"]
    r = router.post("/api/v1/dashboard/config", content=b"backends: 3\n")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_config"
    assert any("backends" in p for p in r.json()["problems"])
    assert router.get("/api/v1/config").json()["version"] == before  # nothing reloaded
    # The topology endpoint draws exactly the running config.
    topo = router.get("/api/v1/topology").json()
    cfg = router.get("/api/v1/config").json()["config"]
    kinds = [n["kind"] for n in topo["nodes"]]
    assert kinds.count("signal") == len(cfg["signals"])
    assert kinds.count("decision") == len(cfg["decisions"])
    assert router.get("/dashboard/static/js/nope.js").status_code == 404
