// Asks the reference engine what it makes of entry timestamps that are not
// ISO strings: numbers (integer, fractional, negative, out of range), numeric
// strings, null, booleans, objects, arrays and a missing member. The output is
// the golden data of tests/it/engine/timestamps.rs and of the unit test of
// `js_date_ms` in src/session/time.rs (see fixtures/timestamps/README.md and
// docs/engine.md, "Timestamps").
//
// Usage (Bun):
//   bun scripts/reference/timestamps.ts <cache-dir> [out-dir]
// or with REF_CACHE=<cache-dir> in the environment. <cache-dir> is the
// directory whose node_modules holds @oh-my-pi/pi-coding-agent.

import * as fs from "node:fs";
import * as path from "node:path";
import { contextJson, mulberry32, privateAgentDir } from "./common.ts";

const cache = process.argv[2] ?? process.env.REF_CACHE;
if (!cache) {
	console.error("usage: bun timestamps.ts <cache-dir> [out-dir]");
	process.exit(2);
}
const outDir = path.resolve(process.argv[3] ?? path.join(import.meta.dir, "../../fixtures/timestamps"));

// The agent reads local times in the process's zone; the engine reads them
// as UTC (docs/engine.md, "Timestamps"). Pin the zone so the legacy rows
// below do not depend on the machine.
process.env.TZ = "UTC";

// A private agent directory for the reference.
const work = privateAgentDir("sessionfs-timestamps-");

const pkg = path.resolve(cache, "node_modules/@oh-my-pi");
const { SessionManager } = await import(path.join(pkg, "pi-coding-agent/src/session/session-manager.ts"));

// `timestamp` members as raw JSON text (`null` here: the member is absent).
// Followed: sessionfs gives what `new Date(value).getTime()` gives.
const FOLLOWED: (string | null)[] = [
	'"2026-03-01T10:00:05.000Z"',
	"1772359205000",
	"1772359205000.9",
	"1772359205000.4",
	"-1772359205000.5",
	"1.772359205e12",
	"17723592050009e-1",
	"-1",
	"-0",
	"0",
	"0.7",
	"-0.7",
	"5e-324",
	"8.64e15",
	"8640000000000000",
	"8640000000000001",
	"-8.64e15",
	"-8640000000000001",
	"1e21",
	"1e400",
	"-1e400",
	'"1772359205000"',
	'"2026"',
	'"not a date"',
	'""',
	"null",
	"true",
	"false",
	"{}",
	'{"a":1}',
	'{"valueOf":1}',
	"[]",
	'["2026-03-01T10:00:05.000Z"]',
	'[["2026-03-01T10:00:05.000Z"]]',
	'["2026-03-01T10:00:05.000Z","x"]',
	"[2026]",
	"[2026.0]",
	"[-123456]",
	"[1772359205000]",
	"[null]",
	"[true]",
	"[{}]",
	"[[]]",
	null,
];
// Not followed (docs/engine.md, "Timestamps"): strings outside the ISO
// family, which JavaScript hands to its legacy parser (also as the text of an
// array), and an object whose `toString` member makes `new Date` throw.
const LEGACY: string[] = ['"5"', '" 2026-03-01T10:00:05Z"', "[5]", "[1,2]", "[-1]", "[1.5]", "[123456]", '["2026","03"]', '{"toString":"x"}'];

function dateOf(raw: string | null): { ms: number | null; throws: boolean } {
	try {
		const t = new Date(raw === null ? undefined : JSON.parse(raw)).getTime();
		return { ms: Number.isNaN(t) ? null : t, throws: false };
	} catch {
		return { ms: null, throws: true };
	}
}

const values: string[] = [];
for (const raw of FOLLOWED) values.push(JSON.stringify({ json: raw, followed: true, ...dateOf(raw) }));
for (const raw of LEGACY) values.push(JSON.stringify({ json: raw, followed: false, ...dateOf(raw) }));

// ---------------------------------------------------------------- sessions

const HEADER = (n: number) =>
	JSON.stringify({
		type: "session",
		version: 3,
		id: `0000000${n}`.slice(-8) + "-0000-7000-8000-000000000000",
		timestamp: "2026-03-01T10:00:00.000Z",
		cwd: "/work/project",
	});

/** An entry line with `timestamp` as raw JSON text (absent for null). */
function line(fields: Record<string, unknown>, timestamp: string | null, rest: Record<string, unknown>): string {
	const head = JSON.stringify(fields).slice(0, -1);
	const ts = timestamp === null ? "" : `,"timestamp":${timestamp}`;
	const tail = JSON.stringify(rest).slice(1);
	return `${head}${ts}${tail === "}" ? "}" : `,${tail}`}`;
}

const user = (id: string, parentId: string | null, ts: string, text: string) =>
	line({ type: "message", id, parentId }, JSON.stringify(ts), {
		message: { role: "user", content: text, timestamp: Date.parse(ts) },
	});

interface Case {
	lines: string[];
	kind: string;
	timestamp?: string | null;
}
const cases: Case[] = [];

// 1. Made-up messages: a branch summary, a custom message and a compaction
//    (keeping the branch summary) stamped with the value, then a prompt.
for (const raw of FOLLOWED) {
	cases.push({
		kind: "context",
		timestamp: raw,
		lines: [
			user("a0000001", null, "2026-03-01T10:00:00.000Z", "first"),
			line({ type: "branch_summary", id: "a0000002", parentId: "a0000001" }, raw, {
				summary: "what the other branch did",
				fromId: "a0000001",
			}),
			line({ type: "custom_message", id: "a0000003", parentId: "a0000002" }, raw, {
				customType: "note",
				content: "a note",
				display: true,
			}),
			line({ type: "compaction", id: "a0000004", parentId: "a0000003" }, raw, {
				summary: "compacted",
				firstKeptEntryId: "a0000002",
				tokensBefore: 100,
			}),
			user("a0000005", "a0000004", "2026-03-01T10:00:09.000Z", "second"),
		],
	});
}

// 2. Sibling order: one parent with children stamped with every value
//    whose time is finite (ties included), in a scrambled file order; and
//    random groups of them.
const rand = mulberry32(11);
const int = (n: number) => Math.floor(rand() * n);
const finite = FOLLOWED.filter(raw => dateOf(raw).ms !== null);
const nonFinite = FOLLOWED.filter(raw => dateOf(raw).ms === null);
const iso = ['"1970-01-01T00:00:00.000Z"', '"1970-01-01T00:00:00.001Z"', '"2026-03-01T10:00:05.000Z"', '"2026-01-01T00:00:00.000Z"'];

function siblings(stamps: (string | null)[]): string[] {
	const lines = [user("b0000000", null, "2026-03-01T10:00:00.000Z", "parent")];
	stamps.forEach((raw, i) => {
		const id = `c${String(i).padStart(7, "0")}`;
		lines.push(line({ type: "custom", id, parentId: "b0000000" }, raw, { customType: "ext", data: { i } }));
		// A grandchild, so that each child is a branch of its own.
		lines.push(line({ type: "custom", id: `d${String(i).padStart(7, "0")}`, parentId: id }, raw, { customType: "ext" }));
	});
	return lines;
}
function shuffled<T>(items: T[]): T[] {
	const out = [...items];
	for (let i = out.length - 1; i > 0; i--) {
		const j = int(i + 1);
		[out[i], out[j]] = [out[j], out[i]];
	}
	return out;
}
cases.push({ kind: "siblings", lines: siblings(shuffled([...finite, ...iso])) });
for (let g = 0; g < 40; g++) {
	const pool = [...finite, ...iso];
	const n = 2 + int(6);
	cases.push({ kind: "siblings", lines: siblings(Array.from({ length: n }, () => pool[int(pool.length)])) });
}
// Siblings without a time among others (sessionfs puts them last; the
// reference's sort treats every comparison with them as a tie).
for (const raw of nonFinite) {
	cases.push({ kind: "siblings", lines: siblings(['"2026-03-01T10:00:05.000Z"', raw, '"2026-01-01T00:00:00.000Z"']) });
	cases.push({ kind: "siblings", lines: siblings([raw, '"2026-03-01T10:00:05.000Z"', "1000"]) });
}

// ---------------------------------------------------------------- record

interface TreeNode {
	entry: { id: string; timestamp?: unknown };
	children: TreeNode[];
}

const sessionsDir = path.join(work, "sessions");
fs.mkdirSync(sessionsDir, { recursive: true });
const sessionsOut: string[] = [];
const expectedOut: string[] = [];
for (let n = 0; n < cases.length; n++) {
	const c = cases[n];
	const lines = [HEADER(n), ...c.lines];
	const file = path.join(sessionsDir, `case-${n}.jsonl`);
	fs.writeFileSync(file, `${lines.join("\n")}\n`);
	sessionsOut.push(JSON.stringify({ case: n, kind: c.kind, lines: lines.length }), ...lines);
	const sm = await SessionManager.open(file, sessionsDir);
	if (c.kind === "context") {
		expectedOut.push(JSON.stringify({ case: n, timestamp: c.timestamp, leaf: "(loaded)", context: contextJson(sm) }));
		for (const entry of sm.getEntries()) {
			sm.branch(entry.id);
			expectedOut.push(JSON.stringify({ case: n, timestamp: c.timestamp, leaf: entry.id, context: contextJson(sm) }));
		}
	} else {
		// Every entry's children in the reference's order (`getTree`), and
		// whether every sibling has a finite time there.
		const children: Record<string, string[]> = {};
		let allFinite = true;
		const walk = (nodes: TreeNode[]) => {
			for (const node of nodes) {
				children[node.entry.id] = node.children.map(ch => ch.entry.id);
				for (const ch of node.children) {
					if (Number.isNaN(new Date(ch.entry.timestamp as any).getTime())) allFinite = false;
				}
				walk(node.children);
			}
		};
		const roots: TreeNode[] = sm.getTree();
		walk(roots);
		expectedOut.push(JSON.stringify({ case: n, roots: roots.map(r => r.entry.id), children, allFinite }));
	}
	await sm.close?.();
}

fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "values.jsonl"), `${values.join("\n")}\n`);
fs.writeFileSync(path.join(outDir, "sessions.txt"), `${sessionsOut.join("\n")}\n`);
fs.writeFileSync(path.join(outDir, "expected.jsonl"), `${expectedOut.join("\n")}\n`);
console.log(`${values.length} values, ${cases.length} sessions -> ${outDir}`);
fs.rmSync(work, { recursive: true, force: true });
