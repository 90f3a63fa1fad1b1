// Shared by the scripts in this folder: a private agent directory for the
// reference engine, so that it reads and writes nothing of the machine's
// own agent (breadcrumbs, settings, blobs). Call it before the reference's
// modules are imported: they read these variables when they load.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

/** Makes a fresh temporary directory and points HOME, the agent directory
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
