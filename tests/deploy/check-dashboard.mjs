// Keeps deploy/dashboards/*.json true to the server:
//
//  1. Grafana: the fields Grafana needs to import the dashboard and the
//     conventions this one promises: a uid, a current schemaVersion, the
//     template variables datasource (a Prometheus data source picker),
//     replica and surface; every panel with a unique id, a gridPos inside
//     the 24-column grid that overlaps no other panel, the datasource
//     ${datasource} on the panel and each query; a row for each area the
//     dashboard covers; no $variable that is not defined.
//  2. PromQL: every panel and variable query parses (Prometheus' own
//     grammar, @prometheus-io/lezer-promql, after substituting Grafana's
//     variables) and names its metrics.
//  3. The live server: every metric a query selects is a series on the
//     scrape given (a live server's /metrics, tests/deploy/
//     dashboard_live_test.py): histogram_quantile reads a histogram's
//     _bucket series and groups by le, _sum/_count only of histograms and
//     summaries, a histogram's bare name is never selected; every label a
//     query matches on or groups by is on that metric (or is a target
//     label Prometheus adds: pod, namespace, job, ...).
//
// Usage: node check-dashboard.mjs [--self-test] DASHBOARD.json METRICS.txt
//   --self-test also proves that typical mistakes are rejected, each of
//   which would leave a panel empty or the import broken.
import { readFileSync } from "node:fs";
import { parser } from "@prometheus-io/lezer-promql";

// Labels Prometheus attaches at scrape time (ServiceMonitor target labels),
// never on the server's own exposition.
const TARGET_LABELS = new Set([
  "pod", "namespace", "job", "instance", "service", "endpoint", "container",
]);
// Grafana 10.4 writes 39; older ones migrate anything they can read, but
// schemaVersion < 36 predates datasource references by uid.
const MIN_SCHEMA_VERSION = 36;
const REQUIRED_VARIABLES = ["datasource", "replica", "surface"];
const REQUIRED_ROWS = ["traffic", "filtering", "memory", "durability", "kafka", "overload"];
const DATASOURCE_UID = "${datasource}";
// Grafana's built-in variables a query may use, with a value that parses.
const BUILTINS = {
  __rate_interval: "5m", __interval: "1m", __range: "1h", __range_s: "3600",
  __interval_ms: "60000",
};

// --- the scrape ---------------------------------------------------------

// Prometheus text format: {types: name -> type, samples: sample name ->
// Set of label names}.
export function parseExposition(text) {
  const types = new Map();
  const samples = new Map();
  for (const line of text.split("\n")) {
    const type = line.match(/^# TYPE (\S+) (\S+)/);
    if (type) {
      types.set(type[1], type[2]);
      continue;
    }
    if (line === "" || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s/);
    if (!m) throw new Error(`unparsable exposition line: ${line}`);
    const labels = samples.get(m[1]) ?? new Set();
    for (const l of (m[3] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) labels.add(l[1]);
    samples.set(m[1], labels);
  }
  return { types, samples };
}

// --- PromQL -------------------------------------------------------------

function substitute(expr, variables) {
  return expr.replace(/\$\{([a-zA-Z0-9_]+)(?::[a-z]+)?\}|\$([a-zA-Z0-9_]+)/g, (whole, a, b) => {
    const name = a ?? b;
    if (name in BUILTINS) return BUILTINS[name];
    if (variables.has(name)) return ".*";
    throw new Error(`uses $${name}, which is not a template variable`);
  });
}

function children(node) {
  const out = [];
  for (let c = node.firstChild; c; c = c.nextSibling) out.push(c);
  return out;
}

function descendants(node, name) {
  const out = [];
  const walk = (n) => {
    for (const c of children(n)) {
      if (c.name === name) out.push(c);
      walk(c);
    }
  };
  walk(node);
  return out;
}

// One query's selectors and the checks that need the tree:
// {selectors: [{metric, labels}], errors}.
export function analyze(expr) {
  const tree = parser.parse(expr);
  const errors = [];
  const text = (n) => expr.slice(n.from, n.to);
  let syntaxError = null;
  tree.iterate({
    enter(n) {
      if (n.type.isError && syntaxError === null) syntaxError = n.from;
    },
  });
  if (syntaxError !== null) {
    return { selectors: [], groupings: [], errors: [`PromQL syntax error at ${syntaxError}: ...${expr.slice(syntaxError, syntaxError + 30)}`] };
  }
  const top = tree.topNode;
  const selectorOf = (vs) => {
    const id = children(vs).find((c) => c.name === "Identifier");
    const labels = descendants(vs, "LabelName").map(text);
    return { metric: id ? text(id) : null, labels };
  };
  const selectors = descendants(top, "VectorSelector").map(selectorOf);
  for (const s of selectors) {
    if (s.metric === null) errors.push("a selector without a metric name");
  }
  // histogram_quantile over a histogram's buckets, aggregated keeping le.
  const quantileSelectors = new Set();
  for (const call of descendants(top, "FunctionCall")) {
    const fn = children(call).find((c) => c.name === "FunctionIdentifier");
    if (!fn || text(fn) !== "histogram_quantile") continue;
    for (const vs of descendants(call, "VectorSelector")) {
      const s = selectorOf(vs);
      quantileSelectors.add(vs.from);
      if (!s.metric?.endsWith("_bucket")) {
        errors.push(`histogram_quantile over ${s.metric}, not a _bucket series`);
      }
    }
    for (const agg of descendants(call, "AggregateExpr")) {
      const mod = children(agg).find((c) => c.name === "AggregateModifier");
      const by = mod && children(mod).some((c) => c.name === "By");
      const grouped = mod ? descendants(mod, "LabelName").map(text) : [];
      if (!by || !grouped.includes("le")) {
        errors.push(`histogram_quantile over ${text(agg).slice(0, 40)}... drops le (aggregate with by (le, ...))`);
      }
    }
  }
  for (const vs of descendants(top, "VectorSelector")) {
    const s = selectorOf(vs);
    if (s.metric?.endsWith("_bucket") && !quantileSelectors.has(vs.from)) {
      errors.push(`${s.metric} outside histogram_quantile (buckets are cumulative, not a value to plot)`);
    }
  }
  // by (...) labels and the metrics they group.
  const groupings = [];
  for (const agg of descendants(top, "AggregateExpr")) {
    const mod = children(agg).find((c) => c.name === "AggregateModifier");
    if (!mod || !children(mod).some((c) => c.name === "By")) continue;
    const metrics = descendants(agg, "VectorSelector").map((vs) => selectorOf(vs).metric);
    groupings.push({ labels: descendants(mod, "LabelName").map(text), metrics });
  }
  return { selectors, groupings, errors };
}

// Errors of one metric name against the scrape.
function metricErrors(metric, scrape) {
  const { types, samples } = scrape;
  if (samples.has(metric)) {
    const suffix = metric.match(/_(bucket|sum|count)$/)?.[1];
    const base = suffix ? metric.slice(0, -suffix.length - 1) : null;
    if (suffix && !types.has(metric)) {
      const type = types.get(base);
      const ok = suffix === "bucket" ? type === "histogram" : ["histogram", "summary"].includes(type);
      if (!ok) return [`${metric}: ${base} is a ${type ?? "series with no TYPE"}, not a histogram${suffix === "bucket" ? "" : " or summary"}`];
    }
    return [];
  }
  const type = types.get(metric);
  if (type === "histogram" || type === "summary") {
    return [`${metric} is a ${type}: select ${metric}_bucket, _sum or _count`];
  }
  return [`${metric} is not on the server's /metrics (renamed or removed?)`];
}

function labelErrors(metric, labels, scrape, what) {
  const have = scrape.samples.get(metric);
  if (!have) return [];
  return labels
    .filter((l) => l !== "__name__" && !TARGET_LABELS.has(l) && !have.has(l))
    .map((l) => `${metric} has no label ${l} (${what}); it has ${[...have].join(", ") || "none"}`);
}

function queryErrors(expr, variables, scrape) {
  let substituted;
  try {
    substituted = substitute(expr, variables);
  } catch (e) {
    return [e.message];
  }
  const { selectors, groupings, errors } = analyze(substituted);
  for (const s of selectors) {
    if (s.metric === null) continue;
    errors.push(...metricErrors(s.metric, scrape));
    errors.push(...labelErrors(s.metric, s.labels, scrape, "matched on"));
  }
  for (const g of groupings) {
    for (const label of g.labels) {
      if (TARGET_LABELS.has(label)) continue;
      const known = g.metrics.filter((m) => scrape.samples.has(m));
      if (known.length && !known.some((m) => scrape.samples.get(m).has(label))) {
        errors.push(`grouped by ${label}, which none of ${known.join(", ")} has`);
      }
    }
  }
  return errors;
}

// --- Grafana ------------------------------------------------------------

function allPanels(dash) {
  const out = [];
  for (const p of dash.panels ?? []) {
    out.push(p);
    for (const q of p.panels ?? []) out.push(q);  // a collapsed row's
  }
  return out;
}

function isInt(x) {
  return Number.isInteger(x);
}

function variableQuery(v) {
  return typeof v.query === "string" ? v.query : v.query?.query;
}

export function checkDashboard(dash, scrape) {
  const errors = [];
  if (typeof dash.title !== "string" || !dash.title) errors.push("no title");
  if (typeof dash.uid !== "string" || !/^[a-zA-Z0-9_-]{1,40}$/.test(dash.uid)) {
    errors.push(`uid ${JSON.stringify(dash.uid)}: 1-40 of [a-zA-Z0-9_-]`);
  }
  if (!isInt(dash.schemaVersion) || dash.schemaVersion < MIN_SCHEMA_VERSION) {
    errors.push(`schemaVersion ${dash.schemaVersion}: must be an integer >= ${MIN_SCHEMA_VERSION}`);
  }
  if (!Array.isArray(dash.panels) || dash.panels.length === 0) errors.push("no panels");
  if (!dash.time?.from || !dash.time?.to) errors.push("no time range");

  // Template variables.
  const list = dash.templating?.list;
  if (!Array.isArray(list)) errors.push("no templating.list");
  const vars = new Map((list ?? []).map((v) => [v.name, v]));
  if (vars.size !== (list ?? []).length) errors.push("template variables with the same name");
  for (const name of REQUIRED_VARIABLES) {
    if (!vars.has(name)) errors.push(`no template variable ${name}`);
  }
  const ds = vars.get("datasource");
  if (ds && (ds.type !== "datasource" || ds.query !== "prometheus")) {
    errors.push("variable datasource: must be type datasource, query prometheus");
  }
  const names = new Set(vars.keys());
  for (const v of list ?? []) {
    if (v.type !== "query") continue;
    if (v.datasource?.uid !== DATASOURCE_UID) {
      errors.push(`variable ${v.name}: datasource must be ${DATASOURCE_UID}`);
    }
    const q = variableQuery(v) ?? "";
    const m = q.match(/^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$/);
    if (!m) {
      errors.push(`variable ${v.name}: query ${q} is not label_values(selector, label)`);
      continue;
    }
    const own = new Set([...names].filter((n) => n !== v.name));
    for (const e of queryErrors(m[1], own, scrape)) errors.push(`variable ${v.name}: ${e}`);
    const { selectors } = analyze(substitute(m[1], own));
    for (const s of selectors) {
      for (const e of labelErrors(s.metric, [m[2]], scrape, "label_values")) {
        errors.push(`variable ${v.name}: ${e}`);
      }
    }
  }

  // Panels.
  const panels = allPanels(dash);
  const ids = new Set();
  const rows = new Set();
  const boxes = [];
  for (const p of panels) {
    const name = `panel ${p.id} "${p.title}"`;
    if (!isInt(p.id) || p.id <= 0) errors.push(`${name}: id must be a positive integer`);
    else if (ids.has(p.id)) errors.push(`${name}: id used twice`);
    ids.add(p.id);
    if (typeof p.type !== "string") errors.push(`${name}: no type`);
    const g = p.gridPos;
    if (!g || ![g.h, g.w, g.x, g.y].every(isInt) || g.w < 1 || g.h < 1 || g.x < 0 || g.y < 0 || g.x + g.w > 24) {
      errors.push(`${name}: gridPos ${JSON.stringify(g)} is not inside the 24-column grid`);
    } else {
      for (const b of boxes) {
        if (g.x < b.x + b.w && b.x < g.x + g.w && g.y < b.y + b.h && b.y < g.y + g.h) {
          errors.push(`${name}: gridPos overlaps panel ${b.id}`);
        }
      }
      boxes.push({ ...g, id: p.id });
    }
    if (p.type === "row") {
      rows.add(String(p.title).toLowerCase());
      continue;
    }
    if (p.datasource?.uid !== DATASOURCE_UID) errors.push(`${name}: datasource must be ${DATASOURCE_UID}`);
    if (!Array.isArray(p.targets) || p.targets.length === 0) {
      errors.push(`${name}: no queries`);
      continue;
    }
    const refIds = new Set();
    for (const t of p.targets) {
      if (refIds.has(t.refId)) errors.push(`${name}: refId ${t.refId} used twice`);
      refIds.add(t.refId);
      if (t.datasource?.uid !== DATASOURCE_UID) errors.push(`${name} ${t.refId}: datasource must be ${DATASOURCE_UID}`);
      if (typeof t.expr !== "string" || !t.expr.trim()) {
        errors.push(`${name} ${t.refId}: no expr`);
        continue;
      }
      for (const e of queryErrors(t.expr, names, scrape)) errors.push(`${name} ${t.refId}: ${e}`);
    }
  }
  for (const r of REQUIRED_ROWS) {
    if (![...rows].some((t) => t.includes(r))) errors.push(`no ${r} row`);
  }
  return errors;
}

// --- self-test ----------------------------------------------------------

function firstQueryWith(dash, needle) {
  for (const p of allPanels(dash)) {
    for (const t of p.targets ?? []) if (t.expr.includes(needle)) return t;
  }
  throw new Error(`self-test: no query uses ${needle}`);
}

function firstPanel(dash) {
  return allPanels(dash).find((p) => p.type !== "row");
}

const MISTAKES = [
  ["a renamed series", (d) => {
    const t = firstQueryWith(d, "exposure_filter_candidates_checked_total");
    t.expr = t.expr.replace("exposure_filter_candidates_checked_total", "exposure_filter_candidates_total");
  }],
  ["a histogram's bare name in histogram_quantile", (d) => {
    const t = firstQueryWith(d, "grpc_server_handling_seconds_bucket");
    t.expr = t.expr.replace("grpc_server_handling_seconds_bucket", "grpc_server_handling_seconds");
  }],
  ["histogram_quantile without le", (d) => {
    const t = firstQueryWith(d, "by (le, grpc_method)");
    t.expr = t.expr.replace("by (le, grpc_method)", "by (grpc_method)");
  }],
  ["_sum of a counter", (d) => {
    const t = firstQueryWith(d, "exposure_filter_items_recorded_total");
    t.expr = t.expr.replace("exposure_filter_items_recorded_total", "exposure_filter_items_recorded_total_sum");
  }],
  ["a label matcher the series lacks", (d) => {
    const t = firstQueryWith(d, "exposure_filter_candidates_removed_total{");
    t.expr = t.expr.replace("exposure_filter_candidates_removed_total{", 'exposure_filter_candidates_removed_total{surface=~"$surface", ');
  }],
  ["grouping by a label the series lacks", (d) => {
    const t = firstQueryWith(d, "sum(rate(exposure_filter_items_expired_total");
    t.expr = t.expr.replace("sum(rate(exposure_filter_items_expired_total", "sum by (surface) (rate(exposure_filter_items_expired_total");
  }],
  ["a PromQL syntax error", (d) => {
    const t = firstQueryWith(d, "rate(");
    t.expr = t.expr.replace("rate(", "rate((");
  }],
  ["an undefined variable", (d) => {
    const t = firstQueryWith(d, "$replica");
    t.expr = t.expr.replace("$replica", "$replicas");
  }],
  ["a duplicate panel id", (d) => {
    const ps = allPanels(d).filter((p) => p.type !== "row");
    ps[1].id = ps[0].id;
  }],
  ["a panel on a fixed datasource", (d) => {
    firstPanel(d).datasource = { type: "prometheus", uid: "prometheus" };
  }],
  ["a query on a fixed datasource", (d) => {
    firstPanel(d).targets[0].datasource = { type: "prometheus", uid: "PBFA97CFB590B2093" };
  }],
  ["no surface variable", (d) => {
    d.templating.list = d.templating.list.filter((v) => v.name !== "surface");
  }],
  ["a panel without gridPos", (d) => {
    delete firstPanel(d).gridPos;
  }],
  ["overlapping panels", (d) => {
    const ps = allPanels(d).filter((p) => p.type !== "row");
    ps[1].gridPos = { ...ps[0].gridPos };
  }],
  ["an old schemaVersion", (d) => {
    d.schemaVersion = 16;
  }],
  ["a missing row", (d) => {
    allPanels(d).find((p) => p.type === "row" && /kafka/i.test(p.title)).title = "Ingest";
  }],
  ["a variable over a renamed series", (d) => {
    const v = d.templating.list.find((x) => x.name === "replica");
    v.query.query = v.query.query.replace("exposure_filter_store_shards", "exposure_filter_shards");
  }],
];

function main() {
  const args = process.argv.slice(2);
  const selfTest = args[0] === "--self-test";
  const [dashFile, metricsFile] = selfTest ? args.slice(1) : args;
  if (!dashFile || !metricsFile) {
    console.error("usage: node check-dashboard.mjs [--self-test] DASHBOARD.json METRICS.txt");
    process.exit(2);
  }
  const dash = JSON.parse(readFileSync(dashFile, "utf8"));
  const scrape = parseExposition(readFileSync(metricsFile, "utf8"));
  const errors = checkDashboard(dash, scrape);
  for (const e of errors) console.error(`FAIL ${e}`);
  const panels = allPanels(dash).filter((p) => p.type !== "row");
  const queries = panels.reduce((n, p) => n + (p.targets?.length ?? 0), 0);
  const metrics = new Set();
  for (const p of panels) {
    for (const t of p.targets ?? []) {
      try {
        for (const s of analyze(substitute(t.expr, new Set(REQUIRED_VARIABLES))).selectors) metrics.add(s.metric);
      } catch { /* reported above */ }
    }
  }
  console.log(`dashboard ${dash.uid}: ${panels.length} panels, ${queries} queries over ` +
    `${metrics.size} series, checked against ${scrape.samples.size} series scraped: ` +
    `${errors.length} errors`);
  let failed = errors.length;
  if (selfTest) {
    // A mistake counts as rejected only by an error the dashboard as it
    // is does not already have.
    const baseline = new Set(errors);
    for (const [what, mutate] of MISTAKES) {
      const copy = structuredClone(dash);
      mutate(copy);
      const found = checkDashboard(copy, scrape).filter((e) => !baseline.has(e));
      if (found.length === 0) {
        console.error(`FAIL self-test: ${what} was not rejected`);
        failed++;
      } else {
        console.log(`self-test: ${what} rejected (${found[0]})`);
      }
    }
    console.log(`dashboard self-test: ${MISTAKES.length} mistakes tried`);
  }
  process.exit(failed ? 1 : 0);
}

main();
