// dist/ is committed (tether embeds dist/tether-client.js, and its Rust build must not need npm):
// it must be exactly what tsc makes of src/ today.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../../", import.meta.url));

test("dist/ is the build of src/ (run `npm run build` after editing src/)", () => {
  const out = mkdtempSync(join(tmpdir(), "tether-client-"));
  try {
    const tsc = join(root, "node_modules/typescript/bin/tsc");
    execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.json"), "--outDir", out], { stdio: "inherit" });
    const built = readdirSync(out).sort();
    assert.deepEqual(readdirSync(join(root, "dist")).sort(), built);
    for (const f of built) {
      assert.equal(readFileSync(join(root, "dist", f), "utf8"), readFileSync(join(out, f), "utf8"), `dist/${f} is stale`);
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
