// Generated from internal/api/openapi.json by scripts/openapi-types.mjs (openapi-typescript); do not edit.

export type paths = Record<string, never>;
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        Error: {
            error: {
                /** @description stable code: invalid_request, idempotency_key_required, idempotency_key_reused, limit_exceeded, isolation_unavailable, not_found, unauthorized, forbidden, payload_too_large, too_many_sandboxes, too_many_runs, quota_exceeded, quota_bytes_exceeded, file_in_use, unknown_size, session_busy, session_mismatch, unavailable, method_not_allowed, internal */
                code: string;
                message: string;
                request_id: string;
            };
        };
        /** @description Zero or absent fields take the server's defaults; each is checked against the server's caps (400 limit_exceeded). */
        Limits: {
            memory_mib?: number;
            cpus?: number;
            pids?: number;
            disk_mib?: number;
        };
        /** @description The head and tail of one output stream and its size in bytes. Head and tail never repeat a byte: the tail is the end of the stream, the head the start before it (empty when the stream fits the tail), so head + tail is the whole stream unless truncated. Env values passed in are masked (***). */
        Output: {
            head: string;
            tail: string;
            bytes: number;
            expired?: boolean;
            /** @description true when head and tail do not hold the whole stream */
            truncated?: boolean;
            /** @description how many bytes of the stream head and tail do not hold (between them, or all of it when expired) */
            dropped_bytes?: number;
        };
        Usage: {
            /** @description CPU time used */
            vcpu_ms: number;
            /** @description memory reserved (limit) over the sandbox's life */
            gib_ms: number;
            egress?: components["schemas"]["EgressUsage"];
            /** @description at the server's prices; absent when it sets none */
            cost?: number;
        };
        TemplateRef: {
            id: string;
            name: string;
            version: number;
        };
        /** @description who and what made a record: the key and, with a grant (POST /v1/grants), the grant and the workflow step it is for */
        Origin: {
            key?: string;
            workflow?: string;
            run?: string;
            step?: string;
            /** @description the attempt of the workflow step */
            attempt?: string;
            /** @description the grant the call was made with (key is then the key that minted it) */
            grant?: string;
        };
        /** @description One call of run(input, config): code or template. */
        RunBody: {
            /** @description python: defines run(input, config); node: a top-level or exported run; shell: a script reading $LBB_INPUT and writing $LBB_RESULT */
            code?: string;
            /** @description a plain program of its language (python3 -c, node -e, bash -c), run once in a fresh sandbox that ends with it; the answer's exit_code, stdout, stderr and duration_ms are its outcome, and a non-zero exit is an answer (ok false), not an error. Give it alone: no code, template, input or config. */
            script?: string;
            /** @description a saved template: name (newest version), name@N (pinned), or a base name */
            template?: string;
            /** @description any JSON value */
            input?: unknown;
            /** @description merged over the template's config, objects key by key */
            config?: unknown;
            /** @enum {string} */
            base?: "lbb/python" | "lbb/node" | "lbb/shell" | "lbb/code-interpreter";
            /**
             * @description shorthand for base
             * @enum {string}
             */
            language?: "python" | "node" | "shell";
            /** @description values reach the code, are never stored, and are masked in output */
            env?: {
                [key: string]: string;
            };
            /** @description isolation to run on ("ns", "gvisor"); the call wins over the template version, which wins over the server default. Unknown: 400 invalid_request; known but not available on this server: 400 isolation_unavailable */
            isolation?: string;
            egress?: components["schemas"]["Egress"];
        };
        /** @description With run: a Level 1 one-call run (Idempotency-Key required). Without: a long-lived sandbox (Level 3) from template or base, with limits, expires_in_seconds (default and cap are the server's), env (given to every command; values masked in output, never stored) and metadata labels. */
        CreateSandboxRequest: {
            run?: components["schemas"]["RunBody"];
            template?: string;
            base?: string;
            limits?: components["schemas"]["Limits"];
            /** @description isolation to run on ("ns", "gvisor"); the call wins over the template version, which wins over the server default. Unknown: 400 invalid_request; known but not available on this server: 400 isolation_unavailable. For a one-call run also accepted here beside limits (run.isolation, when given too, must be the same) */
            isolation?: string;
            /** @description command timeout (default and cap are the server's) */
            timeout_ms?: number;
            /** @description how long to wait before answering 202 with the running command (default: the run's timeout and 30 s more; capped by the server); not part of the idempotency hash */
            wait_ms?: number;
            env?: {
                [key: string]: string;
            };
            metadata?: {
                [key: string]: string;
            };
            origin?: {
                workflow?: string;
                run?: string;
                step?: string;
            };
            expires_in_seconds?: number;
            /** @description the route out; the call wins over the template version. For a one-call run also accepted as run.egress */
            egress?: components["schemas"]["Egress"];
            api?: components["schemas"]["APIGrantRequest"];
            git?: components["schemas"]["GitClone"];
            /** @description a long-lived sandbox's name, unique in the graph among the sandboxes that have not ended: the first call creates the sandbox (201); later calls answer it (200) running, resumed when it was stopped or paused (its workspace restored from its archive when its host's copy is gone), and ignore the rest of the body, except that a size, isolation or base given must be the sandbox's (409 session_mismatch). A deleted sandbox frees the name. 409 session_busy while another call stops, pauses or starts it. Not with run */
            session?: string;
            /**
             * @description a named preset of limits (vCPU, memory, disk): standard-1 1/1 GiB/2 GiB, standard-2 1/2 GiB/4 GiB, standard-3 2/4 GiB/6 GiB, standard-4 2/6 GiB/8 GiB, standard-5 4/8 GiB/10 GiB; small, standard and large are standard-2, -3 and -4. limits given too override it field by field; it overrides the template's. Unknown: 400 unknown_size
             * @enum {string}
             */
            size?: "standard-1" | "standard-2" | "standard-3" | "standard-4" | "standard-5" | "small" | "standard" | "large";
        };
        RunResult: {
            ok: boolean;
            /** @description the JSON value run returned; null when it did not */
            result: unknown;
            /** @description the result was larger than the server's --max-result-bytes: result is null and result_file holds it */
            result_truncated?: boolean;
            /** @description with result_truncated: the result's size in bytes */
            result_bytes?: number;
            /** @description with result_truncated: the File of the graph (fil_…) that holds the result (GET /v1/files/{id}/content); absent when the graph's Files quotas had no room for it (error says so) */
            result_file?: string;
            error?: string;
            command: string;
            sandbox: string;
            /** @enum {string} */
            status: "queued" | "running" | "succeeded" | "failed" | "timed_out" | "killed" | "lost" | "oom" | "disk_full" | "budget_exceeded";
            exit_code: number | null;
            signal?: string;
            duration_ms: number;
            stdout: components["schemas"]["Output"];
            stderr: components["schemas"]["Output"];
            base: string;
            template?: components["schemas"]["TemplateRef"];
            limits: components["schemas"]["Limits"];
            /** @description the isolation the run ran on ("ns", "gvisor") */
            isolation?: string;
            timeout_ms: number;
            usage: components["schemas"]["Usage"];
            /** Format: date-time */
            created_at: string;
            /** Format: date-time */
            started_at?: string;
            /** Format: date-time */
            finished_at?: string;
            egress?: components["schemas"]["Egress"];
            origin?: components["schemas"]["Origin"];
            budget?: components["schemas"]["BudgetLeft"];
        };
        /** @description a stopped sandbox's disk, archived (zstd, data extents only) to the blob store at its stop; present only while it is stopped. Resume restores it where the host's own copy is gone */
        WorkspaceArchive: {
            /** @description the archive blob's SHA-256, checked when it is read */
            sha256: string;
            /** @description the archive's size */
            bytes: number;
            /** @description the size of the disk it holds (its workspace quota) */
            disk_bytes: number;
            /** Format: date-time */
            archived_at: string;
        };
        Sandbox: {
            id: string;
            graph: string;
            /** @enum {string} */
            status: "starting" | "running" | "paused" | "stopped" | "destroyed" | "failed";
            one_call: boolean;
            base: string;
            image?: string;
            template?: components["schemas"]["TemplateRef"];
            limits: components["schemas"]["Limits"];
            /** @description the isolation the sandbox runs on ("ns", "gvisor"), resolved from the call, its template version and the server default */
            isolation?: string;
            /** @description the host it was placed on, when the server runs sandboxes on several host agents (GET /v1/hosts); absent with one */
            host?: string;
            env_names?: string[];
            metadata?: {
                [key: string]: string;
            };
            origin: components["schemas"]["Origin"];
            /** Format: date-time */
            created_at: string;
            /** Format: date-time */
            started_at?: string;
            /** Format: date-time */
            ended_at?: string;
            /** Format: date-time */
            expires_at?: string;
            /**
             * @description why the sandbox ended, or (status stopped) why it stopped: stopped (a stop call), server_shutdown, server_restart (a crash or restart; resume brings the workspace back), failed (its init died); egress_quota_exceeded (a one-call run that failed after its egress reached its quota); budget_exceeded (a one-call run stopped when its budget ran out); host_lost (the host it ran on, of several, stopped answering or restarted: its commands are lost, never run again)
             * @enum {string}
             */
            end_reason?: "run_finished" | "deleted" | "expired" | "stopped" | "server_shutdown" | "server_restart" | "lost" | "failed" | "egress_quota_exceeded" | "budget_exceeded" | "host_lost";
            error?: string;
            usage: components["schemas"]["Usage"];
            /**
             * Format: date-time
             * @description when the sandbox was paused; only while it is
             */
            paused_at?: string;
            /** @description the size of its checkpoint on disk while it is paused with one (gvisor) */
            checkpoint_bytes?: number;
            forked_from?: components["schemas"]["ForkedFrom"];
            egress?: components["schemas"]["Egress"];
            api?: components["schemas"]["APIGrant"];
            git?: components["schemas"]["GitClone"];
            /**
             * @description how it is paused, only while it is: checkpoint (saved to disk with its memory, RAM freed, paused across a server restart: gvisor and microvm with no command running) or freeze (its processes parked in RAM, commands and their streams included; a server restart stops it: ns, and any sandbox paused with commands running)
             * @enum {string}
             */
            pause_mode?: "checkpoint" | "freeze";
            /** @description the template layer the sandbox runs on over its image */
            layer?: string;
            /** @description the caller's name for it (CreateSandboxRequest.session) */
            session?: string;
            /** @description the named size its limits came from (standard-1 … standard-5; an alias is recorded as its size) */
            size?: string;
            workspace?: components["schemas"]["WorkspaceArchive"];
            /** @description a sandbox paused with its memory: its checkpoint archived to the blob store (disk_bytes: the checkpoint's bytes on disk), so that resume works on a host without it; present only while it is paused */
            checkpoint?: components["schemas"]["WorkspaceArchive"];
        };
        /** @description Env values and stdin are never stored: only env names and stdin size. */
        Command: {
            id: string;
            graph: string;
            sandbox: string;
            /** @enum {string} */
            kind: "run" | "process" | "terminal" | "code" | "script";
            argv?: string[];
            cwd?: string;
            stdin_bytes?: number;
            language?: string;
            code?: string;
            /** @description any JSON value */
            input?: unknown;
            /** @description any JSON value */
            config?: unknown;
            template?: components["schemas"]["TemplateRef"];
            env_names?: string[];
            timeout_ms: number;
            /** @enum {string} */
            status: "queued" | "running" | "succeeded" | "failed" | "timed_out" | "killed" | "lost" | "oom" | "disk_full" | "budget_exceeded";
            ok: boolean;
            /** @description any JSON value */
            result?: unknown;
            /** @description the result was larger than the server's --max-result-bytes: result is null and result_file holds it */
            result_truncated?: boolean;
            /** @description with result_truncated: the result's size in bytes */
            result_bytes?: number;
            /** @description with result_truncated: the File of the graph (fil_…) that holds the result (GET /v1/files/{id}/content); absent when the graph's Files quotas had no room for it (error says so) */
            result_file?: string;
            error?: string;
            exit_code: number | null;
            signal?: string;
            stdout: components["schemas"]["Output"];
            stderr: components["schemas"]["Output"];
            idempotency_key?: string;
            origin: components["schemas"]["Origin"];
            /** Format: date-time */
            created_at: string;
            /** Format: date-time */
            started_at?: string;
            /** Format: date-time */
            finished_at?: string;
            duration_ms: number;
            egress?: components["schemas"]["EgressUsage"];
            /** @description what the command used (a run: its sandbox's life; in a sandbox: the sandbox's CPU time and reserved memory while it ran), once it ended */
            usage?: components["schemas"]["Usage"];
            budget?: components["schemas"]["BudgetLeft"];
            /** @description for a fork's copy of a command that was running in its source when the fork was made: the source command's id (its output here is the copy's, from the fork on) */
            forked_from?: string;
        };
        TemplateFile: {
            /** @description a File of the graph (fil_…) */
            file: string;
            /** @description where in /workspace */
            path: string;
        };
        TemplateRequest: {
            name: string;
            /** @enum {string} */
            base?: "lbb/python" | "lbb/node" | "lbb/shell" | "lbb/code-interpreter";
            code?: string;
            limits?: components["schemas"]["Limits"];
            /** @description isolation this version's runs and sandboxes default to ("ns", "gvisor"); omitted: the server default. Unknown: 400 invalid_request; not available here: 400 isolation_unavailable */
            isolation?: string;
            timeout_ms?: number;
            config?: Record<string, never>;
            files?: components["schemas"]["TemplateFile"][];
            description?: string;
            /** @description the route out this version's runs and sandboxes get unless a call names one */
            egress?: components["schemas"]["Egress"];
            /** @description packages this version carries: the answer comes at once with build.status building; runs and sandboxes of the version answer 409 template_building until it is ready (a run waits within its wait_ms), 409 template_build_failed after a failed build */
            image?: components["schemas"]["ImageRecipe"];
        };
        /** @description One immutable version of a template. Its id stays the same across versions. */
        Template: {
            id: string;
            graph: string;
            name: string;
            version: number;
            base: string;
            code?: string;
            limits: components["schemas"]["Limits"];
            /** @description isolation this version's runs and sandboxes default to; omitted: the server default */
            isolation?: string;
            timeout_ms?: number;
            config?: Record<string, never>;
            files?: components["schemas"]["TemplateFile"][];
            description?: string;
            /** Format: date-time */
            created_at: string;
            created_by?: string;
            /** @description the template's history, newest first; only in the answer to GET /v1/sandboxes/templates/{name} */
            versions?: components["schemas"]["TemplateVersion"][];
            /** @description in the answer of a save: true when no new version was made, because the newest already held what was saved */
            existing?: boolean;
            egress?: components["schemas"]["Egress"];
            image?: components["schemas"]["ImageRecipe"];
            /** @description the key of the read-only layer the recipe builds */
            layer?: string;
            build?: components["schemas"]["TemplateBuild"];
        };
        TemplateVersion: {
            version: number;
            /** Format: date-time */
            created_at: string;
            created_by?: string;
            /** @description the version's isolation; omitted: the server default */
            isolation?: string;
        };
        BaseTemplate: {
            name: string;
            base: boolean;
            language: string;
            image: string;
            versions: {
                [key: string]: string;
            };
            missing?: string[];
        };
        TemplateList: {
            data: components["schemas"]["Template"][];
            next_cursor?: string;
            bases: components["schemas"]["BaseTemplate"][];
        };
        Graph: {
            name: string;
            /** Format: date-time */
            created_at: string;
        };
        KeyRequest: {
            name?: string;
            /** @description default [main]; * for every graph; missing graphs are created */
            graphs?: string[];
            /** @description default: every scope but admin */
            scopes?: ("sandboxes:read" | "sandboxes:write" | "sandboxes:delete" | "templates:write" | "files:read" | "files:write" | "admin")[];
            spend_cap?: components["schemas"]["SpendCap"];
        };
        Key: {
            id: string;
            name: string;
            prefix: string;
            graphs: string[];
            scopes: string[];
            /** Format: date-time */
            created_at: string;
            created_by?: string;
            /** Format: date-time */
            revoked_at?: string;
            /** @description the secret, only in the answer to POST /v1/keys (see NewKey) */
            secret?: string;
            /** @description a derived key's (a sandbox's API grant) parent: it lives no longer than its parent */
            parent?: string;
            /** @description the sandbox a derived key's calls come from */
            sandbox?: string;
            /** Format: date-time */
            expires_at?: string;
            max_runs?: number;
            /** @description runs a key with max_runs started */
            runs?: number;
            /**
             * @description grant: a key minted by POST /v1/grants
             * @enum {string}
             */
            kind?: "grant";
            origin?: components["schemas"]["Origin"];
            budget_vcpu_ms?: number;
            budget_gib_ms?: number;
            used_vcpu_ms?: number;
            used_gib_ms?: number;
            spend_cap?: components["schemas"]["SpendCap"];
        };
        NewKey: components["schemas"]["Key"] & {
            /** @description shown this once */
            secret: string;
        };
        AuditEntry: {
            id: string;
            graph: string;
            key: string;
            method: string;
            route: string;
            path: string;
            target?: string;
            status: number;
            request_id: string;
            /** Format: date-time */
            at: string;
            /** @description the sandbox that made the call (with its API grant, or a refused egress destination) */
            actor?: string;
        };
        SandboxList: {
            data: components["schemas"]["Sandbox"][];
            /** @description pass as cursor for the next page; absent on the last */
            next_cursor?: string;
        };
        CommandList: {
            data: components["schemas"]["Command"][];
            /** @description pass as cursor for the next page; absent on the last */
            next_cursor?: string;
        };
        GraphList: {
            data: components["schemas"]["Graph"][];
            /** @description pass as cursor for the next page; absent on the last */
            next_cursor?: string;
        };
        KeyList: {
            data: components["schemas"]["Key"][];
            /** @description pass as cursor for the next page; absent on the last */
            next_cursor?: string;
        };
        AuditList: {
            data: components["schemas"]["AuditEntry"][];
            /** @description pass as cursor for the next page; absent on the last */
            next_cursor?: string;
        };
        HostList: {
            data: components["schemas"]["Host"][];
        };
        /** @description a host agent of a fleet: listed by --host-agent, or joined (lbb serve --hosts remote, lbb host --control) */
        Host: {
            /** @description its name in --host-agent (name=URL), else its address; for a host that joins, its name in lbb hosts add NAME */
            id: string;
            /** @description where the control plane calls its host agent (a joining host's --advertise); empty for a host added that has not joined yet */
            url: string;
            /**
             * @description up: it answers its heartbeats; lost: it stopped answering (or restarted), and what ran there ended host_lost; added: given a token (lbb hosts add) and not joined yet
             * @enum {string}
             */
            state: "up" | "lost" | "added";
            /** @description what the host said at its last heartbeat */
            capacity?: {
                cpus?: number;
                /** Format: int64 */
                memory_mib?: number;
                /** @description sandboxes it held then (running, and stopped or paused ones it keeps) */
                sandboxes?: number;
                /**
                 * Format: int64
                 * @description free space of its data directory's filesystem; placement passes over a host below 1 GiB
                 */
                disk_free_mib?: number;
                /**
                 * Format: int64
                 * @description memory available for new work (MemAvailable); placement passes over a host below 256 MiB
                 */
                memory_free_mib?: number;
                /** @description its warm pool (lbb host): off, waiting for the control plane's first reap, or on */
                pool?: string;
            };
            /** Format: date-time */
            last_heartbeat: string;
            /**
             * Format: date-time
             * @description when this control plane first saw it
             */
            registered_at: string;
        };
        /** @description what a joining host (lbb host --control) says of itself, every heartbeat_seconds */
        HostRegistration: {
            /** @description the host's name; the one its token names */
            id: string;
            /** @description where control planes call its host agent: http://host:port or https://host:port (--advertise) */
            url: string;
            /** @description changes when its host agent restarts */
            boot?: string;
            capacity?: components["schemas"]["HostCapacity"];
            /** @description the isolation drivers it runs */
            offered?: string[];
        };
        HostCapacity: {
            cpus?: number;
            /** Format: int64 */
            memory_mib?: number;
            /** Format: int64 */
            memory_free_mib?: number;
            sandboxes?: number;
            /** Format: int64 */
            disk_free_mib?: number;
            /** @description off, waiting (for the control plane's first reap) or on */
            pool?: string;
        };
        HostRegistered: {
            id: string;
            /** @description register again this often: the registration is the host's heartbeat to a control plane that restarted or forgot it */
            heartbeat_seconds: number;
        };
        ExecRequest: {
            /** @description the program and its arguments; argv[0] is looked up in PATH */
            argv: string[];
            /** @description laid over the sandbox's env; values are masked in output and never stored */
            env?: {
                [key: string]: string;
            };
            /** @description relative to /workspace or absolute inside it; default /workspace */
            cwd?: string;
            /** @description text the process reads on stdin (then end of file, unless stdin_open) */
            stdin?: string;
            /** @description bytes the process reads on stdin, base64 */
            stdin_base64?: string;
            /** @description keep stdin open for POST /v1/commands/{id}/stdin */
            stdin_open?: boolean;
            /** @description how long to wait for the process to end before answering 202 with it running (default 0: answer at once; capped by the server); not part of the idempotency hash */
            wait_ms?: number;
            /** @description kill the process when it passes (default and cap are the server's) */
            timeout_ms?: number;
            /** @description answer a text/event-stream (as Accept: text/event-stream does): the command's record, then its output from the first byte, held for this caller (the process waits when the caller reads slower than it writes), then its exit */
            stream?: boolean;
        };
        /** @description run(input, config) in an existing sandbox, with its workspace as the working directory */
        RunInRequest: {
            code?: string;
            /** @description a saved template (name, name@N); its code and config */
            template?: string;
            input?: unknown;
            config?: unknown;
            /** @description the harness: lbb/python (the sandbox's base by default), lbb/node, lbb/shell */
            base?: string;
            language?: string;
            env?: {
                [key: string]: string;
            };
            timeout_ms?: number;
            wait_ms?: number;
        };
        FileEntry: {
            /** @description relative to /workspace */
            path: string;
            name: string;
            /** @enum {string} */
            type: "file" | "dir" | "symlink" | "other";
            size: number;
            /** @description octal permission bits, e.g. 0644 */
            mode?: string;
            /** Format: date-time */
            mtime?: string;
            /** @description the content's SHA-256; only in the answer to an import (see ImportedFile) */
            sha256?: string;
        };
        ImportedFile: components["schemas"]["FileEntry"] & {
            sha256: string;
        };
        FileEntryList: {
            data: components["schemas"]["FileEntry"][];
            next_cursor?: string;
        };
        /** @description a File of the graph: content-addressed, outliving sandboxes, naming its origin */
        File: {
            id: string;
            graph: string;
            sha256: string;
            size: number;
            name?: string;
            origin: {
                /** @enum {string} */
                kind: "sandbox" | "upload" | "result";
                sandbox?: string;
                path?: string;
                /** @description result: the run whose result it holds */
                command?: string;
                key?: string;
                workflow?: string;
                run?: string;
                step?: string;
                attempt?: string;
                grant?: string;
            };
            /** Format: date-time */
            created_at: string;
        };
        FileList: {
            data: components["schemas"]["File"][];
            next_cursor?: string;
        };
        StdinResult: {
            command: string;
            /** @description written by this call */
            bytes: number;
            /** @description written to the command's stdin in all */
            total: number;
            closed: boolean;
        };
        KillRequest: {
            /** @description SIGTERM, TERM, 15…; default SIGKILL */
            signal?: string;
        };
        /** @description the sandbox and snapshot a fork started from */
        ForkedFrom: {
            sandbox: string;
            snapshot: string;
        };
        /** @description a saved state of a running sandbox, its memory and processes with its disk, that forks start from; it goes with its sandbox */
        Snapshot: {
            /** @description snp_… */
            id: string;
            graph: string;
            /** @description the sandbox it is of */
            sandbox: string;
            /** @description the driver the sandbox ran on */
            isolation: string;
            /** @description it holds processes and memory, not only the disk */
            memory: boolean;
            /** @description bytes it takes on the host's disk */
            size_bytes: number;
            /** Format: date-time */
            created_at: string;
            /** @description how long taking it held the sandbox */
            duration_ms: number;
            metadata: {
                [key: string]: string;
            };
            /** @description its files (memory image, disk, state) archived to the blob store when it was taken (disk_bytes: their bytes on disk), so that a fork works on a host without them; absent when the host has no blob store */
            archive?: components["schemas"]["WorkspaceArchive"];
        };
        SnapshotList: {
            snapshots: components["schemas"]["Snapshot"][];
            next_cursor?: string;
        };
        SnapshotRequest: {
            metadata?: {
                [key: string]: string;
            };
        };
        ForkRequest: {
            /** @description the snapshot (of this sandbox) to start from; without it a fresh one of the running sandbox is taken, and kept */
            snapshot?: string;
            /** @description labels of the fork; without them the source's */
            metadata?: {
                [key: string]: string;
            };
            /** @description the fork's lifetime (default the server's, capped) */
            expires_in_seconds?: number;
            /** @description variables of the fork's commands, over the source's; values are never stored */
            env?: {
                [key: string]: string;
            };
        };
        /** @description one quota of a graph: what it holds and the most it may */
        Quota: {
            usage: number;
            limit: number;
            /** @enum {string} */
            unit: "count" | "bytes";
        };
        /** @description a graph's quotas by name, and the caps of one call. running_sandboxes: long-lived sandboxes starting or running; sandboxes: those and the paused and stopped (each holds a disk); one-call runs count toward neither (they wait for the host's run slots); stopped_sandboxes and stopped_disk_bytes: stopped sandboxes and their disks, each at its size limit; checkpoints and checkpoint_bytes: sandboxes paused with their memory on disk; files and file_bytes: Files of the graph, each at its size; snapshots and snapshot_bytes. */
        Quotas: {
            graph: string;
            quotas: {
                running_sandboxes: components["schemas"]["Quota"];
                sandboxes: components["schemas"]["Quota"];
                stopped_sandboxes: components["schemas"]["Quota"];
                stopped_disk_bytes: components["schemas"]["Quota"];
                checkpoints: components["schemas"]["Quota"];
                checkpoint_bytes: components["schemas"]["Quota"];
                files: components["schemas"]["Quota"];
                file_bytes: components["schemas"]["Quota"];
                snapshots: components["schemas"]["Quota"];
                snapshot_bytes: components["schemas"]["Quota"];
            };
            /** @description the largest File */
            max_file_bytes: number;
            /** @description the largest result a run's record keeps; a larger one is kept as a File of the graph */
            max_result_bytes: number;
        };
        /** @description A sandbox's route out. The sandbox has no network device but lo in every mode: its commands get HTTP_PROXY, HTTPS_PROXY, ALL_PROXY (socks5h) and NO_PROXY for proxies on its loopback, whose connections the host's egress guard decides, dials and counts. */
        Egress: {
            /**
             * @description none (the default): no route out. allowlist: only the host names and ports of allow. public: any public address. Loopback, private, link-local, CGNAT, multicast and cloud metadata addresses are refused in every mode, after the name is resolved on the host (unless the server permits them: --egress-permit)
             * @enum {string}
             */
            mode: "none" | "allowlist" | "public";
            /** @description allowlist entries: example.org, *.example.org (its subdomains, not itself), each optionally with :port or :* (any port); without a port 80 and 443 */
            allow?: string[];
            /** @description bytes both ways the sandbox's egress may carry; connections are cut when it is reached. Default and cap are the server's */
            quota_bytes?: number;
        };
        EgressDestination: {
            host: string;
            port: number;
            connections: number;
            refused: number;
        };
        /** @description What a sandbox's (or, on a command, what the sandbox's while the command ran) egress carried. */
        EgressUsage: {
            /** @description bytes the sandbox sent */
            bytes_out: number;
            /** @description bytes it received */
            bytes_in: number;
            connections: number;
            refused: number;
            /** @description the quota was reached and the connections cut */
            quota_exceeded?: boolean;
            /** @description per host name and port asked for (counts only) */
            destinations?: components["schemas"]["EgressDestination"][];
        };
        /** @description Lets code inside the sandbox call the API at http://127.0.0.1:7700 ($LBB_URL, $LBB_GRAPH set) with a derived key the host attaches: the scopes given, the sandbox's graph only, ending with the sandbox; every call is audited with the sandbox as the actor. No key enters the sandbox. */
        APIGrantRequest: {
            /** @description within the creating key's; never admin */
            scopes: string[];
            /** @description the most runs (sandboxes created, commands and runs started) code inside may start; 0 or omitted: no cap */
            max_runs?: number;
        };
        APIGrant: {
            scopes: string[];
            max_runs?: number;
            /** @description the id of the derived key the sandbox's calls carry (a new one at each resume) */
            key?: string;
        };
        /** @description Cloned into /workspace before the create answers, through the egress guard with the repository's host allowed for the clone alone; a failed clone fails the create with git's error. */
        GitClone: {
            /** @description a public repository over https:// (or http://): host and path of letters, digits and ._~+-; no credentials */
            url: string;
            /** @description default: the repository's default branch */
            branch?: string;
            /** @description history to fetch; 0 or omitted: all */
            depth?: number;
        };
        /** @description a limit on what runs may use; 0 or absent is no limit */
        Budget: {
            /** @description runs started (one-call runs, commands and runs in a sandbox) */
            runs?: number;
            /** @description CPU time, in ms */
            vcpu_ms?: number;
            /** @description memory reserved over time, in GiB·ms */
            gib_ms?: number;
        };
        Spent: {
            runs: number;
            vcpu_ms: number;
            gib_ms: number;
        };
        /** @description what is left of a budget; an absent field has no limit */
        Remaining: {
            runs?: number;
            vcpu_ms?: number;
            gib_ms?: number;
        };
        /** @description what a command's budgets had left after it */
        BudgetLeft: {
            grant?: components["schemas"]["Remaining"];
            workflow?: components["schemas"]["Remaining"];
        };
        GrantRequest: {
            /** @description the graph of the call (?graph=); optional */
            graph?: string;
            /** @description within the minting key's; admin never. Default: sandboxes:read, sandboxes:write, files:read, files:write (those the key has) */
            scopes?: string[];
            /** @description lifetime, 1 to 3600; default 900 (15 min); never past the minting key's expiry */
            ttl_seconds?: number;
            /** @description the workflow step (workflow, run, step, attempt) stamped on every record made with the grant */
            origin?: components["schemas"]["Origin"];
            budget?: components["schemas"]["Budget"];
            name?: string;
        };
        /** @description a short-lived key for one attempt of a workflow step; the record never holds its token */
        Grant: {
            id: string;
            name?: string;
            graph: string;
            scopes: string[];
            origin?: components["schemas"]["Origin"];
            budget?: components["schemas"]["Budget"];
            used: components["schemas"]["Spent"];
            left?: components["schemas"]["Remaining"];
            prefix: string;
            /** Format: date-time */
            created_at: string;
            /** @description the key that minted it */
            created_by: string;
            /** Format: date-time */
            expires_at: string;
            /** Format: date-time */
            revoked_at?: string;
            /** @description the bearer token, only in the answer to POST /v1/grants */
            token?: string;
        };
        GrantList: {
            data: components["schemas"]["Grant"][];
            next_cursor?: string;
        };
        WorkflowBudget: {
            graph: string;
            workflow: string;
            run: string;
            budget: components["schemas"]["Budget"];
            used: components["schemas"]["Spent"];
            left: components["schemas"]["Remaining"];
            /** Format: date-time */
            created_at: string;
            /** Format: date-time */
            updated_at: string;
        };
        UsageSum: {
            group?: string;
            commands: number;
            vcpu_ms: number;
            gib_ms: number;
            /** @description at the server's prices; absent when it sets none */
            cost?: number;
        };
        UsageReport: {
            graph: string;
            /** Format: date-time */
            from?: string;
            /** Format: date-time */
            to?: string;
            /** @enum {string} */
            group_by?: "key" | "template" | "workflow" | "day";
            total: components["schemas"]["UsageSum"];
            groups?: components["schemas"]["UsageSum"][];
        };
        /** @description a cap on what a key's runs (and its grants' and sandboxes' in-sandbox grants') use in a period; at it calls that would start a run or a sandbox answer 402 spend_cap_reached. 0 or absent is no cap. A key with a cap mints keys within it. */
        SpendCap: {
            vcpu_ms?: number;
            gib_ms?: number;
            /** @description at the server's prices (--price-vcpu-ms, --price-gib-ms) */
            cost?: number;
            /**
             * @description a UTC day, a UTC month (the default), or the key's whole life
             * @enum {string}
             */
            period?: "day" | "month" | "total";
        };
        /** @description A text message of a terminal's WebSocket (GET /v1/sandboxes/{id}/pty). */
        TerminalMessage: {
            /**
             * @description started, skipped and exit come from the server, resize from the client
             * @enum {string}
             */
            type: "started" | "exit" | "resize" | "skipped";
            /** @description the terminal's command id (started, exit) */
            terminal?: string;
            sandbox?: string;
            /** @description resize */
            cols?: number;
            /** @description resize */
            rows?: number;
            /** @description exit */
            exit_code?: number | null;
            /** @description exit: the signal that ended it */
            signal?: string;
            /** @description exit: the command's status */
            status?: string;
            error?: string;
            /** @description skipped: how many bytes of output were not kept, where the output goes on (a client that was not the latest attached, or a re-attach after the held output was let go) */
            bytes?: number;
        };
        PreviewRequest: {
            /** @description how long the URL is valid (default 3600; at most 7 days) */
            expires_in_seconds?: number;
        };
        Preview: {
            /** @description prv_… */
            id: string;
            /** @description the signed URL: open it in a browser, or with curl (in the answer that made it only) */
            url?: string;
            sandbox: string;
            port: number;
            /** Format: date-time */
            expires_at: string;
            /** Format: date-time */
            created_at: string;
        };
        PreviewList: {
            data: components["schemas"]["Preview"][];
            next_cursor?: string;
        };
        ContextRequest: {
            /**
             * @description default python (a Jupyter kernel); node keeps one REPL context (top-level await, the last expression's value); shell (bash is the same) keeps one bash: cd, exports, variables, functions and aliases stay for the next cell, a non-zero exit of the cell's last command is the error ExitStatus, a timeout interrupts the cell (SIGINT to its processes) and the shell lives on
             * @enum {string}
             */
            language?: "python" | "node" | "shell" | "bash";
            /** @description the interpreter's working directory (default /workspace) */
            cwd?: string;
            /** @description environment of the interpreter; values are never stored */
            env?: {
                [key: string]: string;
            };
        };
        CodeContext: {
            id: string;
            sandbox: string;
            language: string;
            cwd?: string;
            env_names?: string[];
            /**
             * @description ended: its interpreter ended with the sandbox's processes; the next cell starts a fresh one
             * @enum {string}
             */
            status: "ready" | "busy" | "ended";
            /** Format: date-time */
            created_at: string;
            restarts: number;
            /** @description in a fork: the context of its source this one is a copy of (its interpreter, with the same state at the fork) */
            forked_from?: string;
        };
        CodeRequest: {
            code: string;
            /** @description ctx_…; without it, the sandbox's default context of language */
            context?: string;
            /**
             * @description default python; shell (or bash) runs the cell in the context's bash
             * @enum {string}
             */
            language?: "python" | "node" | "shell" | "bash";
            /** @description the cell is interrupted (KeyboardInterrupt) at this timeout; the context lives on */
            timeout_ms?: number;
            /** @description answer a text/event-stream (as Accept: text/event-stream) */
            stream?: boolean;
        };
        CodeOutput: {
            /** @enum {string} */
            type: "result" | "display";
            /** @description MIME type → value: text/plain, text/html, text/markdown, image/svg+xml as text; image/png and image/jpeg as base64; application/json as JSON */
            data: {
                [key: string]: unknown;
            };
            execution_count?: number;
            /** @description MIME type → the File of the graph that keeps this image */
            files?: {
                [key: string]: string;
            };
        };
        CodeError: {
            name: string;
            value: string;
            traceback: string[];
        };
        CodeResult: {
            /** @description the cell's command record (kind code) */
            command: string;
            context: string;
            sandbox: string;
            /** @enum {string} */
            status: "succeeded" | "failed" | "timed_out" | "lost";
            execution_count: number | null;
            stdout: string;
            stderr: string;
            results: components["schemas"]["CodeOutput"][];
            error?: components["schemas"]["CodeError"];
            duration_ms: number;
            /** @description the context's interpreter had ended (the sandbox was stopped) and this cell started a fresh one: earlier state is gone */
            context_restarted?: boolean;
        };
        /** @description what a template version installs over its base, in a build sandbox of the base (as root, egress only to the package sources this server's operator allows): Debian packages, Python packages, global npm packages, Files of the graph copied to absolute paths, then shell steps. The result is a read-only layer shared by every version with the same base image and recipe. */
        ImageRecipe: {
            /** @description Debian packages (apt-get install) */
            apt?: string[];
            /** @description Python packages, as pip names them (polars, polars==1.2) */
            pip?: string[];
            /** @description global npm packages */
            npm?: string[];
            /** @description shell steps (sh -c), run as root in order after the packages and files; the first that fails fails the build */
            run?: string[];
            /** @description Files of the graph copied in before the run steps; path is absolute (anywhere but the workspace) */
            files?: components["schemas"]["TemplateFile"][];
        };
        /** @description the build of a version's image layer */
        TemplateBuild: {
            /** @enum {string} */
            status: "building" | "ready" | "failed";
            /** @description the step that failed: apt, pip, npm, files[N], run[N] */
            step?: string;
            error?: string;
            /** @description what the recipe's packages resolved to ("pip polars": "1.2.3", "apt sqlite3": "3.46.1-7") */
            resolved?: {
                [key: string]: string;
            };
            layer_bytes?: number;
            /** @description the layer was already built by an identical recipe: no build ran */
            cached?: boolean;
            /** Format: date-time */
            started_at?: string;
            /** Format: date-time */
            finished_at?: string;
            duration_ms?: number;
        };
        TemplateBuildView: components["schemas"]["TemplateBuild"] & {
            template: string;
            version: number;
            /** @description the layer's key: the hash of the base image's id and the recipe */
            layer: string;
            image?: components["schemas"]["ImageRecipe"];
            /** @description the build's output, step by step (the last MiB) */
            log: string;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export type operations = Record<string, never>;
