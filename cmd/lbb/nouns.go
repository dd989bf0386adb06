package main

import lbb "github.com/littlebigbrain/lbb/sdk/go"

// The nouns of lbb: what each verb takes and does, for the help and the dispatch (cli.go).
// The verbs are in the noun's own file (sandbox.go, commands.go, files.go, templates.go,
// keys.go).
func init() {
	commands["sandbox"] = command{
		summary: "Long-lived sandboxes: create one, run commands in it, stop, resume, pause, fork",
		aliases: []string{"sandboxes"},
		footer:  "Every verb takes --url, --api-key, --graph and --json.",
		verbs: []verb{
			{name: "create", aliases: []string{"new"}, run: sandboxCreate,
				args: "[--template T | --base B] [--isolation ns|gvisor] [--expires S] [--memory-mib N] [--cpus N] [--env NAME=VALUE]... [--label KEY=VALUE]...\n[--egress none|allowlist|public] [--allow HOST[:PORT]]... [--egress-quota SIZE] [--grant-scopes S,…] [--grant-max-runs N]\n[--git URL [--git-branch B] [--git-depth N]]",
				help: "starts a sandbox and prints its id"},
			{name: "list", aliases: []string{"ls"}, run: sandboxList,
				args: "[--all | --status S[,S…]] [--label KEY=VALUE]... [--limit N]",
				help: "the live sandboxes (starting, running, paused, stopped), newest first;\n--all adds the ended ones (destroyed, failed: one-call runs' among them)"},
			{name: "get", aliases: []string{"show"}, args: "ID", help: "one sandbox", run: sandboxDo((*lbb.SandboxesService).Get)},
			{name: "exec", run: sandboxExec,
				args: "ID [--cwd DIR] [--env NAME=VALUE]... [--timeout-ms N] [-i] [--detach] -- ARGV...  (or ID 'SHELL LINE')",
				help: `runs ARGV (or the line, with bash -lc, as the SDKs' commands.run) in the sandbox,
streams every byte of its output from the first (a slow reader, a full pipe, slows the
command; nothing is dropped) and exits with its exit code; -i sends this terminal's stdin to
it; --detach prints the command id and returns. A command that runs past its timeout: lbb
says "timed out after N ms" and exits 124. Output that did not come (this process stopped
reading for minutes, and the server let go): lbb says how many bytes and exits 125. An
error of lbb or the server exits 1, a usage error 2.`},
			{name: "shell", run: sandboxShell,
				args: "ID [--cwd DIR] [--env NAME=VALUE]... [--attach TERMINAL] [-- ARGV...] | --new [--isolation I] [--base B] [-- ARGV...]",
				help: `opens a terminal in the sandbox (a login shell, or ARGV) and connects this one to it:
raw mode, its size followed, and the shell's exit code as lbb's (Ctrl-D or exit ends it).
A dropped connection leaves the terminal running for the server's --terminal-grace (2m by
default): --attach TERMINAL (its
command id) takes it up again. --new creates a sandbox for the session and deletes it after.`},
			{name: "url", args: "ID PORT [--expires 1h]", run: sandboxURL,
				help: `prints a signed URL of PORT in the sandbox (a preview), valid for --expires: what
listens there (on 127.0.0.1 or 0.0.0.0) answers it, HTTP and WebSocket alike, in a browser or
with curl; ports are private otherwise. Anyone with the URL reaches the port until it expires.`},
			{name: "stop", args: "ID", help: "its processes end, its disk stays", run: sandboxDo((*lbb.SandboxesService).Stop)},
			{name: "resume", args: "ID", help: "starts again with the same workspace (a paused one: where it was)", run: sandboxDo((*lbb.SandboxesService).Resume)},
			{name: "pause", args: "ID", help: "parks it: gvisor saves its memory to disk, ns freezes it in RAM", run: sandboxDo((*lbb.SandboxesService).Pause)},
			{name: "snapshot", args: "ID [--label KEY=VALUE]...", help: "a memory snapshot (gvisor); it runs on; prints the snapshot's id", run: sandboxSnapshot},
			{name: "fork", args: "ID [--snapshot SNP] [--expires S] [--env NAME=VALUE]... [--label KEY=VALUE]...",
				help: "a new sandbox from a snapshot of ID (a fresh one without --snapshot); prints its id", run: sandboxFork},
			{name: "snapshots", args: "ID [--limit N] | --delete SNP", help: "lists ID's snapshots; --delete SNP deletes one", run: sandboxSnapshotList},
			{name: "delete", aliases: []string{"rm"}, args: "ID", help: "destroys it (the record stays)", run: sandboxDo((*lbb.SandboxesService).Delete)},
			{name: "bench", args: "[--serve] [--n N] [--file-mib N]", help: "exec round trip, run, create/stop/resume and file throughput", run: sandboxBenchVerb},
		},
	}
	commands["commands"] = command{
		summary: "Command records and their output",
		aliases: []string{"command"},
		footer:  "Every verb takes --url, --api-key, --graph and --json.",
		verbs: []verb{
			{name: "get", aliases: []string{"show"}, args: "ID [--wait-ms N]",
				help: "a command record (waiting up to N ms for it to end)", run: commandsGet},
			{name: "list", aliases: []string{"ls"}, args: "[--limit N] [--sandbox ID] [--status S]",
				help: "the newest command records", run: commandsList},
			{name: "logs", args: "ID [-f] [--stream stdout|stderr|both]",
				help: "its output (-f: follow it live until it ends, then exit as lbb sandbox exec does:\nwith its exit code, 124 when it timed out)", run: commandsLogs},
			{name: "kill", args: "ID [--signal SIG]",
				help: "signal its process group (default SIGKILL)", run: commandsKill},
		},
	}
	commands["files"] = command{
		summary: "Workspace files, and Files of the graph (content-addressed; they outlive sandboxes)",
		aliases: []string{"file"},
		footer: `Paths are relative to /workspace, or absolute inside it. Every verb takes --url,
--api-key, --graph and --json; transfers show progress on a terminal.`,
		verbs: []verb{
			{name: "put", args: "SANDBOX LOCAL [PATH]", help: "write a workspace file (LOCAL - is stdin; PATH defaults to LOCAL's name)", run: filesCall(2, 3, filesPut)},
			{name: "get", args: "SANDBOX PATH [LOCAL]", help: "read a workspace file (to stdout without LOCAL, or LOCAL -)", run: filesCall(2, 3, filesGet)},
			{name: "ls", args: "SANDBOX [PATH] [-r]", help: "list a workspace directory (-r: everything beneath it)", run: filesLs},
			{name: "rm", args: "SANDBOX PATH", help: "remove a file or a directory with what it holds", run: filesCall(2, 2, filesRm)},
			{name: "mkdir", args: "SANDBOX PATH", help: "make a directory and its parents", run: filesCall(2, 2, filesMkdir)},
			{name: "keep", args: "SANDBOX PATH", help: "keep a workspace file as a File of the graph (its origin recorded)", run: filesCall(2, 2, filesKeep)},
			{name: "upload", args: "LOCAL [--name NAME]", help: "upload a File of the graph", run: filesUpload},
			{name: "list", args: "[--limit N]", help: "the graph's Files", run: filesList},
			{name: "download", args: "FILE_ID [LOCAL]", help: "a File's bytes (to stdout without LOCAL)", run: filesCall(1, 2, filesDownload)},
			{name: "import", args: "SANDBOX PATH SHA256", help: "copy a File of the graph into a workspace", run: filesCall(3, 3, filesImport)},
			{name: "delete", args: "FILE_ID", help: "delete a File of the graph (its bytes go with the last File that names them;\nworkspaces that imported it keep their copies)", run: filesCall(1, 1, filesDelete)},
		},
	}
	commands["templates"] = command{
		summary: "Templates: saved code, base, limits and config that runs start from",
		aliases: []string{"template"},
		footer:  "Every verb takes --url, --api-key, --graph and --json.",
		verbs: []verb{
			{name: "create", aliases: []string{"save"}, run: templatesCreate,
				args: "NAME [--file FILE] [--base B] [--config JSON] [--memory-mib N] [--timeout-ms N] [--isolation ns|gvisor] [--egress MODE] [--allow HOST]... [--egress-quota SIZE] [--apt PKG]... [--pip PKG]... [--npm PKG]... [--run CMD]... [--copy LOCAL:/PATH]... [--no-wait]",
				help: "save a new version of NAME (each save is a new version); --apt, --pip, --npm, --run and --copy\nbuild an image layer the version carries, shown live"},
			{name: "build", args: "NAME[@N] [--follow]", help: "the build of a version's image: status, failed step, resolved packages, log", run: templatesBuild},
			{name: "list", aliases: []string{"ls"}, args: "", help: "the graph's templates (newest versions) and the bases", run: templatesList},
			{name: "show", aliases: []string{"get"}, args: "NAME[@N]", help: "one version (newest by default) and the history", run: templatesShow},
		},
	}
	commands["keys"] = command{
		summary: "API keys (an admin key's work)",
		aliases: []string{"key"},
		footer: `Keys talk to the server (admin scope). Graphs a new key names are created. Scopes:
sandboxes:read, sandboxes:write, sandboxes:delete, templates:write, files:read, files:write,
admin; the default is every scope but admin. Every verb takes --url, --api-key and --json.`,
		verbs: []verb{
			{name: "create", aliases: []string{"new"}, args: "[--name N] [--for-graph G]... [--scope S]...",
				help: "make a key; its secret is printed once", run: keysCreate},
			{name: "list", aliases: []string{"ls"}, args: "", help: "every key (never their secrets)", run: keysList},
			{name: "revoke", aliases: []string{"delete", "rm"}, args: "ID", help: "revoke a key at once", run: keysRevoke},
		},
	}
}
