// node validate-crds.mjs FILE...: every ServiceMonitor / PodMonitor in the
// YAML files is checked against the prometheus-operator CRD schema shipped
// by @kubernetes-models/prometheus-operator, twice:
//   1. the package's JSON-schema validator (types, enums, required fields);
//   2. the package's TypeScript interfaces, compiled with `tsc --noEmit`:
//      the CRD schemas allow unknown keys (the API server prunes them
//      silently, hiding typos such as `prt: admin`), TypeScript's excess
//      property check on an object literal rejects them.
// Other kinds are skipped: kubernetes-validate checks the built-ins.
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import yaml from "js-yaml";
import { ServiceMonitor, PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const here = dirname(fileURLToPath(import.meta.url));
const models = { ServiceMonitor, PodMonitor };
const found = [];
let failed = 0;

for (const file of process.argv.slice(2)) {
  for (const doc of yaml.loadAll(readFileSync(file, "utf8"))) {
    if (!doc || doc.apiVersion !== "monitoring.coreos.com/v1") continue;
    const where = `${file} ${doc.kind}/${doc.metadata?.name}`;
    const Model = models[doc.kind];
    if (!Model) {
      console.error(`ERROR ${where}: no schema for this kind here`);
      failed++;
      continue;
    }
    try {
      new Model(doc).validate();
      found.push({ where, doc });
    } catch (e) {
      console.error(`ERROR ${where}: ${e.message}`);
      failed++;
    }
  }
}
if (found.length === 0 && failed === 0) {
  console.error("ERROR no monitoring.coreos.com/v1 object found");
  process.exit(1);
}

// One declaration per object, so tsc's messages point at the object.
const tmp = mkdtempSync(join(tmpdir(), "crd-ts-"));
try {
  const lines = [
    `import type { IServiceMonitor, IPodMonitor } from ${JSON.stringify(join(here, "node_modules/@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/index.js"))};`,
  ];
  found.forEach(({ where, doc }, i) => {
    lines.push(`// ${where}`);
    lines.push(`export const o${i}: I${doc.kind} = ${JSON.stringify(doc, null, 2)};`);
  });
  const ts = join(tmp, "objects.ts");
  writeFileSync(ts, lines.join("\n") + "\n");
  try {
    execFileSync(join(here, "node_modules/.bin/tsc"),
      ["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
       "--target", "es2022", "--skipLibCheck", ts],
      { stdio: "pipe", encoding: "utf8" });
  } catch (e) {
    console.error(`ERROR TypeScript check of the CRD objects failed:\n${e.stdout}${e.stderr}`);
    console.error(`(generated file: ${ts}; object order: ${found.map((f) => f.where).join(", ")})`);
    process.exit(1);
  }
} finally {
  if (!process.exitCode) rmSync(tmp, { recursive: true, force: true });
}
for (const { where } of found) console.log(`INFO ${where} passed (monitoring.coreos.com/v1 CRD schema + field names)`);
process.exit(failed ? 1 : 0);
