// Generates random session trees, opens each with the reference engine's
// SessionManager and records its context at every leaf. The output is the
// golden data of tests/it/engine/differential.rs (see fixtures/differential/README.md).
//
// Usage (Bun):
//   bun scripts/reference/differential.ts <cache-dir> [out-dir] [count] [seed]
// or with REF_CACHE=<cache-dir> in the environment. <cache-dir> is the
// directory whose node_modules holds @oh-my-pi/pi-coding-agent.
//
// The trees (with orphans and damaged lines) only use what the seed describes plus the agent's own additions
// that sessionfs follows (docs/engine.md, "Context details taken from the
// reference"). They avoid what would trigger the reference's context
// post-processing passes, which sessionfs does not apply (tool calls in
// assistant turns, aborted/errored turns, retry turns, context notes,
// provider replay payloads).

import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { contextJson, mulberry32, privateAgentDir } from "./common.ts";

const cache = process.argv[2] ?? process.env.REF_CACHE;
if (!cache) {
	console.error("usage: bun differential.ts <cache-dir> [out-dir] [count] [seed]");
	process.exit(2);
}
const outDir = path.resolve(process.argv[3] ?? path.join(import.meta.dir, "../../fixtures/differential"));
const COUNT = Number(process.argv[4] ?? 520);

// A private agent directory for the reference (blobs, breadcrumbs, settings).
const work = privateAgentDir("sessionfs-differential-");

const pkg = path.resolve(cache, "node_modules/@oh-my-pi");
const { SessionManager } = await import(path.join(pkg, "pi-coding-agent/src/session/session-manager.ts"));
const { getBlobsDir } = await import(path.join(pkg, "pi-utils/src/dirs.ts"));
const { serializeTitleSlot } = await import(path.join(pkg, "pi-coding-agent/src/session/session-title-slot.ts"));

// ---------------------------------------------------------------- random

const rand = mulberry32(Number(process.argv[5] ?? 13));
const int = (n: number) => Math.floor(rand() * n);
const chance = (p: number) => rand() < p;
function pick<T>(items: readonly T[]): T {
	return items[int(items.length)];
}

// ---------------------------------------------------------------- blobs

const blobsDir: string = getBlobsDir();
fs.mkdirSync(blobsDir, { recursive: true });
const blobs = new Map<string, Buffer>();
function putBlob(bytes: Buffer): string {
	const hex = crypto.createHash("sha256").update(bytes).digest("hex");
	blobs.set(hex, bytes);
	fs.writeFileSync(path.join(blobsDir, hex), bytes);
	return `blob:sha256:${hex}`;
}
const imageRefs = Array.from({ length: 4 }, (_, i) => putBlob(Buffer.from(`\x89PNG image ${i} `.repeat(3 + i))));
const dataUrl = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==";
const dataUrlRef = putBlob(Buffer.from(dataUrl, "utf8"));
const missingRef = `blob:sha256:${"ab".repeat(32)}`;
const malformedRef = "blob:sha256:../../etc/passwd";

function imageData(): string {
	return pick([...imageRefs, ...imageRefs, missingRef, malformedRef, "aGVsbG8gd29ybGQ="]);
}

// ---------------------------------------------------------------- content

const words = ["alpha", "beta", "gamma", "delta", "ünïcödé", "emoji 😀", "tab\there", "line\nbreak", "quote \" q"];
function text(): string {
	let s = `${pick(words)} ${pick(words)}`;
	if (chance(0.12)) s += pick(["\ud83d", "\udc00", "x\ud800y"]); // lone surrogates
	return s;
}
function imageBlock(): Record<string, unknown> {
	return { type: "image", data: imageData(), mimeType: pick(["image/png", "image/jpeg"]) };
}
function userContent(): unknown {
	if (chance(0.4)) return text();
	const blocks: unknown[] = [{ type: "text", text: text() }];
	if (chance(0.35)) blocks.push(imageBlock());
	if (chance(0.1)) blocks.push({ type: "wrapper", content: [imageBlock(), { type: "text", text: text() }] });
	if (chance(0.08)) blocks.push({ type: "input_image", image_url: pick([dataUrlRef, dataUrlRef, missingRef]) });
	return blocks;
}

let clock = Date.parse("2026-03-01T10:00:00.000Z");
function ts(): string {
	clock += 1000 + int(60_000);
	if (chance(0.02)) return "not a date";
	return new Date(clock).toISOString();
}

const providers = ["anthropic", "openai", "google"];
const modelNames = ["m-large", "m-small", "m-mini"];

function usage(): Record<string, unknown> {
	return {
		input: int(1000),
		output: int(500),
		cacheRead: 0,
		cacheWrite: 0,
		totalTokens: int(1500),
		cost: { input: 0.01, output: 0.02, cacheRead: 0, cacheWrite: 0, total: 0.03 },
	};
}

function message(): Record<string, unknown> {
	const r = rand();
	if (r < 0.35) return { role: "user", content: userContent(), timestamp: clock };
	if (r < 0.7) {
		const content: unknown[] = [];
		if (chance(0.3)) {
			const thinking: Record<string, unknown> = { type: "thinking", thinking: text() };
			if (chance(0.5)) thinking.thinkingSignature = "sig-" + int(1e6);
			content.push(thinking);
		}
		content.push({ type: "text", text: text() });
		const m: Record<string, unknown> = {
			role: "assistant",
			content,
			api: "messages",
			provider: pick(providers),
			model: pick(modelNames),
			usage: usage(),
			stopReason: "stop",
			timestamp: clock,
		};
		if (chance(0.05)) delete m.provider;
		return m;
	}
	if (r < 0.85) {
		const m: Record<string, unknown> = {
			role: "toolResult",
			toolCallId: `call_${int(1e6)}`,
			toolName: pick(["read", "bash", "browser"]),
			content: chance(0.3) ? [{ type: "text", text: text() }, imageBlock()] : [{ type: "text", text: text() }],
			isError: false,
			timestamp: clock,
		};
		if (chance(0.35)) m.details = { images: [{ data: imageData(), mimeType: "image/png" }], note: text() };
		return m;
	}
	if (r < 0.93) {
		const m: Record<string, unknown> = {
			role: "bashExecution",
			command: "ls",
			output: text(),
			exitCode: 0,
			timestamp: clock,
		};
		if (chance(0.5)) m.images = [{ type: "image", data: imageData(), mimeType: "image/png" }];
		return m;
	}
	return { role: chance(0.5) ? "custom" : "hookMessage", customType: "note", content: text(), display: true, timestamp: clock };
}

function customMessage(): Record<string, unknown> {
	const e: Record<string, unknown> = { type: "custom_message" };
	const ct = rand();
	if (ct < 0.5) e.customType = pick(["ext-note", "reminder"]);
	else if (ct < 0.6) e.customType = "";
	else if (ct < 0.7) e.customType = pick(["prewalk-plan", "vibe-mode-context"]);
	else if (ct < 0.8) e.customType = 7;
	// else: absent
	const c = rand();
	if (c < 0.5) e.content = text();
	else if (c < 0.8) e.content = [{ type: "text", text: text() }, imageBlock()];
	else if (c < 0.87) e.content = 42;
	else if (c < 0.93) e.content = { type: "text", text: "object" };
	else if (c < 0.97) e.content = null;
	// else: absent
	const d = rand();
	if (d < 0.4) e.display = true;
	else if (d < 0.7) e.display = false;
	else if (d < 0.8) e.display = "yes";
	if (chance(0.4)) e.details = chance(0.5) ? { images: [{ data: imageData(), mimeType: "image/png" }] } : null;
	const a = rand();
	if (a < 0.25) e.attribution = "user";
	else if (a < 0.45) e.attribution = "agent";
	else if (a < 0.55) e.attribution = pick(["bogus", null, 3]);
	return e;
}

// ---------------------------------------------------------------- trees

interface Built {
	lines: string[];
	version: number;
}

function entryBody(version: number, pathIds: string[], allIds: string[], index: number): Record<string, unknown> {
	const r = rand();
	if (r < 0.42) return { type: "message", message: message() };
	if (r < 0.47) {
		const e: Record<string, unknown> = { type: "thinking_level_change" };
		const t = rand();
		if (t < 0.6) e.thinkingLevel = pick(["low", "medium", "high", "off"]);
		else if (t < 0.85) e.thinkingLevel = null;
		return e;
	}
	if (r < 0.53) {
		const m = rand();
		if (m < 0.45) return { type: "model_change", model: `${pick(providers)}/${pick(modelNames)}` };
		if (m < 0.6) return { type: "model_change", model: `${pick(providers)}/${pick(modelNames)}`, role: pick(["small", "slow", "default"]) };
		if (m < 0.8) return { type: "model_change", provider: pick(providers), modelId: pick(modelNames) };
		return { type: "model_change", model: pick(["", null]) };
	}
	if (r < 0.6) {
		const e: Record<string, unknown> = { type: "compaction", summary: text(), tokensBefore: int(50000) };
		if (version === 1) {
			if (index > 0) e.firstKeptEntryIndex = 1 + int(index);
		} else if (chance(0.85) && allIds.length > 0) {
			e.firstKeptEntryId = chance(0.8) && pathIds.length > 0 ? pick(pathIds) : pick(allIds);
		}
		if (chance(0.6)) e.tokensAfter = int(5000);
		if (chance(0.3)) e.shortSummary = text();
		if (chance(0.3)) e.method = pick(["soft", "handoff", "remote"]);
		if (chance(0.2)) e.warning = text();
		if (chance(0.2)) e.details = { readFiles: ["a.rs"] };
		return e;
	}
	if (version === 1) {
		return { type: "message", message: message() };
	}
	if (r < 0.66) {
		return {
			type: "branch_summary",
			summary: chance(0.85) ? text() : "",
			fromId: allIds.length > 0 ? pick(allIds) : "root",
		};
	}
	if (r < 0.7) {
		const e: Record<string, unknown> = { type: "label", targetId: allIds.length > 0 ? pick(allIds) : "nope" };
		if (chance(0.8)) e.label = text();
		return e;
	}
	if (r < 0.73) return { type: "custom", customType: "ext-state", data: { n: int(10), image: imageBlock() } };
	if (r < 0.84) return customMessage();
	if (r < 0.87) return { type: "ttsr_injection", injectedRules: [pick(["rule-a", "rule-b", "rule-c"]), pick(["rule-a", "rule-d"])] };
	if (r < 0.91) {
		const e: Record<string, unknown> = { type: "mode_change", mode: pick(["plan", "none", "vibe"]) };
		if (chance(0.5)) e.data = { step: int(5) };
		return e;
	}
	if (r < 0.96) return { type: "reset_boundary" };
	return { type: "future_thing", payload: { content: [imageBlock()] } };
}

function shortId(): string {
	return crypto.randomBytes(4).toString("hex");
}

function build(caseNo: number): Built {
	const version = chance(0.15) ? 1 : chance(0.18) ? 2 : 3;
	clock += 86_400_000;
	const header: Record<string, unknown> = {
		type: "session",
		id: crypto.randomUUID(),
		timestamp: new Date(clock).toISOString(),
		cwd: "/work/project",
	};
	if (version > 1) header.version = version;
	const lines: string[] = [];
	if (version === 3 && chance(0.15)) {
		lines.push(serializeTitleSlot({ title: `Case ${caseNo}`, updatedAt: header.timestamp }).replace(/\n$/, ""));
	}
	lines.push(JSON.stringify(header));
	const n = 2 + int(20);
	const ids: string[] = [];
	const parents = new Map<string, string | null>();
	let last: string | null = null;
	for (let i = 0; i < n; i++) {
		let parent: string | null = last;
		if (version > 1 && ids.length > 0 && chance(0.25)) parent = chance(0.1) ? null : pick(ids);
		// Orphans (a parent that does not exist) and unparseable lines. (No
		// torn objects before other lines: the reference lets such a piece
		// swallow the next line, which sessionfs deliberately does not;
		// docs/engine.md, "Deviations from the seed document" 2.)
		if (version > 1 && chance(0.03)) parent = "gone0000";
		if (chance(0.02)) lines.push(pick(["not json at all", "", "}{"]));
		// The path from the root to the parent, for compaction targets.
		const pathIds: string[] = [];
		for (let p = parent; p; p = parents.get(p) ?? null) pathIds.push(p);
		const body = entryBody(version, pathIds, ids, i);
		if (version === 1) {
			lines.push(JSON.stringify({ ...body, timestamp: ts() }));
			continue;
		}
		const id = shortId();
		const entry = { type: body.type, id, parentId: parent, timestamp: ts(), ...body };
		lines.push(JSON.stringify(entry));
		ids.push(id);
		parents.set(id, parent);
		last = id;
	}
	return { lines, version };
}

// ---------------------------------------------------------------- record

function sha256(s: string): string {
	return crypto.createHash("sha256").update(s, "utf8").digest("hex");
}

// Replace what this script writes (README.md and other files stay).
fs.rmSync(path.join(outDir, "blobs"), { recursive: true, force: true });
fs.mkdirSync(path.join(outDir, "blobs"), { recursive: true });
for (const [hex, bytes] of blobs) fs.writeFileSync(path.join(outDir, "blobs", hex), bytes);

const sessionsDir = path.join(work, "sessions");
fs.mkdirSync(sessionsDir, { recursive: true });
const sessionsOut: string[] = [];
const expectedOut: string[] = [];
let leaves = 0;
for (let caseNo = 0; caseNo < COUNT; caseNo++) {
	const { lines, version } = build(caseNo);
	const file = path.join(sessionsDir, `case-${caseNo}.jsonl`);
	const text = `${lines.join("\n")}\n`;
	fs.writeFileSync(file, text);
	sessionsOut.push(JSON.stringify({ case: caseNo, version, lines: lines.length }), ...lines);

	const sm = await SessionManager.open(file, sessionsDir);
	const entries = sm.getEntries();
	const record = (leaf: string | number | null, ctx: string) => {
		const parsed = JSON.parse(ctx);
		expectedOut.push(
			JSON.stringify({
				case: caseNo,
				leaf,
				messages: parsed.messages.length,
				roles: parsed.messages.map((m: { role: string }) => m.role).join(","),
				sha256: sha256(ctx),
				// The first cases in full, for diagnostics; the rest as hashes.
				...(caseNo < 6 ? { context: ctx } : {}),
			}),
		);
		leaves++;
	};
	record("(loaded)", contextJson(sm));
	for (let i = 0; i < entries.length; i++) {
		sm.branch(entries[i].id);
		record(i, contextJson(sm));
	}
	sm.resetLeaf();
	record(null, contextJson(sm));
	await sm.close?.();
}

fs.writeFileSync(path.join(outDir, "sessions.txt"), `${sessionsOut.join("\n")}\n`);
fs.writeFileSync(path.join(outDir, "expected.jsonl"), `${expectedOut.join("\n")}\n`);
console.log(`${COUNT} sessions, ${leaves} leaves -> ${outDir}`);
fs.rmSync(work, { recursive: true, force: true });
