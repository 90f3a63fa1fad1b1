// Interop check of the lockfile protocol (docs/engine.md, "Locks") against
// the published reference engine. Not needed by the tests.
//
// Usage:
//   REF_NODE_MODULES=<dir holding @oh-my-pi/pi-coding-agent> \
//   SESSIONFS=<path to the sessionfs binary> \
//   bun scripts/ref_lock_interop.ts [seconds]
//
// For the given time (default 3 s) it runs, on one session file:
//   - the reference's FileSessionStorage appending lines through its writer
//     (which takes the publish lock: lockfile + OS gate),
//   - the reference rewriting the whole file with writeTextSync and an
//     expectedSize (its compaction/rewrite path, a check-then-rename under
//     the lock),
//   - `sessionfs append` in a loop (our lockfile + flock around each line).
// Afterwards every line either side acknowledged must be in the file once.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

const modules = process.env.REF_NODE_MODULES;
const sessionfs = process.env.SESSIONFS;
if (!modules || !sessionfs) {
	console.error("set REF_NODE_MODULES and SESSIONFS");
	process.exit(2);
}
const seconds = Number(process.argv[2] ?? "3");
const storageModule = await import(
	path.join(modules, "@oh-my-pi/pi-coding-agent/src/session/session-storage.ts")
);
const storage = new storageModule.FileSessionStorage();

const root = fs.mkdtempSync(path.join(os.tmpdir(), "sessionfs-interop-"));
const dir = path.join(root, "sessions", "--work-interop--");
fs.mkdirSync(dir, { recursive: true });
const file = path.join(dir, "2026-03-01T10-00-00-000Z_1111222211112222.jsonl");
fs.writeFileSync(
	file,
	`${JSON.stringify({ type: "session", version: 3, id: "1111222211112222", timestamp: "2026-03-01T10:00:00.000Z", cwd: "/work/interop" })}\n` +
		`${JSON.stringify({ type: "message", id: "u1", parentId: null, timestamp: "2026-03-01T10:00:01.000Z", message: { role: "user", content: "q" } })}\n`,
);

const acked = new Set<string>();
const deadline = Date.now() + seconds * 1000;

// Our appender: a child process loop, so it runs beside this one.
const ours = Bun.spawn(
	[
		"sh",
		"-c",
		`i=0; while [ $(date +%s%3N) -lt ${deadline} ]; do
		   if printf '{"type":"custom","customType":"ours-%d"}\\n' $i | "$SESSIONFS" append "$FILE" --agent-dir "$ROOT" >/dev/null 2>&1; then echo "ours-$i"; fi
		   i=$((i+1)); done`,
	],
	{ env: { ...process.env, SESSIONFS: sessionfs, FILE: file, ROOT: root }, stdout: "pipe" },
);

const writer = storage.openWriter(file);
let n = 0;
let rewrites = 0;
let conflicts = 0;
while (Date.now() < deadline) {
	const marker = `ref-${n}`;
	try {
		writer.appendSync(
			`${JSON.stringify({ type: "custom", id: `r${String(n).padStart(7, "0")}`, parentId: "u1", timestamp: "2026-03-01T10:00:02.000Z", customType: marker })}\n`,
		);
		acked.add(marker);
	} catch (err) {
		console.error(`reference append failed: ${err}`);
	}
	n++;
	if (n % 10 === 0) {
		// A rewrite of the whole file, as the reference does: read, then
		// publish with the size it read; a line appended in between must
		// make it fail, never be erased.
		const content = fs.readFileSync(file, "utf8");
		try {
			storage.writeTextSync(file, content, { expectedSize: Buffer.byteLength(content) });
			rewrites++;
		} catch (err) {
			if (String(err).includes("changed before rewrite") || String(err).includes("publish lock")) conflicts++;
			else throw err;
		}
	}
	await Bun.sleep(2);
}
await writer.close();
const out = await new Response(ours.stdout).text();
await ours.exited;
for (const line of out.split("\n")) if (line) acked.add(line);

const text = fs.readFileSync(file, "utf8");
const counts = new Map<string, number>();
for (const line of text.split("\n")) {
	if (!line) continue;
	const v = JSON.parse(line);
	if (v.customType) counts.set(v.customType, (counts.get(v.customType) ?? 0) + 1);
}
let lost = 0;
for (const a of acked) {
	if (counts.get(a) !== 1) {
		console.error(`${a}: ${counts.get(a) ?? 0} times`);
		lost++;
	}
}
const oursCount = [...acked].filter(a => a.startsWith("ours-")).length;
console.log(
	`acknowledged: ${acked.size} (ours ${oursCount}, reference ${acked.size - oursCount}); ` +
		`reference rewrites ${rewrites}, refused ${conflicts}; lost or doubled: ${lost}`,
);
fs.rmSync(root, { recursive: true, force: true });
process.exit(lost === 0 && oursCount > 0 ? 0 : 1);
