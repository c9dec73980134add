// Writes the rule groups of every PrometheusRule in a rendered manifest as a
// plain Prometheus rules file, for `promtool check rules` / `promtool test
// rules`.  Usage: node extract-rules.mjs RENDERED.yaml OUT.rules.yaml
import { readFileSync, writeFileSync } from "node:fs";
import { parseAllDocuments, stringify } from "yaml";

const [input, output] = process.argv.slice(2);
const groups = parseAllDocuments(readFileSync(input, "utf8"))
  .map((d) => d.toJS())
  .filter((o) => o?.kind === "PrometheusRule")
  .flatMap((o) => o.spec.groups);
if (groups.length === 0) {
  console.error(`${input}: no PrometheusRule groups`);
  process.exit(1);
}
writeFileSync(output, stringify({ groups }));
console.log(`wrote ${groups.length} rule group(s) to ${output}`);
