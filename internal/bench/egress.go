//go:build linux

package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/littlebigbrain/lbb/internal/agent"
	"github.com/littlebigbrain/lbb/internal/egress"
	"github.com/littlebigbrain/lbb/internal/ids"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/store"
)

// EgressDownloadMiB is the size of the download the egress figure times.
const EgressDownloadMiB = 100

// Egress times a 100 MiB download from a server on the host's loopback by curl inside a
// sandbox of d, through its proxy, the channel and the guard (loopback permitted), beside
// the same download by curl on the host (measured once per base).
func Egress(ctx context.Context, d runtime.Driver, rootfs string, n int, prefix string, log io.Writer, base *Baselines) (Row, error) {
	const size = EgressDownloadMiB << 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Row{}, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		buf := make([]byte, 256<<10)
		for left := size; left > 0; left -= len(buf) {
			if _, err := w.Write(buf[:min(left, len(buf))]); err != nil {
				return
			}
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/blob"

	id := ids.New("sbx")
	c, _, err := startSandbox(ctx, d, runtime.Spec{ID: id, Image: rootfs})
	if err != nil {
		return Row{}, err
	}
	defer d.Destroy(context.Background(), id)
	defer c.Close()
	g := egress.NewGuard(egress.Options{Permit: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	sb, err := g.NewSandbox(id, store.Egress{Mode: store.EgressPublic}, nil)
	if err != nil {
		return Row{}, err
	}
	sess, err := g.Open(ctx, c, sb, egress.Listen(sb, false, nil))
	if err != nil {
		return Row{}, err
	}
	defer sess.Close()

	fmt.Fprintf(log, "%s%d MiB download through the egress guard (%d times)…\n", prefix, EgressDownloadMiB, n)
	curl := []string{"curl", "-sSf", "--noproxy", "", "-x", "http://" + egress.ProxyAddr, "-o", "/dev/null", url}
	in := Time("lbb "+d.Name(), n, func() error {
		p, err := c.Exec(ctx, agent.ExecRequest{ID: ids.New("cmd"), Argv: curl}, nil)
		if err != nil {
			return err
		}
		var stderr strings.Builder
		ex, err := p.Wait(io.Discard, &stderr)
		if err == nil && ex.ExitCode != 0 {
			err = fmt.Errorf("curl: exit %d: %s", ex.ExitCode, stderr.String())
		}
		return err
	})
	host := base.Time("curl on the host", n, func() error { return exec.Command("curl", "-sSf", "-o", "/dev/null", url).Run() })
	row := Row{Metric: fmt.Sprintf("%s%d MiB download through the egress guard", prefix, EgressDownloadMiB), LBB: in, Baselines: []Sample{host},
		Values: map[string]float64{}}
	for _, s := range []Sample{in, host} {
		if m := s.Median(); m > 0 {
			row.Values[strings.ReplaceAll(s.Name, " ", "_")+"_mib_per_s"] = float64(EgressDownloadMiB) / m.Seconds()
		}
	}
	if u := sb.Usage(); u.BytesIn < int64(n)*size {
		return row, fmt.Errorf("the guard counted %d bytes in, want %d at least", u.BytesIn, int64(n)*size)
	}
	return row, nil
}
