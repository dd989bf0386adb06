package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	lbb "github.com/littlebigbrain/lbb/sdk/go"
)

// egressFlags are the flags of a route out: --egress MODE, --allow HOST (repeatable), and
// --egress-quota SIZE.
type egressFlags struct {
	mode  *string
	allow multiFlag
	quota *string
}

func newEgressFlags(fs *flag.FlagSet) *egressFlags {
	e := &egressFlags{
		mode:  fs.String("egress", "", "route out: none, allowlist or public (default: the template's, else none; --allow alone means allowlist)"),
		quota: fs.String("egress-quota", "", "bytes the egress may carry both ways: 50MiB, 1GB, 1048576 (default: the server's)"),
	}
	fs.Var(&e.allow, "allow", "a host the egress lets through: example.org, *.example.org, with :PORT or :* (no port: 80 and 443); repeatable, comma-separated")
	return e
}

// egress is the Egress the flags ask for; nil when none is given.
func (e *egressFlags) egress() (*lbb.Egress, error) {
	var allow []string
	for _, a := range e.allow {
		for _, h := range strings.Split(a, ",") {
			if h = strings.TrimSpace(h); h != "" {
				allow = append(allow, h)
			}
		}
	}
	mode := *e.mode
	if mode == "" && len(allow) > 0 {
		mode = "allowlist"
	}
	if mode == "" && *e.quota == "" {
		return nil, nil
	}
	if mode == "" {
		return nil, exitError{2, "--egress-quota goes with --egress allowlist|public"}
	}
	out := &lbb.Egress{Mode: mode, Allow: allow}
	if *e.quota != "" {
		n, err := parseSize(*e.quota)
		if err != nil {
			return nil, exitError{2, "--egress-quota: " + err.Error()}
		}
		out.QuotaBytes = n
	}
	return out, nil
}

// parseSize reads a byte count: 1048576, 512KiB, 50MiB, 2GiB, or the decimal kB, MB, GB.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
		{"TB", 1e12}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("%q is no size (50MiB, 1GB, 1048576)", s)
	}
	return int64(f * float64(mult)), nil
}

// grantFlags are a create's API grant and git clone.
type grantFlags struct {
	scopes, git, branch *string
	maxRuns, depth      *int64
}

func newGrantFlags(fs *flag.FlagSet) *grantFlags {
	return &grantFlags{
		scopes:  fs.String("grant-scopes", "", "let code inside call the API at $LBB_URL with these scopes (comma-separated, within this key's); no key enters the sandbox"),
		maxRuns: fs.Int64("grant-max-runs", 0, "the most runs code inside may start with its grant (0: no cap)"),
		git:     fs.String("git", "", "a public repository (https://…) cloned into /workspace before create answers"),
		branch:  fs.String("git-branch", "", "the branch of --git (default: its default branch)"),
		depth:   fs.Int64("git-depth", 0, "the history --git fetches (0: all)"),
	}
}

func (g *grantFlags) apply(p *lbb.CreateParams) {
	if *g.scopes != "" {
		p.API = &lbb.APIGrantRequest{Scopes: strings.Split(*g.scopes, ","), MaxRuns: *g.maxRuns}
	}
	if *g.git != "" {
		p.Git = &lbb.GitClone{URL: *g.git, Branch: *g.branch, Depth: *g.depth}
	}
}
