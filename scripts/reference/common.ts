// Shared by the scripts in this folder: a private agent directory for the
// reference engine, the random numbers the generators draw, and a context
// as sessionfs prints it.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

/** A private agent directory for the reference engine, so that it reads
 * and writes nothing of the machine's own agent (breadcrumbs, settings,
 * blobs). Call it before the reference's modules are imported: they read
 * these variables when they load.
 *
 * Makes a fresh temporary directory and points HOME, the agent directory
 * and the XDG directories into it; gives its path. */
export function privateAgentDir(prefix: string): string {
	const work = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
	process.env.HOME = work;
	process.env.PI_CODING_AGENT_DIR = path.join(work, "agent");
	process.env.XDG_DATA_HOME = path.join(work, "data");
	process.env.XDG_CONFIG_HOME = path.join(work, "config");
	process.env.XDG_STATE_HOME = path.join(work, "state");
	process.env.XDG_CACHE_HOME = path.join(work, "cache");
	return work;
}

/** A seeded generator of numbers in [0, 1) (mulberry32): the same seed
 * gives the same sessions on every run. */
export function mulberry32(seed: number): () => number {
	return () => {
		seed |= 0;
		seed = (seed + 0x6d2b79f5) | 0;
		let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
		t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
}

/** The reference's context at the session's leaf, serialised as
 * `sessionfs context --compact` prints it (the same members in the same
 * order). */
export function contextJson(sm: any): string {
	const c = sm.buildSessionContext();
	return JSON.stringify({
		messages: c.messages,
		thinkingLevel: c.thinkingLevel,
		models: c.models,
		injectedTtsrRules: c.injectedTtsrRules,
		mode: c.mode,
		modeData: c.modeData,
	});
}
