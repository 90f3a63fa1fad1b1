// Times the reference engine on one session file: open it with
// SessionManager and build the context at its leaf, serialised as JSON
// (what `sessionfs context --compact` prints), in-process, several times.
// Prints one line per run and a summary line:
//   REFERENCE min=<ms> median=<ms> runs=<n> bytes=<context bytes>
//
// Usage (Bun):
//   bun scripts/reference/context_bench.ts <cache-dir> <file.jsonl> [runs]
// or with REF_CACHE=<cache-dir> in the environment (then the file comes
// first). <cache-dir> is the directory whose node_modules holds
// @oh-my-pi/pi-coding-agent. scripts/bench.sh runs it when REF_CACHE is set.

import * as fs from "node:fs";
import * as path from "node:path";
import { contextJson, privateAgentDir } from "./common.ts";

const args = process.argv.slice(2);
const cache = process.env.REF_CACHE && args[0]?.endsWith(".jsonl") ? process.env.REF_CACHE : args.shift();
const file = args[0];
const runs = Number(args[1] ?? 5);
if (!cache || !file) {
	console.error("usage: bun context_bench.ts <cache-dir> <file.jsonl> [runs]");
	process.exit(2);
}

// A private agent directory for the reference (breadcrumbs, settings).
const work = privateAgentDir("sessionfs-refbench-");

const pkg = path.resolve(cache, "node_modules/@oh-my-pi");
const { SessionManager } = await import(path.join(pkg, "pi-coding-agent/src/session/session-manager.ts"));

const sessionsDir = path.join(work, "sessions");
fs.mkdirSync(sessionsDir, { recursive: true });
const times: number[] = [];
let bytes = 0;
for (let i = 0; i < runs; i++) {
	const t0 = performance.now();
	const sm = await SessionManager.open(path.resolve(file), sessionsDir);
	const text = contextJson(sm);
	const ms = performance.now() - t0;
	bytes = text.length;
	times.push(ms);
	console.log(`run ${i + 1}: ${ms.toFixed(1)} ms`);
}
times.sort((a, b) => a - b);
const median = times[Math.floor(times.length / 2)];
console.log(`REFERENCE min=${times[0].toFixed(1)} median=${median.toFixed(1)} runs=${runs} bytes=${bytes}`);
fs.rmSync(work, { recursive: true, force: true });
