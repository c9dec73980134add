// Validates Kubernetes objects (the output of `kubectl kustomize deploy/`)
// against the Kubernetes API schema, as the API server would on apply:
//
//  1. Schema: each object goes through the validator that kubernetes-models
//     generates from the Kubernetes OpenAPI spec (types, required fields,
//     enums, formats); the Prometheus Operator kinds through
//     @kubernetes-models/prometheus-operator. An apiVersion/kind with no
//     schema is an error.
//  2. Unknown fields: those generated validators accept extra properties,
//     but the API server (strict field validation) and a reviewer should not:
//     `imagePullPolcy: Always` would silently do nothing. Every object is
//     wrapped in Proxies that record which properties the validator looked
//     up; the validator reads every property its schema declares, and
//     enumerates maps (labels, ConfigMap data), so a property it never read
//     is not in the schema: reported with its path.
//  3. References the API server checks at apply time or that would leave
//     the workload broken: the StatefulSet selector matches its pod labels,
//     its serviceName is a headless Service, Services, the PDB and the
//     ServiceMonitor select something, envFrom ConfigMaps exist, probes use
//     declared ports; the NetworkPolicy selects the pods and admits only
//     what it should; TLS and policy files are in mounted volumes.
//  4. Grafana dashboards: a ConfigMap holding *.json data is a
//     dashboard for Grafana's sidecar, which only loads it with the label
//     grafana_dashboard: "1"; its JSON parses and has a uid, and it fits
//     the 256 KiB that `kubectl apply` can keep in its last-applied
//     annotation. (check-dashboard.mjs checks the dashboard's content.)
//
// Usage: node validate.mjs RENDERED.yaml            validate, exit 1 on errors
//        node validate.mjs --self-test RENDERED.yaml  also prove that typical
//                                                     mistakes are rejected
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const PROMETHEUS_OPERATOR = "@kubernetes-models/prometheus-operator";

// kubernetes-models lays out one module per kind: <group>/<version>/<Kind>,
// with the core group as plain <version>.
function modulePath(apiVersion, kind) {
  if (apiVersion.startsWith("monitoring.coreos.com/")) {
    return `${PROMETHEUS_OPERATOR}/${apiVersion}/${kind}`;
  }
  return `kubernetes-models/${apiVersion}/${kind}`;
}

async function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string") {
    throw new Error("apiVersion and kind must be strings");
  }
  let mod;
  try {
    mod = await import(modulePath(apiVersion, kind));
  } catch {
    throw new Error(`no Kubernetes schema for ${apiVersion} ${kind}`);
  }
  const model = mod[kind];
  if (!model) throw new Error(`no Kubernetes schema for ${apiVersion} ${kind}`);
  return model;
}

// Wraps `value` (recursively) so every object node records the property
// names read through it and whether its keys were enumerated.
function track(value, path, nodes) {
  if (value === null || typeof value !== "object") return value;
  const node = { path, value, read: new Set(), enumerated: false };
  nodes.push(node);
  const copy = Array.isArray(value) ? [] : {};
  for (const [k, v] of Object.entries(value)) {
    copy[k] = track(v, `${path}/${k}`, nodes);
  }
  return new Proxy(copy, {
    get(target, key, receiver) {
      if (typeof key === "string") node.read.add(key);
      return Reflect.get(target, key, receiver);
    },
    has(target, key) {
      if (typeof key === "string") node.read.add(key);
      return Reflect.has(target, key);
    },
    ownKeys(target) {
      node.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
}

async function schemaErrors(obj) {
  let model;
  try {
    model = await modelFor(obj.apiVersion, obj.kind);
  } catch (e) {
    return [e.message];
  }
  const nodes = [];
  const tracked = track(obj, "", nodes);
  const errors = [];
  try {
    // The model's validate() runs the generated schema validator on `this`;
    // call it on the tracked copy (constructing a model would deep-copy).
    model.prototype.validate.call(tracked);
  } catch (e) {
    errors.push(`schema: ${e.message}`);
  }
  for (const n of nodes) {
    if (Array.isArray(n.value) || n.enumerated) continue;
    for (const key of Object.keys(n.value)) {
      if (!n.read.has(key)) errors.push(`unknown field ${n.path}/${key}`);
    }
  }
  return errors;
}

function matches(selector, labels) {
  if (!selector || Object.keys(selector).length === 0) return false;
  return Object.entries(selector).every(([k, v]) => labels?.[k] === v);
}

function podTemplates(objects) {
  return objects
    .filter((o) => ["StatefulSet", "Deployment", "DaemonSet"].includes(o.kind))
    .map((o) => ({ owner: o, labels: o.spec?.template?.metadata?.labels }));
}

function referenceErrors(objects) {
  const errors = [];
  const byKind = (kind) => objects.filter((o) => o.kind === kind);
  const pods = podTemplates(objects);
  const configMaps = new Set(byKind("ConfigMap").map((o) => o.metadata?.name));
  const services = byKind("Service");
  const selectsPods = (sel) => pods.some((p) => matches(sel, p.labels));

  for (const sts of byKind("StatefulSet")) {
    const name = `StatefulSet ${sts.metadata?.name}`;
    const labels = sts.spec?.template?.metadata?.labels;
    if (!matches(sts.spec?.selector?.matchLabels, labels)) {
      errors.push(`${name}: spec.selector does not match the pod labels`);
    }
    const headless = services.find((s) => s.metadata?.name === sts.spec?.serviceName);
    if (!headless || headless.spec?.clusterIP !== "None") {
      errors.push(`${name}: serviceName ${sts.spec?.serviceName} is not a headless Service here`);
    }
    const claims = new Set((sts.spec?.volumeClaimTemplates ?? []).map((c) => c.metadata?.name));
    const volumes = new Set((sts.spec?.template?.spec?.volumes ?? []).map((v) => v.name));
    for (const c of sts.spec?.template?.spec?.containers ?? []) {
      const ports = new Map((c.ports ?? []).map((p) => [p.name, p.containerPort]));
      const portNumbers = new Set(ports.values());
      for (const ref of c.envFrom ?? []) {
        const cm = ref.configMapRef?.name;
        if (cm && !configMaps.has(cm)) errors.push(`${name}: envFrom ConfigMap ${cm} is not defined`);
      }
      for (const probe of ["startupProbe", "livenessProbe", "readinessProbe"]) {
        const port = c[probe]?.grpc?.port;
        if (port !== undefined && !portNumbers.has(port)) {
          errors.push(`${name}: ${probe} port ${port} is not a container port`);
        }
      }
      for (const m of c.volumeMounts ?? []) {
        if (!claims.has(m.name) && !volumes.has(m.name)) {
          errors.push(`${name}: volumeMount ${m.name} has no volume or claim`);
        }
      }
    }
  }
  for (const svc of services) {
    if (!selectsPods(svc.spec?.selector)) {
      errors.push(`Service ${svc.metadata?.name}: selector matches no pod template`);
    }
  }
  for (const pdb of byKind("PodDisruptionBudget")) {
    if (!selectsPods(pdb.spec?.selector?.matchLabels)) {
      errors.push(`PodDisruptionBudget ${pdb.metadata?.name}: selector matches no pod template`);
    }
  }
  for (const sm of byKind("ServiceMonitor")) {
    const targets = services.filter((s) => matches(sm.spec?.selector?.matchLabels, s.metadata?.labels));
    if (targets.length === 0) {
      errors.push(`ServiceMonitor ${sm.metadata?.name}: selector matches no Service`);
    }
    for (const ep of sm.spec?.endpoints ?? []) {
      if (!targets.some((s) => (s.spec?.ports ?? []).some((p) => p.name === ep.port))) {
        errors.push(`ServiceMonitor ${sm.metadata?.name}: no selected Service has port ${ep.port}`);
      }
    }
  }
  errors.push(...clusterErrors(objects));
  errors.push(...networkPolicyErrors(objects));
  errors.push(...tlsFileErrors(objects));
  errors.push(...dashboardErrors(objects));
  errors.push(...shutdownErrors(objects));
  return errors;
}

// An absl::Duration flag value ("5s", "1m30s", "500ms", "0") in seconds;
// NaN when it is not one.
function durationSeconds(text) {
  if (text === "0") return 0;
  const unit = { ms: 0.001, s: 1, m: 60, h: 3600 };
  const parts = [...String(text).matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join("") !== text) return NaN;
  return parts.reduce((sum, p) => sum + Number(p[1]) * unit[p[2]], 0);
}

// Shutdown (docs/operations.md "Lifecycle"): the drain
// (EXPOSURE_FILTER_SHUTDOWN_DELAY) serves with health NOT_SERVING until the
// readiness probe has failed (periodSeconds x failureThreshold), and the pod
// is not killed before the drain, the grace for calls in flight
// (EXPOSURE_FILTER_SHUTDOWN_GRACE) and the final snapshot are over.
function shutdownErrors(objects) {
  const errors = [];
  const configMaps = new Map(
    objects.filter((o) => o.kind === "ConfigMap").map((o) => [o.metadata?.name, o.data ?? {}]));
  for (const sts of objects.filter((o) => o.kind === "StatefulSet")) {
    const pod = sts.spec?.template?.spec ?? {};
    for (const c of pod.containers ?? []) {
      const name = `StatefulSet ${sts.metadata?.name} container ${c.name}`;
      const env = {};
      for (const ref of c.envFrom ?? []) Object.assign(env, configMaps.get(ref.configMapRef?.name) ?? {});
      for (const e of c.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
      // The flags' defaults (src/server/config/server_flags.cc).
      const drain = durationSeconds(env.EXPOSURE_FILTER_SHUTDOWN_DELAY ?? "0");
      const grace = durationSeconds(env.EXPOSURE_FILTER_SHUTDOWN_GRACE ?? "10s");
      if (Number.isNaN(drain) || Number.isNaN(grace)) {
        errors.push(`${name}: EXPOSURE_FILTER_SHUTDOWN_DELAY/GRACE are not durations`);
        continue;
      }
      const probe = c.readinessProbe;
      if (probe) {
        // Kubernetes' defaults: periodSeconds 10, failureThreshold 3.
        const notReadyAfter = (probe.periodSeconds ?? 10) * (probe.failureThreshold ?? 3);
        if (drain < notReadyAfter) {
          errors.push(`${name}: EXPOSURE_FILTER_SHUTDOWN_DELAY=${drain}s ends before the readiness probe can fail (periodSeconds x failureThreshold = ${notReadyAfter}s): the port closes while the pod still looks ready`);
        }
      }
      // Kubernetes' default: 30 s.
      const kill = pod.terminationGracePeriodSeconds ?? 30;
      if (kill <= drain + grace) {
        errors.push(`${name}: terminationGracePeriodSeconds ${kill} <= drain ${drain}s + grace ${grace}s: SIGKILL before the final snapshot`);
      }
    }
  }
  return errors;
}

// Mutual TLS (deploy/mtls): the files the TLS and policy flags name are files
// of a Secret or ConfigMap volume mounted in the container, under the names
// the volume's items give them (a path that is not there stops the server
// at startup, in a crash loop); a policy comes with a client CA (the server
// refuses a policy without mutual TLS).
const FILE_FLAGS = ["EXPOSURE_FILTER_TLS_CERT", "EXPOSURE_FILTER_TLS_KEY",
                    "EXPOSURE_FILTER_TLS_CLIENT_CA", "EXPOSURE_FILTER_AUTHZ_POLICY"];

function tlsFileErrors(objects) {
  const errors = [];
  const configMaps = new Map(
    objects.filter((o) => o.kind === "ConfigMap").map((o) => [o.metadata?.name, o.data ?? {}]));
  for (const sts of objects.filter((o) => o.kind === "StatefulSet")) {
    const name = `StatefulSet ${sts.metadata?.name}`;
    const volumes = new Map((sts.spec?.template?.spec?.volumes ?? []).map((v) => [v.name, v]));
    for (const c of sts.spec?.template?.spec?.containers ?? []) {
      const env = {};
      for (const ref of c.envFrom ?? []) Object.assign(env, configMaps.get(ref.configMapRef?.name) ?? {});
      for (const e of c.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
      for (const flag of FILE_FLAGS) {
        const path = env[flag];
        if (!path) continue;
        const mount = (c.volumeMounts ?? []).find((m) => path.startsWith(`${m.mountPath}/`));
        const volume = mount && volumes.get(mount.name);
        const file = mount && path.slice(mount.mountPath.length + 1);
        const source = volume?.secret ?? volume?.configMap;
        const items = source?.items;
        let ok = Boolean(source) && (!items || items.some((i) => i.path === file));
        if (ok && volume.configMap) {
          const data = configMaps.get(volume.configMap.name);
          const key = items ? items.find((i) => i.path === file).key : file;
          ok = data !== undefined && key in data;
        }
        if (!ok) errors.push(`${name}: ${flag}=${path} is not a file of a mounted Secret or ConfigMap`);
      }
      if (env.EXPOSURE_FILTER_AUTHZ_POLICY && !env.EXPOSURE_FILTER_TLS_CLIENT_CA) {
        errors.push(`${name}: EXPOSURE_FILTER_AUTHZ_POLICY needs mutual TLS (EXPOSURE_FILTER_TLS_CLIENT_CA); the server refuses to start`);
      }
    }
  }
  return errors;
}

// A NetworkPolicy selects the server pods; its ports are ports the
// pods declare (a misspelt named port matches nothing, and the traffic it
// meant to admit is dropped); the gRPC port admits only selected sources,
// never everyone; the admin port only the monitoring namespace.
function networkPolicyErrors(objects) {
  const errors = [];
  const pods = podTemplates(objects);
  const policies = objects.filter((o) => o.kind === "NetworkPolicy");
  for (const sts of objects.filter((o) => o.kind === "StatefulSet")) {
    const labels = sts.spec?.template?.metadata?.labels;
    if (!policies.some((np) => matches(np.spec?.podSelector?.matchLabels, labels))) {
      errors.push(`StatefulSet ${sts.metadata?.name}: no NetworkPolicy selects its pods`);
    }
  }
  for (const np of policies) {
    const name = `NetworkPolicy ${np.metadata?.name}`;
    const selected = pods.filter((p) => matches(np.spec?.podSelector?.matchLabels, p.labels));
    if (selected.length === 0) {
      errors.push(`${name}: podSelector matches no pod template`);
      continue;
    }
    const declared = new Map();
    for (const p of selected) {
      for (const c of p.owner.spec?.template?.spec?.containers ?? []) {
        for (const port of c.ports ?? []) declared.set(port.name, port.containerPort);
      }
    }
    const numbers = new Set(declared.values());
    for (const [i, rule] of (np.spec?.ingress ?? []).entries()) {
      const ports = (rule.ports ?? []).map((p) => p.port);
      for (const port of ports) {
        if (typeof port === "string" ? !declared.has(port) : !numbers.has(port)) {
          errors.push(`${name}: ingress[${i}] port ${port} is not a port of the selected pods`);
        }
      }
      const from = rule.from ?? [];
      const admits = (p) => ports.includes(p) || ports.includes(declared.get(p));
      if (from.length === 0 && (ports.length === 0 || admits("grpc") || admits("admin"))) {
        errors.push(`${name}: ingress[${i}] admits every source`);
      }
      if (admits("admin")) {
        const monitoringOnly = from.length > 0 && from.every((peer) =>
          !peer.ipBlock && (peer.namespaceSelector?.matchExpressions ?? []).some((e) =>
            e.key === "kubernetes.io/metadata.name" && e.operator === "In" &&
            e.values?.length === 1 && e.values[0] === "monitoring"));
        if (!monitoringOnly) {
          errors.push(`${name}: ingress[${i}] admits the admin port from outside the monitoring namespace`);
        }
      }
    }
  }
  return errors;
}

// kubectl apply (client-side) stores the whole object in the
// kubectl.kubernetes.io/last-applied-configuration annotation, and the API
// server caps an object's annotations at 256 KiB in total.
const MAX_APPLIED_BYTES = 256 * 1024;

function dashboardErrors(objects) {
  const errors = [];
  for (const cm of objects.filter((o) => o.kind === "ConfigMap")) {
    const name = `ConfigMap ${cm.metadata?.name}`;
    const dashboards = Object.entries(cm.data ?? {}).filter(([k]) => k.endsWith(".json"));
    if (dashboards.length === 0) continue;
    if (cm.metadata?.labels?.grafana_dashboard !== "1") {
      errors.push(`${name}: holds ${dashboards[0][0]} but lacks the label grafana_dashboard: "1" the Grafana sidecar loads`);
    }
    let bytes = 0;
    for (const [key, text] of dashboards) {
      bytes += Buffer.byteLength(text, "utf8");
      let dash;
      try {
        dash = JSON.parse(text);
      } catch (e) {
        errors.push(`${name}: ${key} is not JSON: ${e.message}`);
        continue;
      }
      if (typeof dash.uid !== "string" || dash.uid === "") {
        errors.push(`${name}: ${key} has no uid (Grafana would make a new dashboard on every load)`);
      }
    }
    if (bytes > MAX_APPLIED_BYTES) {
      errors.push(`${name}: ${bytes} bytes of dashboards, over the ${MAX_APPLIED_BYTES} kubectl apply can annotate`);
    }
  }
  return errors;
}

// Scale-out: the StatefulSet's replica count and the server's
// partition flags (EXPOSURE_FILTER_* in its envFrom ConfigMaps) agree, so
// every pod's ordinal (from its hostname) is < --replicas and owns at least
// one partition; the address template names the pods behind the headless
// Service; Kafka ingest is configured whole.
function clusterErrors(objects) {
  const errors = [];
  const configMaps = new Map(
    objects.filter((o) => o.kind === "ConfigMap").map((o) => [o.metadata?.name, o.data ?? {}]));
  for (const sts of objects.filter((o) => o.kind === "StatefulSet")) {
    const name = `StatefulSet ${sts.metadata?.name}`;
    for (const c of sts.spec?.template?.spec?.containers ?? []) {
      const env = {};
      for (const ref of c.envFrom ?? []) Object.assign(env, configMaps.get(ref.configMapRef?.name) ?? {});
      for (const e of c.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
      const replicas = sts.spec?.replicas ?? 1;
      const flagReplicas = Number(env.EXPOSURE_FILTER_REPLICAS ?? "1");
      const partitions = Number(env.EXPOSURE_FILTER_PARTITIONS ?? "0");
      const ordinal = env.EXPOSURE_FILTER_REPLICA_ORDINAL ?? "-1";
      if (flagReplicas !== replicas) {
        errors.push(`${name}: spec.replicas ${replicas} but EXPOSURE_FILTER_REPLICAS=${env.EXPOSURE_FILTER_REPLICAS ?? "(unset: 1)"}`);
      }
      if (replicas > 1 && !(Number.isInteger(partitions) && partitions >= replicas)) {
        errors.push(`${name}: ${replicas} replicas need EXPOSURE_FILTER_PARTITIONS >= ${replicas}, got ${env.EXPOSURE_FILTER_PARTITIONS ?? "(unset)"}`);
      }
      if (replicas > 1 && ordinal !== "-1") {
        // A fixed ordinal would make every pod claim the same partitions;
        // from the hostname, pod i gets i < replicas.
        errors.push(`${name}: EXPOSURE_FILTER_REPLICA_ORDINAL=${ordinal}: must be -1 (from the pod hostname) with ${replicas} replicas`);
      }
      if (replicas === 1 && ordinal !== "-1" && ordinal !== "0") {
        errors.push(`${name}: EXPOSURE_FILTER_REPLICA_ORDINAL=${ordinal} is not < replicas (1)`);
      }
      const template = env.EXPOSURE_FILTER_REPLICA_ADDRESS_TEMPLATE;
      if (template !== undefined) {
        const grpc = (c.ports ?? []).find((p) => p.name === "grpc")?.containerPort;
        const want = `${sts.metadata?.name}-{ordinal}.${sts.spec?.serviceName}:${grpc}`;
        if (template !== want) {
          errors.push(`${name}: EXPOSURE_FILTER_REPLICA_ADDRESS_TEMPLATE=${template}, the pods are ${want}`);
        }
      }
      if (env.EXPOSURE_FILTER_KAFKA_BROKERS) {
        for (const k of ["EXPOSURE_FILTER_KAFKA_TOPIC", "EXPOSURE_FILTER_KAFKA_GROUP"]) {
          if (!env[k]) errors.push(`${name}: EXPOSURE_FILTER_KAFKA_BROKERS is set but ${k} is not`);
        }
        // The values ParseKafkaMessageFormat accepts (src/ingest/kafka_ingest_options.cc).
        const format = env.EXPOSURE_FILTER_KAFKA_FORMAT ?? "request";
        if (!["request", "exposure", "json"].includes(format)) {
          errors.push(`${name}: EXPOSURE_FILTER_KAFKA_FORMAT=${format}: request, exposure or json`);
        }
        if (replicas > 1 && !env.EXPOSURE_FILTER_PARTITIONS) {
          errors.push(`${name}: Kafka ingest with ${replicas} replicas needs EXPOSURE_FILTER_PARTITIONS`);
        }
      }
      errors.push(...replicationErrors(objects, sts, c, env, replicas));
    }
  }
  return errors;
}

// High availability: R copies of every partition on R distinct
// pods. R <= N (the server refuses otherwise), R >= 2 only with Kafka (the
// copies stay equal by consuming the same log); then no two pods on one
// node (a required anti-affinity on the hostname: a node failure would take
// both copies of the partitions they share), a PodDisruptionBudget that
// lets at most R - 1 pods go at once, and a readiness probe.
function replicationErrors(objects, sts, container, env, replicas) {
  const name = `StatefulSet ${sts.metadata?.name}`;
  const errors = [];
  const raw = env.EXPOSURE_FILTER_REPLICATION_FACTOR ?? "1";
  const r = Number(raw);
  if (!(Number.isInteger(r) && r >= 1 && r <= replicas)) {
    errors.push(`${name}: EXPOSURE_FILTER_REPLICATION_FACTOR=${raw}: must be 1..${replicas} (EXPOSURE_FILTER_REPLICAS): each partition's copies are on distinct pods`);
    return errors;
  }
  if (r < 2) return errors;
  if (!env.EXPOSURE_FILTER_KAFKA_BROKERS) {
    errors.push(`${name}: EXPOSURE_FILTER_REPLICATION_FACTOR=${r} needs EXPOSURE_FILTER_KAFKA_BROKERS (the copies stay equal only by consuming the same log)`);
  }
  const podLabels = sts.spec?.template?.metadata?.labels ?? {};
  const selects = (matchLabels) => {
    const entries = Object.entries(matchLabels ?? {});
    return entries.length > 0 && entries.every(([k, v]) => podLabels[k] === v);
  };
  const terms = sts.spec?.template?.spec?.affinity?.podAntiAffinity
    ?.requiredDuringSchedulingIgnoredDuringExecution ?? [];
  if (!terms.some((t) => t.topologyKey === "kubernetes.io/hostname" && selects(t.labelSelector?.matchLabels))) {
    errors.push(`${name}: replication factor ${r} without a required pod anti-affinity on kubernetes.io/hostname selecting its pods: two copies of a partition could share a node`);
  }
  const pdbs = objects.filter((o) => o.kind === "PodDisruptionBudget" && selects(o.spec?.selector?.matchLabels));
  if (pdbs.length === 0) {
    errors.push(`${name}: replication factor ${r} without a PodDisruptionBudget selecting its pods`);
  }
  for (const pdb of pdbs) {
    const mu = pdb.spec?.maxUnavailable;
    if (!(Number.isInteger(mu) && mu >= 1 && mu <= r - 1)) {
      errors.push(`PodDisruptionBudget ${pdb.metadata?.name}: maxUnavailable ${mu ?? "(unset)"}: with replication factor ${r} it must be a number 1..${r - 1}, or a drain may take every copy of a partition`);
    }
  }
  if (!container.readinessProbe) {
    errors.push(`${name}: replication factor ${r} without a readiness probe: a rolling update would not wait for a restarted copy`);
  }
  return errors;
}

async function validate(objects) {
  const errors = [];
  for (const obj of objects) {
    const id = `${obj?.kind ?? "?"} ${obj?.metadata?.name ?? "?"}`;
    for (const e of await schemaErrors(obj)) errors.push(`${id}: ${e}`);
  }
  errors.push(...referenceErrors(objects));
  return errors;
}

function load(file) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"));
  const objects = [];
  for (const doc of docs) {
    if (doc.errors.length) throw new Error(`${file}: ${doc.errors[0].message}`);
    const obj = doc.toJS();
    if (obj !== null) objects.push(obj);
  }
  return objects;
}

// Typical mistakes; each must make validate() report an error, or this
// validator would be one that cannot fail.
const MISTAKES = [
  ["misspelled container field", (objs) => {
    find(objs, "StatefulSet").spec.template.spec.containers[0].imagePullPolcy = "Always";
  }],
  ["misspelled probe field", (objs) => {
    const probe = find(objs, "StatefulSet").spec.template.spec.containers[0].readinessProbe;
    (probe.grpc ?? probe.exec).prot = 50051;  // exec: the deploy/mtls probes
  }],
  ["replicas as a string", (objs) => {
    find(objs, "StatefulSet").spec.replicas = "1";
  }],
  ["invalid enum value", (objs) => {
    find(objs, "StatefulSet").spec.podManagementPolicy = "AllAtOnce";
  }],
  ["missing required field", (objs) => {
    delete find(objs, "StatefulSet").spec.selector;
  }],
  ["unknown kind", (objs) => {
    find(objs, "PodDisruptionBudget").kind = "PodDisruptionBudgets";
  }],
  ["misspelled Service field", (objs) => {
    find(objs, "Service").spec.clusterIp = "None";
  }],
  ["misspelled alert rule field", (objs) => {
    const rule = find(objs, "PrometheusRule").spec.groups[0].rules[0];
    rule.expresion = rule.expr;
  }],
  ["selector that matches no pod", (objs) => {
    find(objs, "Service").spec.selector = { "app.kubernetes.io/component": "nothing" };
  }],
  ["envFrom ConfigMap that does not exist", (objs) => {
    find(objs, "StatefulSet").spec.template.spec.containers[0].envFrom[0].configMapRef.name = "missing";
  }],
  ["replica count that disagrees with EXPOSURE_FILTER_REPLICAS", (objs) => {
    find(objs, "StatefulSet").spec.replicas = 4;
  }],
  ["fixed replica ordinal shared by every pod", (objs) => {
    configMapOf(objs).EXPOSURE_FILTER_REPLICA_ORDINAL = "0";
  }],
  ["fewer partitions than replicas", (objs) => {
    configMapOf(objs).EXPOSURE_FILTER_PARTITIONS = "2";
  }],
  ["address template naming the wrong Service", (objs) => {
    configMapOf(objs).EXPOSURE_FILTER_REPLICA_ADDRESS_TEMPLATE =
      "exposure-filter-{ordinal}.exposure-filter:50051";
  }],
  // Replication.
  ["replication factor above the replicas", (objs) => {
    configMapOf(objs).EXPOSURE_FILTER_REPLICATION_FACTOR = "4";
  }],
  ["replication without Kafka", (objs) => {
    delete configMapOf(objs).EXPOSURE_FILTER_KAFKA_BROKERS;
  }],
  ["replication without the pod anti-affinity", (objs) => {
    delete find(objs, "StatefulSet").spec.template.spec.affinity;
  }],
  ["anti-affinity only preferred", (objs) => {
    const anti = find(objs, "StatefulSet").spec.template.spec.affinity.podAntiAffinity;
    anti.preferredDuringSchedulingIgnoredDuringExecution = anti.requiredDuringSchedulingIgnoredDuringExecution
      .map((t) => ({ weight: 100, podAffinityTerm: t }));
    delete anti.requiredDuringSchedulingIgnoredDuringExecution;
  }],
  ["disruption budget letting both copies go", (objs) => {
    find(objs, "PodDisruptionBudget").spec.maxUnavailable = 2;
  }],
  ["Kafka brokers without a topic", (objs) => {
    delete configMapOf(objs).EXPOSURE_FILTER_KAFKA_TOPIC;
  }],
  // The NetworkPolicy.
  ["NetworkPolicy port name no container declares", (objs) => {
    find(objs, "NetworkPolicy").spec.ingress[0].ports[0].port = "grcp";
  }],
  ["gRPC port open to every source", (objs) => {
    delete find(objs, "NetworkPolicy").spec.ingress[0].from;
  }],
  ["admin port open beyond the monitoring namespace", (objs) => {
    const rule = find(objs, "NetworkPolicy").spec.ingress.find(
      (r) => r.ports?.some((p) => p.port === "admin"));
    rule.from.push({ podSelector: {} });
  }],
  ["no NetworkPolicy for the server pods", (objs) => {
    find(objs, "NetworkPolicy").spec.podSelector.matchLabels = { app: "other" };
  }],
  ["TLS key path outside any mounted Secret", (objs) => {
    configMapOf(objs).EXPOSURE_FILTER_TLS_KEY = "/etc/exposure-filter/tls/key.pem";
  }],
  ["authorization policy without mutual TLS", (objs) => {
    const flags = configMapOf(objs);
    delete flags.EXPOSURE_FILTER_TLS_CLIENT_CA;
    flags.EXPOSURE_FILTER_AUTHZ_POLICY ??= "/etc/exposure-filter/authz/policy";
  }],
  ["drain shorter than the readiness probe takes to fail", (objs) => {
    configMapOf(objs).EXPOSURE_FILTER_SHUTDOWN_DELAY = "1s";
  }],
  ["termination grace period shorter than drain + grace", (objs) => {
    find(objs, "StatefulSet").spec.template.spec.terminationGracePeriodSeconds = 15;
  }],
  ["dashboard ConfigMap without the Grafana sidecar label", (objs) => {
    delete dashboardConfigMap(objs).metadata.labels.grafana_dashboard;
  }],
  ["dashboard that is not JSON", (objs) => {
    const data = dashboardConfigMap(objs).data;
    const key = Object.keys(data).find((k) => k.endsWith(".json"));
    data[key] = data[key].slice(0, -2);
  }],
];

// The server flags: the ConfigMap the StatefulSet's envFrom names (the
// dashboard's ConfigMap may come first in the rendered output).
function configMapOf(objects) {
  const sts = find(objects, "StatefulSet");
  const names = (sts.spec.template.spec.containers[0].envFrom ?? []).map((r) => r.configMapRef?.name);
  const cm = objects.find((o) => o.kind === "ConfigMap" && names.includes(o.metadata?.name));
  if (!cm) throw new Error("self-test: no ConfigMap the StatefulSet's envFrom names");
  return cm.data;
}

function dashboardConfigMap(objects) {
  const cm = objects.find((o) => o.kind === "ConfigMap" &&
    Object.keys(o.data ?? {}).some((k) => k.endsWith(".json")));
  if (!cm) throw new Error("self-test: no dashboard ConfigMap in the rendered output");
  return cm;
}

function find(objects, kind) {
  const o = objects.find((x) => x.kind === kind);
  if (!o) throw new Error(`self-test: no ${kind} in the rendered output`);
  return o;
}

async function main() {
  const args = process.argv.slice(2);
  const selfTest = args[0] === "--self-test";
  const file = selfTest ? args[1] : args[0];
  if (!file) {
    console.error("usage: node validate.mjs [--self-test] RENDERED.yaml");
    process.exit(2);
  }
  const objects = load(file);
  if (objects.length === 0) {
    console.error(`${file}: no objects`);
    process.exit(1);
  }
  const errors = await validate(objects);
  for (const e of errors) console.error(`FAIL ${e}`);
  for (const o of objects) console.log(`checked ${o.apiVersion} ${o.kind} ${o.metadata?.name}`);
  let failed = errors.length;
  if (selfTest) {
    for (const [what, mutate] of MISTAKES) {
      const copy = structuredClone(objects);
      mutate(copy);
      const found = await validate(copy);
      if (found.length === 0) {
        console.error(`FAIL self-test: ${what} was not rejected`);
        failed++;
      } else {
        console.log(`self-test: ${what} rejected (${found[0]})`);
      }
    }
  }
  const checks = objects.length + (selfTest ? MISTAKES.length : 0);
  console.log(`deploy validation: ${checks} checks, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

await main();
