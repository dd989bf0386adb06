//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/littlebigbrain/lbb/internal/config"
	"github.com/littlebigbrain/lbb/internal/fleet"
	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
)

func init() {
	commands["hosts"] = command{summary: "Hosts that join lbb serve --hosts remote: add NAME (prints its token), rm NAME, ls; on the control plane's machine (its --data-dir or --store)", run: runHosts}
}

// runHosts gives hosts their tokens, takes them back and lists them, on the control plane's
// store (the control plane may be running): a control plane that waits for its first host
// has no API yet, so this works beside it, as kubeadm token create does.
func runHosts(ctx context.Context, args []string) error {
	verb, name := "ls", ""
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		verb, args = args[0], args[1:]
	}
	if verb == "add" || verb == "rm" {
		if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
			return fmt.Errorf("lbb hosts %s NAME", verb)
		}
		name, args = args[0], args[1:]
		if err := fleet.ValidHostID(name); err != nil {
			return err
		}
	}
	fs := flag.NewFlagSet("hosts", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: lbb hosts [ls] | add NAME | rm NAME [flags]\n\nThe flags of lbb serve that name its store and host secret (--data-dir, --store, --host-secret) apply.\n\n")
		fs.PrintDefaults()
	}
	cfg, err := config.Load(fs, args, os.Getenv)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	switch verb {
	case "add":
		secret, err := hostSecret(cfg)
		if err != nil {
			return err
		}
		token := fleet.HostToken(secret, name)
		now := time.Now().UTC()
		hosts, err := st.ListHosts(ctx)
		if err != nil {
			return err
		}
		for _, h := range hosts {
			if h.ID == name {
				return fmt.Errorf("host %s exists (lbb hosts rm %s first)", name, name)
			}
		}
		if err := st.PutHost(ctx, store.Host{ID: name, State: store.HostAdded, RegisteredAt: now, LastHeartbeat: now, TokenHash: fleet.HashToken(token)}); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "lbb: host %s added; on it run (the token is shown once):\n\n    lbb host --control URL --token %s\n\n", name, token)
		fmt.Println(token)
		return nil
	case "rm":
		return st.DeleteHost(ctx, name)
	case "ls":
		hosts, err := st.ListHosts(ctx)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tSTATE\tURL\tCPUS\tMEM FREE MiB\tDISK FREE MiB\tRUNNING\tLAST HEARTBEAT")
		for _, h := range hosts {
			var c hostagent.Capacity
			json.Unmarshal(h.Capacity, &c)
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", h.ID, h.State, h.URL, c.CPUs, c.MemoryFreeMiB, c.DiskFreeMiB, c.Sandboxes, h.LastHeartbeat.Format(time.RFC3339))
		}
		return w.Flush()
	}
	return errors.New("lbb hosts: want ls, add NAME or rm NAME")
}
