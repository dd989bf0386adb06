package config

import (
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func load(args []string, env map[string]string) (Config, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return Load(fs, args, func(k string) string { return env[k] })
}

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c Config)
		wantErr bool
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.Addr != "127.0.0.1:7700" || c.DataDir != "/var/lib/lbb" || c.ImagesDir != "/var/lib/lbb/images" {
				t.Errorf("defaults: %+v", c)
			}
			if c.Defaults.MemoryMiB != 512 || c.Defaults.CPUs != 1 || c.Defaults.Pids != 256 || c.DefaultTimeout != time.Minute {
				t.Errorf("limit defaults: %+v", c.Defaults)
			}
			if filepath.Base(c.Agent) != "lbb-agent" {
				t.Errorf("agent %q", c.Agent)
			}
		}},
		{name: "env", env: map[string]string{"LBB_ADDR": "127.0.0.1:9", "LBB_DATA_DIR": "/tmp/x", "LBB_RETENTION": "2s"}, check: func(t *testing.T, c Config) {
			if c.Addr != "127.0.0.1:9" || c.DataDir != "/tmp/x" || c.ImagesDir != "/tmp/x/images" || c.SandboxRetention != 2*time.Second {
				t.Errorf("env: %+v", c)
			}
		}},
		{name: "flag beats env", args: []string{"--addr", "127.0.0.1:8"}, env: map[string]string{"LBB_ADDR": "127.0.0.1:9"}, check: func(t *testing.T, c Config) {
			if c.Addr != "127.0.0.1:8" {
				t.Errorf("addr %q", c.Addr)
			}
		}},
		{name: "gvisor pool", check: func(t *testing.T, c Config) {
			if c.PoolGvisorMin != 1 || c.Runtime != "ns" {
				t.Errorf("pool-gvisor-min %d, runtime %q; want 1 and ns", c.PoolGvisorMin, c.Runtime)
			}
		}},
		{name: "gvisor pool off", env: map[string]string{"LBB_POOL_GVISOR_MIN": "0"}, check: func(t *testing.T, c Config) {
			if c.PoolGvisorMin != 0 {
				t.Errorf("pool-gvisor-min %d, want 0", c.PoolGvisorMin)
			}
		}},
		{name: "negative gvisor pool", args: []string{"--pool-gvisor-min", "-1"}, wantErr: true},
		{name: "host agent", env: map[string]string{"LBB_HOST_AGENT": "http://127.0.0.1:7702", "LBB_HOST_AGENT_TOKEN": "t"}, check: func(t *testing.T, c Config) {
			if c.HostAgent != "http://127.0.0.1:7702" || c.HostAgentToken != "t" {
				t.Errorf("host agent %q, token %q", c.HostAgent, c.HostAgentToken)
			}
		}},
		{name: "host agent without token", args: []string{"--host-agent", "http://127.0.0.1:7702"}, wantErr: true},
		{name: "host agent not a URL", args: []string{"--host-agent", "127.0.0.1:7702", "--host-agent-token", "t"}, wantErr: true},
		{name: "hosts join", env: map[string]string{"LBB_HOSTS": "remote", "LBB_HOST_SECRET": "s"}, check: func(t *testing.T, c Config) {
			if c.Hosts != "remote" || c.HostSecret != "s" {
				t.Errorf("hosts %q, secret %q", c.Hosts, c.HostSecret)
			}
		}},
		{name: "hosts join and listed", args: []string{"--hosts", "remote", "--host-agent", "http://127.0.0.1:7702", "--host-agent-token", "t"}, wantErr: true},
		{name: "hosts unknown", args: []string{"--hosts", "static"}, wantErr: true},
		{name: "quotas", args: []string{"--quota-file-bytes", "2048", "--max-result-bytes", "4096"}, env: map[string]string{"LBB_QUOTA_FILES": "3"}, check: func(t *testing.T, c Config) {
			if c.Quotas.Files != 3 || c.Quotas.FileBytes != 2048 || c.MaxResultBytes != 4096 || c.Quotas.Snapshots != 100 || c.MaxSandboxesPerGraph != 100 {
				t.Errorf("quotas: %+v, max result %d, sandboxes %d", c.Quotas, c.MaxResultBytes, c.MaxSandboxesPerGraph)
			}
		}},
		{name: "sandbox cap at least the running one", args: []string{"--max-running-per-graph", "500"}, check: func(t *testing.T, c Config) {
			if c.MaxSandboxesPerGraph != 500 {
				t.Errorf("max-sandboxes-per-graph %d, want 500", c.MaxSandboxesPerGraph)
			}
		}},
		{name: "postgres store", env: map[string]string{"LBB_STORE": "postgres://lbb@/lbb?host=/run/postgresql"}, check: func(t *testing.T, c Config) {
			if c.Store != "postgres://lbb@/lbb?host=/run/postgresql" {
				t.Errorf("store %q", c.Store)
			}
		}},
		{name: "blobs in a bucket", args: []string{"--blobs", "s3://files?endpoint=http://127.0.0.1:8333"}, check: func(t *testing.T, c Config) {
			if c.Blobs != "s3://files?endpoint=http://127.0.0.1:8333" {
				t.Errorf("blobs %q", c.Blobs)
			}
		}},
		{name: "blobs not a bucket", args: []string{"--blobs", "/srv/blobs"}, wantErr: true},
		{name: "store not a postgres URL", args: []string{"--store", "mysql://x"}, wantErr: true},
		{name: "negative quota", args: []string{"--quota-snapshots", "-1"}, wantErr: true},
		{name: "tiny result cap", env: map[string]string{"LBB_MAX_RESULT_BYTES": "10"}, wantErr: true},
		{name: "bad env", env: map[string]string{"LBB_MAX_PIDS": "many"}, wantErr: true},
		{name: "default above cap", args: []string{"--default-memory-mib", "9000", "--max-memory-mib", "4096"}, wantErr: true},
		{name: "bad addr", args: []string{"--addr", "nowhere"}, wantErr: true},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: true},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.args, tc.env)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

func TestHostAgents(t *testing.T) {
	for _, tc := range []struct {
		hosts, tokens string
		want          []HostAgentSpec
		err           string
	}{
		{hosts: "http://127.0.0.1:7702", tokens: "t", want: []HostAgentSpec{{"127.0.0.1:7702", "http://127.0.0.1:7702", "t"}}},
		{hosts: "a=http://10.0.0.1:7702, b=https://h:7702", tokens: "t", want: []HostAgentSpec{
			{"a", "http://10.0.0.1:7702", "t"}, {"b", "https://h:7702", "t"}}},
		{hosts: "a=http://10.0.0.1:7702,b=https://h:7702", tokens: "ta,tb", want: []HostAgentSpec{
			{"a", "http://10.0.0.1:7702", "ta"}, {"b", "https://h:7702", "tb"}}},
		{hosts: "a=http://x:1,b=http://y:1,c=http://z:1", tokens: "ta,tb", err: "2 tokens for 3 hosts"},
		{hosts: "a=http://x:1,a=http://y:1", tokens: "t", err: "named twice"},
		{hosts: "http://x:1,http://x:1", tokens: "t", err: "named twice"},
		{hosts: "a=ftp://x", tokens: "t", err: "want http"},
		{hosts: "http://x:1", tokens: "", err: "needs --host-agent-token"},
	} {
		got, err := Config{HostAgent: tc.hosts, HostAgentToken: tc.tokens}.HostAgents()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %q: %v, want an error with %q", tc.hosts, tc.tokens, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q %q: %v %v, want %v", tc.hosts, tc.tokens, got, err, tc.want)
		}
	}
}
