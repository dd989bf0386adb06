// Package s3test starts a throwaway S3-compatible server for tests: SeaweedFS's `weed server
// -s3` (scripts/install-seaweedfs.sh) on loopback, its data in a temporary directory. A test
// without weed on the host skips saying so (fails under LBB_REQUIRE_PRIVILEGED=1, as CI runs).
package s3test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/littlebigbrain/lbb/internal/testkit"
)

// Weed is where scripts/install-seaweedfs.sh puts weed (LBB_WEED overrides).
func Weed() string {
	if p := os.Getenv("LBB_WEED"); p != "" {
		return p
	}
	return "/usr/local/lib/lbb/weed"
}

// Server is a running weed server of one test.
type Server struct {
	// Endpoint is the S3 API's URL (http://127.0.0.1:port).
	Endpoint string
	client   *minio.Client
	n        atomic.Int64
}

// Env holds the credentials variables a store of this server reads (weed, configured with
// no identities, takes any).
var Env = map[string]string{"AWS_ACCESS_KEY_ID": "lbb", "AWS_SECRET_ACCESS_KEY": "lbb-secret"}

// Start starts a server stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	weed := Weed()
	if _, err := os.Stat(weed); err != nil {
		testkit.SkipPrivileged(t, "no SeaweedFS at %s: run scripts/install-seaweedfs.sh", weed)
		return nil
	}
	dir := t.TempDir()
	// weed's gRPC ports are its HTTP ports + 10000: four ports below 55535 whose gRPC
	// ports are free too.
	ports := freePorts(t, 4)
	master, volume, filer, s3 := ports[0], ports[1], ports[2], ports[3]
	cmd := exec.Command(weed, "server", "-dir="+dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+strconv.Itoa(master), "-volume.port="+strconv.Itoa(volume), "-volume.max=200",
		"-master.volumeSizeLimitMB=64", "-filer", "-filer.port="+strconv.Itoa(filer),
		"-s3", "-s3.port="+strconv.Itoa(s3),
		// weed's unix sockets default to /tmp, where it leaves them: these two can move.
		"-filer.localSocket="+filepath.Join(dir, "filer.sock"), "-s3.localSocket="+filepath.Join(dir, "s3.sock"))
	log, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		log.Close()
		// Its gRPC sockets' paths are fixed (/tmp/seaweedfs-<service>-grpc-<port>.sock).
		for svc, port := range map[string]int{"master": master, "volume": volume, "filer": filer} {
			os.Remove(fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", svc, port+10000))
		}
	})
	s := &Server{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", s3)}
	s.client, err = minio.New(fmt.Sprintf("127.0.0.1:%d", s3), &minio.Options{
		Creds: credentials.NewStaticV4(Env["AWS_ACCESS_KEY_ID"], Env["AWS_SECRET_ACCESS_KEY"], "")})
	if err != nil {
		t.Fatal(err)
	}
	// Ready once a bucket can be made (the filer and a volume are up).
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.client.MakeBucket(ctx, "ready", minio.MakeBucketOptions{})
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
			t.Fatalf("weed server exited:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
			t.Fatalf("weed server not ready in 90s (%v):\n%s", err, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return s
}

// NewBucket makes an empty bucket and answers its --blobs URL.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("lbb-test-%d", s.n.Add(1))
	if err := s.client.MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	return "s3://" + name + "?endpoint=" + s.Endpoint
}

// Client is a client of the server, for what a test checks behind a store's back.
func (s *Server) Client() *minio.Client { return s.client }

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(25000)
		ok := true
		for i := range n {
			for _, p := range []int{base + i, base + i + 10000} {
				l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
				if err != nil {
					ok = false
					break
				}
				l.Close()
			}
		}
		if ok {
			out := make([]int, n)
			for i := range out {
				out[i] = base + i
			}
			return out
		}
	}
	t.Fatal("s3test: no free ports")
	return nil
}
