// Writes the baseline that pins sessionfs's timestamp parser and formatter
// (src/session/time.rs) to JavaScript's: for every input string of
// fixtures/date-parse/inputs.json what `Date.parse` gives, and for every
// result (and every extra number under "format") what `toISOString` gives.
// docs/development.md ("Fixtures") says how to run it; docs/engine.md
// ("Timestamps") says which of these answers sessionfs follows.
//
//   node scripts/date_baseline.mjs fixtures/date-parse/inputs.json > fixtures/date-parse/baseline.jsonl
//
// Runs under Node (the baseline's oracle) and under Bun (the agent's
// runtime); `--compare FILE` checks that this runtime gives what FILE says
// instead of writing, so the two can be held against each other.
//
// Every row is one JSON object:
//   {"group", "input", "ms": number|null, "local": bool, "iso": string|null}
//   {"group": "format", "ms": number, "iso": string}
// `ms` is Date.parse in UTC; `local` says the answer changes with the time
// zone (JavaScript reads the string in the local zone); `iso` is
// new Date(ms).toISOString().

import { readFileSync } from "node:fs";

// A zone far from UTC with a half-hour part and no daylight saving time, so
// that any zone-dependent answer shows.
const OTHER_ZONE = "Asia/Kolkata";

function setZone(zone, offsetMinutes) {
	process.env.TZ = zone;
	const got = new Date(Date.UTC(2026, 0, 1)).getTimezoneOffset();
	if (got !== offsetMinutes) {
		throw new Error(`cannot switch the time zone to ${zone}: offset ${got}, want ${offsetMinutes}`);
	}
}

function parse(input) {
	const ms = Date.parse(input);
	return Number.isNaN(ms) ? null : ms;
}

function rows(inputs) {
	const out = [];
	for (const group of inputs.groups) {
		for (const input of group.inputs) {
			setZone("UTC", 0);
			const ms = parse(input);
			const iso = ms === null ? null : new Date(ms).toISOString();
			setZone(OTHER_ZONE, -330);
			const local = parse(input) !== ms;
			out.push({ group: group.name, input, ms, local, iso });
		}
	}
	setZone("UTC", 0);
	for (const ms of inputs.format) {
		out.push({ group: "format", ms, iso: new Date(ms).toISOString() });
	}
	return out;
}

const [inputsPath, flag, comparePath] = process.argv.slice(2);
if (!inputsPath || (flag !== undefined && (flag !== "--compare" || !comparePath))) {
	console.error("usage: date_baseline.mjs INPUTS.json [--compare BASELINE.jsonl]");
	process.exit(2);
}
const made = rows(JSON.parse(readFileSync(inputsPath, "utf8"))).map(r => JSON.stringify(r));
if (flag === "--compare") {
	const want = readFileSync(comparePath, "utf8").split("\n").filter(l => l !== "");
	let differ = 0;
	for (let i = 0; i < Math.max(want.length, made.length); i++) {
		if (want[i] !== made[i]) {
			differ++;
			console.log(`- ${want[i]}\n+ ${made[i]}`);
		}
	}
	console.log(`${made.length} rows, ${differ} differ`);
	process.exit(differ === 0 ? 0 : 1);
}
process.stdout.write(made.map(l => `${l}\n`).join(""));
