// Interop check between the reference's SQL session storage and sessionfs
// (docs/team.md), optional and never run by the tests:
//
//   bun scripts/pg-interop.ts REF_DIR POSTGRES_URL [SESSIONFS]
//
// REF_DIR holds `node_modules/@oh-my-pi/pi-coding-agent` (an
// `npm install @oh-my-pi/pi-coding-agent` outside this repository);
// POSTGRES_URL is a connection URL Bun's SQL client accepts (TCP, e.g.
// postgres://postgres@127.0.0.1:5432/postgres); SESSIONFS is the binary
// (default target/release/sessionfs). The reference writes a session to a
// fresh table through Bun's SQL client; sessionfs must read the same
// entries and append one; a fresh reference storage must read that entry
// back with the leaf on it. Exits 0 when all of it holds.
import { SQL } from "bun";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

const [refDir, url, bin = "target/release/sessionfs"] = process.argv.slice(2);
if (!refDir || !url) {
	console.error("usage: bun scripts/pg-interop.ts REF_DIR POSTGRES_URL [SESSIONFS]");
	process.exit(2);
}
const src = path.resolve(refDir, "node_modules/@oh-my-pi/pi-coding-agent/src/session");
const { SqlSessionStorage } = await import(`${src}/sql-session-storage.ts`);
const { SessionManager } = await import(`${src}/session-manager.ts`);

function fail(msg: string): never {
	console.error(`pg-interop: FAILED: ${msg}`);
	process.exit(1);
}

const table = `interop_${process.pid}_${Date.now()}`;
const client = new SQL(url);
const agentDir = fs.mkdtempSync(path.join(os.tmpdir(), "sessionfs-interop-"));
const sessionDir = path.join(agentDir, "sessions", "--interop--");

// 1. The reference writes.
const storage = await SqlSessionStorage.create({ client, table, adapter: "postgres" });
const sm = SessionManager.create("/interop", sessionDir, storage);
const now = Date.now();
sm.appendMessage({ role: "user", content: "hello from the reference ✓", timestamp: now });
sm.appendMessage({
	role: "assistant",
	content: [{ type: "text", text: "hi" }],
	api: "x",
	provider: "p",
	model: "m",
	usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
	stopReason: "stop",
	timestamp: now + 1,
});
await sm.flush();
const file = sm.getSessionFile();
if (!file) fail("the reference wrote no session file");
const refIds = sm.getEntries().map((e: { id: string }) => e.id);

// 2. sessionfs reads the same entries and appends one.
const sfsUrl = `${url}${url.includes("?") ? "&" : "?"}table=${table}`;
const common = ["--storage", sfsUrl];
const tree = Bun.spawnSync([bin, ...common, "tree", "--agent-dir", agentDir, file]);
if (tree.exitCode !== 0) fail(`sessionfs tree: ${tree.stderr.toString()}`);
const treeText = tree.stdout.toString();
for (const id of refIds) if (!treeText.includes(id)) fail(`sessionfs does not show entry ${id}:\n${treeText}`);
const appended = Bun.spawnSync([bin, ...common, "append", "--agent-dir", agentDir, file], {
	stdin: new TextEncoder().encode(
		`${JSON.stringify({ type: "message", message: { role: "user", content: "hello from sessionfs", timestamp: now + 2 } })}\n`,
	),
});
if (appended.exitCode !== 0) fail(`sessionfs append: ${appended.stderr.toString()}`);
const newId = appended.stdout.toString().trim();

// 3. A fresh reference storage reads it back.
const storage2 = await SqlSessionStorage.create({ client, table, adapter: "postgres" });
const again = await SessionManager.open(file, sessionDir, storage2);
const ids = again.getEntries().map((e: { id: string }) => e.id);
if (!ids.includes(newId)) fail(`the reference does not read back ${newId}: ${ids.join(",")}`);
const leaf = again.getBranch().at(-1);
if (leaf?.id !== newId) fail(`the reference's leaf is ${leaf?.id}, not ${newId}`);
for (const id of refIds) if (!ids.includes(id)) fail(`entry ${id} was lost`);

await client.unsafe(`DROP TABLE IF EXISTS ${table}, ${table}_blobs`);
await client.end();
fs.rmSync(agentDir, { recursive: true, force: true });
console.log(`pg-interop: ok (${ids.length} entries; sessionfs appended ${newId}, the reference read it back)`);
