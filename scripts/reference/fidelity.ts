// Asks the reference engine what it writes and counts where sessionfs must
// do the same (fixtures/fidelity/README.md):
//   fork/    the title line and header of the files its fork(),
//            createBranchedSession() and forkFrom() write;
//   stats/   its session usage (getUsageStatistics) of a session with a
//            `task` tool result and `model_usage` entries;
//   sizes/   what its prepareEntryForPersistence makes of entries (the
//            size controls on write, images becoming blobs).
// The golden data of tests/it/engine/ref_fidelity.rs.
//
// Usage (Bun):
//   bun scripts/reference/fidelity.ts <cache-dir> [out-dir]
// or with REF_CACHE=<cache-dir> in the environment. <cache-dir> is the
// directory whose node_modules holds @oh-my-pi/pi-coding-agent.

import * as fs from "node:fs";
import * as path from "node:path";
import { privateAgentDir } from "./common.ts";

const cache = process.argv[2] ?? process.env.REF_CACHE;
if (!cache) {
	console.error("usage: bun fidelity.ts <cache-dir> [out-dir]");
	process.exit(2);
}
const outDir = path.resolve(process.argv[3] ?? path.join(import.meta.dir, "../../fixtures/fidelity"));

const work = privateAgentDir("sessionfs-fidelity-");
const pkg = path.resolve(cache, "node_modules/@oh-my-pi");
const { SessionManager } = await import(path.join(pkg, "pi-coding-agent/src/session/session-manager.ts"));
const { prepareEntryForPersistence } = await import(path.join(pkg, "pi-coding-agent/src/session/session-persistence.ts"));
const { BlobStore } = await import(path.join(pkg, "pi-coding-agent/src/session/blob-store.ts"));

// The private directory's path is replaced by this one in every file written,
// so that the fixtures name no machine's directories.
const FIXTURE_ROOT = "/fixture";
const portable = (text: string) => text.split(work).join(FIXTURE_ROOT);
const proj = path.join(work, "proj");
const proj2 = path.join(work, "proj2");
const extra = path.join(work, "extra");
for (const d of [proj, proj2, extra]) fs.mkdirSync(d, { recursive: true });
process.chdir(proj);

const usage = (total: number, input = 100) => ({
	input,
	output: 50,
	cacheRead: 0,
	cacheWrite: 0,
	totalTokens: input + 50,
	cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total },
});
const assistant = (text: string, u = usage(0)) => ({
	role: "assistant",
	content: [{ type: "text", text }],
	api: "x",
	provider: "p",
	model: "m",
	usage: u,
	stopReason: "stop",
	timestamp: 1,
});

function write(rel: string, text: string) {
	const file = path.join(outDir, rel);
	fs.mkdirSync(path.dirname(file), { recursive: true });
	fs.writeFileSync(file, portable(text));
}
const firstTwoLines = (file: string) => fs.readFileSync(file, "utf8").split("\n").slice(0, 2).join("\n") + "\n";

// ---------------------------------------------------------------- fork

/** Source sessions: made through the API, or written by hand. */
async function sources(): Promise<Record<string, string>> {
	const out: Record<string, string> = {};

	// A title set by the user and an additional directory.
	let sm = SessionManager.create(proj);
	sm.appendMessage({ role: "user", content: "first prompt", timestamp: 1 });
	sm.appendMessage(assistant("a"));
	await sm.setAdditionalDirectories([extra]);
	await sm.setSessionName("My Title", "user");
	await sm.flush();
	out.api = sm.getSessionFile();

	// A title too long for the title line (multi-byte characters), set
	// automatically.
	sm = SessionManager.create(proj);
	sm.appendMessage({ role: "user", content: "second prompt", timestamp: 1 });
	sm.appendMessage(assistant("b"));
	await sm.setSessionName(`Ünïcödé ${"😀é".repeat(60)} end`, "auto");
	await sm.flush();
	out.long = sm.getSessionFile();

	// No title line: title, source, directories and a prompt-cache key in
	// the header, with a member the agent does not know.
	const header = {
		type: "session",
		version: 3,
		id: "0000000a-0000-7000-8000-000000000001",
		title: "Hand title",
		titleSource: "auto",
		timestamp: "2026-03-01T10:00:00.000Z",
		cwd: proj,
		additionalDirectories: [extra, proj2],
		providerPromptCacheKey: "k-1",
		x: 1,
	};
	const entries = [
		{ type: "message", id: "a0000001", parentId: null, timestamp: "2026-03-01T10:00:01.000Z", message: { role: "user", content: "hi", timestamp: 1 } },
		{ type: "message", id: "a0000002", parentId: "a0000001", timestamp: "2026-03-01T10:00:02.000Z", message: assistant("c") },
	];
	const hand = path.join(work, "hand.jsonl");
	fs.writeFileSync(hand, [header, ...entries].map(e => JSON.stringify(e)).join("\n") + "\n");
	out.hand = hand;

	// A blank title line over a header with a title: no title.
	const blank = path.join(work, "blank.jsonl");
	const slot = JSON.stringify({ type: "title", v: 1, title: "", updatedAt: "2026-03-01T10:00:00.000Z", pad: "  " });
	fs.writeFileSync(blank, [slot, JSON.stringify({ ...header, id: "0000000a-0000-7000-8000-000000000002", title: "Old", titleSource: "user", providerPromptCacheKey: undefined, additionalDirectories: [] }), ...entries.map(e => JSON.stringify(e))].join("\n") + "\n");
	out.blank = blank;
	return out;
}

const srcs = await sources();
for (const [name, file] of Object.entries(srcs)) {
	write(`fork/${name}.source.jsonl`, fs.readFileSync(file, "utf8"));
	const leaf = (await SessionManager.open(file)).getLeafId();

	const forked = await (await SessionManager.open(file)).fork();
	write(`fork/${name}.fork.jsonl`, firstTwoLines(forked.newSessionFile));

	const branched = (await SessionManager.open(file)).createBranchedSession(leaf);
	write(`fork/${name}.branch.jsonl`, firstTwoLines(branched));

	const moved = await SessionManager.forkFrom(file, proj2);
	await moved.flush();
	write(`fork/${name}.fork_from.jsonl`, firstTwoLines(moved.getSessionFile()));
}

// ---------------------------------------------------------------- stats

{
	const sm = SessionManager.create(proj);
	sm.appendMessage({ role: "user", content: "do it", timestamp: 1 });
	const call = sm.appendMessage({
		...assistant("calling"),
		content: [{ type: "toolCall", id: "t1", name: "task", arguments: {} }],
		usage: usage(0.001),
		stopReason: "toolUse",
	});
	// A `task` result's details.usage counts; another tool's does not.
	sm.appendMessage({ role: "toolResult", toolCallId: "t1", toolName: "task", content: [{ type: "text", text: "done" }], details: { usage: usage(0.5, 1000) }, isError: false, timestamp: 1 });
	sm.appendMessage({ role: "toolResult", toolCallId: "t2", toolName: "bash", content: [{ type: "text", text: "ok" }], details: { usage: usage(7, 7000) }, isError: false, timestamp: 1 });
	// model_usage entries count, on any branch.
	sm.appendModelUsage({ purpose: "title", role: "smol", api: "x", provider: "p", model: "small", usage: usage(0.2, 10), stopReason: "stop" }, { sessionId: sm.getSessionId(), parentId: call });
	sm.appendMessage(assistant("end", usage(0.04, 20)));
	await sm.flush();
	const file = sm.getSessionFile();
	write("stats/session.jsonl", fs.readFileSync(file, "utf8"));
	const s = (await SessionManager.open(file)).getUsageStatistics();
	write("stats/expected.json", JSON.stringify(s, null, 2) + "\n");
}

// ---------------------------------------------------------------- sizes

{
	const image = Buffer.alloc(1500, "x").toString("base64");
	const inputs = [
		// partialJson stays; nothing changes, so lineCount stays as written.
		{ type: "custom", customType: "t", data: { content: "a\nb", lineCount: 99, partialJson: "{" } },
		// jsonlEvents goes, and lineCount is recomputed.
		{ type: "custom", customType: "t", data: { content: "a\nb", lineCount: 99, jsonlEvents: [1] } },
		// An image that becomes a blob keeps its other members, jsonlEvents
		// included.
		{ type: "custom", customType: "t", data: { content: [{ type: "image", data: image, mimeType: "image/png", jsonlEvents: [1] }] } },
		// ... and its replacement changes the object around it.
		{ type: "custom", customType: "t", data: { content: "a\nb\nc", lineCount: 1, images: [{ type: "image", data: image, mimeType: "image/png" }] } },
		{ type: "custom", customType: "t", data: { call: { type: "image_generation_call", result: image, jsonlEvents: [2] } } },
		// An image already a ref is entered like any object.
		{ type: "custom", customType: "t", data: { content: [{ type: "image", data: "blob:sha256:" + "0".repeat(64), mimeType: "image/png", jsonlEvents: [1] }] } },
	];
	const blobs = new BlobStore(path.join(work, "blobs"));
	write("sizes/inputs.jsonl", inputs.map(e => JSON.stringify(e)).join("\n") + "\n");
	write("sizes/expected.jsonl", inputs.map(e => JSON.stringify(prepareEntryForPersistence(e, blobs))).join("\n") + "\n");
}

// ---------------------------------------------------------------- typeless

{
	// Lines between two messages (b1 the parent of the second): what the
	// agent's loader makes an entry of, and the context at the leaf.
	const H = JSON.stringify({ type: "session", version: 3, id: "0000000b-0000-7000-8000-000000000001", timestamp: "2026-03-01T10:00:00.000Z", cwd: proj });
	const A = `{"type":"message","id":"a1","parentId":null,"timestamp":"2026-03-01T10:00:01.000Z","message":{"role":"user","content":"first","timestamp":1}}`;
	const C = `{"type":"message","id":"c1","parentId":"b1","timestamp":"2026-03-01T10:00:03.000Z","message":{"role":"user","content":"second","timestamp":2}}`;
	const middles: Record<string, string | null> = {
		"no-type": `{"id":"b1","parentId":"a1","timestamp":"2026-03-01T10:00:02.000Z","note":"no type"}`,
		"number-type": `{"type":5,"id":"b1","parentId":"a1","timestamp":"2026-03-01T10:00:02.000Z"}`,
		"null-type": `{"type":null,"id":"b1","parentId":"a1","timestamp":"2026-03-01T10:00:02.000Z"}`,
		"number-id": `{"type":"custom","id":7,"parentId":"a1","timestamp":"2026-03-01T10:00:02.000Z"}`,
		"no-id": `{"type":"custom","parentId":"a1","timestamp":"2026-03-01T10:00:02.000Z"}`,
		"array": `[1,2]`,
		// The typeless entry last: it is the leaf.
		"no-type-last": null,
	};
	const out: string[] = [];
	for (const [name, middle] of Object.entries(middles)) {
		const lines = middle === null ? [H, A, `{"id":"b1","parentId":"a1","timestamp":"2026-03-01T10:00:02.000Z"}`] : [H, A, middle, C];
		const file = path.join(work, `typeless-${name}.jsonl`);
		fs.writeFileSync(file, lines.join("\n") + "\n");
		write(`typeless/${name}.jsonl`, lines.join("\n") + "\n");
		const sm = await SessionManager.open(file);
		const messages = sm.buildSessionContext().messages.map((m: any) => m.content);
		out.push(JSON.stringify({ case: name, leaf: sm.getLeafId(), messages }));
	}
	write("typeless/expected.jsonl", out.join("\n") + "\n");
}

// ---------------------------------------------------------------- agent dir

{
	// Each case runs the reference's directory resolution in a process of
	// its own (it reads the environment when it loads) with only these
	// variables and HOME=/fixture/home; `dirs` exist under /fixture.
	const root = path.join(work, "dirs");
	const HOME = "/fixture/home";
	const cases: { env: Record<string, string>; dirs: string[] }[] = [
		{ env: {}, dirs: [] },
		{ env: { PI_CONFIG_DIR: ".cfg" }, dirs: [] },
		{ env: { PI_CONFIG_DIR: "/abs" }, dirs: [] },
		{ env: { PI_CODING_AGENT_DIR: "/fixture/a" }, dirs: [] },
		{ env: { XDG_DATA_HOME: "/fixture/d", XDG_STATE_HOME: "/fixture/s" }, dirs: [] },
		{ env: { XDG_DATA_HOME: "/fixture/d", XDG_STATE_HOME: "/fixture/s" }, dirs: ["d/omp"] },
		{ env: { XDG_DATA_HOME: "/fixture/d", XDG_STATE_HOME: "/fixture/s" }, dirs: ["d/omp", "s/omp"] },
		{ env: { XDG_DATA_HOME: "/fixture/d", PI_CODING_AGENT_DIR: "/fixture/a" }, dirs: ["d/omp"] },
		{ env: { XDG_DATA_HOME: "/fixture/d", PI_CODING_AGENT_DIR: `${HOME}/.omp/agent` }, dirs: ["d/omp"] },
		{ env: { OMP_PROFILE: "work", PI_CODING_AGENT_DIR: "/fixture/a", XDG_DATA_HOME: "/fixture/d" }, dirs: ["d/omp"] },
		{ env: { PI_PROFILE: "work", XDG_DATA_HOME: "/fixture/d" }, dirs: ["d/omp/profiles/work"] },
		{ env: { OMP_PROFILE: "", PI_PROFILE: "work", PI_CODING_AGENT_DIR: `${HOME}/.omp/profiles/work/agent` }, dirs: [] },
		{ env: { OMP_PROFILE: "", PI_PROFILE: "work", PI_CODING_AGENT_DIR: "/fixture/a" }, dirs: [] },
		{ env: { OMP_PROFILE: "default", PI_CODING_AGENT_DIR: "/fixture/a" }, dirs: [] },
		{ env: { OMP_PROFILE: "con", PI_CODING_AGENT_DIR: "/fixture/a" }, dirs: [] },
		{ env: { OMP_PROFILE: "com10" }, dirs: [] },
	];
	const probe = path.join(work, "probe.ts");
	fs.writeFileSync(
		probe,
		`const d = await import(${JSON.stringify(path.join(pkg, "pi-utils/src/dirs.ts"))});
console.log(JSON.stringify({ sessions: d.getSessionsDir(), blobs: d.getBlobsDir(), history: d.getHistoryDbPath(), terminal: d.getTerminalSessionsDir() }));
process.exit(0);
`,
	);
	// The paths are made under a real directory, then written as /fixture.
	const real = (p: string) => p.replace(/^\/fixture/, root);
	const out: string[] = [];
	for (const c of cases) {
		fs.rmSync(root, { recursive: true, force: true });
		for (const d of c.dirs) fs.mkdirSync(path.join(root, d), { recursive: true });
		const env: Record<string, string> = { PATH: process.env.PATH ?? "", HOME: real(HOME) };
		for (const [k, v] of Object.entries(c.env)) env[k] = real(v);
		const r = Bun.spawnSync([process.execPath, probe], { env, cwd: work });
		const got = JSON.parse(r.stdout.toString());
		for (const k of Object.keys(got)) got[k] = got[k].split(root).join("/fixture");
		out.push(JSON.stringify({ env: c.env, dirs: c.dirs, ...got }));
	}
	write("agent-dir.jsonl", out.join("\n") + "\n");
}

fs.rmSync(work, { recursive: true, force: true });
process.exit(0);
