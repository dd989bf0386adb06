//go:build linux

package layers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/littlebigbrain/lbb/internal/errdefs"
	"github.com/littlebigbrain/lbb/internal/layers"
	"github.com/littlebigbrain/lbb/internal/runtime"
	"github.com/littlebigbrain/lbb/internal/runtime/gvisor"
	"github.com/littlebigbrain/lbb/internal/runtime/hostids"
	"github.com/littlebigbrain/lbb/internal/runtime/microvm"
	"github.com/littlebigbrain/lbb/internal/runtime/ns"
	"github.com/littlebigbrain/lbb/internal/runtime/runtimetest"
	"github.com/littlebigbrain/lbb/internal/testkit"
)

// TestMain lets this test binary be the ns sandbox init.
func TestMain(m *testing.M) {
	ns.MaybeInit()
	microvm.MaybeJail()
	testkit.Main(m, nil)
}

func TestKey(t *testing.T) {
	r := layers.Recipe{Pip: []string{"polars"}, Run: []string{"echo hi"}}
	if layers.Key("img1", r) != layers.Key("img1", layers.Recipe{Pip: []string{"polars"}, Run: []string{"echo hi"}}) {
		t.Fatal("one recipe, two keys")
	}
	for _, other := range []string{layers.Key("img2", r), layers.Key("img1", layers.Recipe{Pip: []string{"polars"}, Run: []string{"echo ho"}}),
		layers.Key("img1", layers.Recipe{Pip: []string{"polars"}, Run: []string{"echo hi"}, Files: []layers.File{{Path: "/a", Digest: "x"}}})} {
		if other == layers.Key("img1", r) {
			t.Fatal("a changed base or recipe keeps its key")
		}
	}
	for _, bad := range []layers.Recipe{{Apt: []string{"; rm -rf /"}}, {Pip: []string{"--index-url=http://x"}}, {Files: []layers.File{{Path: "rel"}}}, {Run: []string{" "}}} {
		if bad.Check() == nil {
			t.Errorf("%+v passes Check", bad)
		}
	}
}

// run runs sh -c cmd in a sandbox of image on d and answers its stdout.
func run(t *testing.T, d runtime.Driver, id, image, cmd string) string {
	t.Helper()
	return runSpec(t, d, runtime.Spec{ID: id, Image: image}, cmd)
}

// runSpec runs sh -c cmd in a sandbox of spec on d and answers its stdout.
func runSpec(t *testing.T, d runtime.Driver, spec runtime.Spec, cmd string) string {
	t.Helper()
	return runtimetest.RunSh(t, d, spec, cmd)
}

// TestBuildAndMount builds a layer with a file and run steps on ns, shares it for an identical
// recipe, fails a broken one at its step, and runs sandboxes of the layer on ns and gvisor.
func TestBuildAndMount(t *testing.T) {
	if testing.Short() {
		t.Skip("builds real sandboxes; skipped in -short mode")
	}
	testkit.RequiresRoot(t)
	testkit.RequiresUserNS(t)
	image := runtimetest.FindImage(t)
	agentBin := testkit.Agent(t)
	nsd := ns.New(ns.Config{StateDir: runtimetest.StateDir(t), AgentPath: agentBin, CgroupParent: "lbb-test", Logger: runtimetest.Logger()})
	if err := runtime.CheckRequirements(nsd); err != nil {
		testkit.SkipPrivileged(t, "%v", err)
	}
	st := &layers.Store{Dir: runtimetest.StateDir(t)}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	recipe := layers.Recipe{
		Files: []layers.File{{Path: "/opt/helper/helper.py", Digest: "d1", Data: []byte("def greet():\n    return 'hello from the layer'\n")}},
		Run: []string{
			"echo /opt/helper > /usr/local/lib/python3*/dist-packages/helper.pth || echo /opt/helper > $(python3 -c 'import site; print(site.getsitepackages()[0])')/helper.pth",
			"printf '#!/bin/sh\\necho tool-ok\\n' > /usr/local/bin/mytool && chmod 755 /usr/local/bin/mytool",
			"rm /etc/motd; echo changed > /etc/issue; mkdir -p /workspace/junk",
		},
	}
	var log bytes.Buffer
	t0 := time.Now()
	info, err := st.Build(ctx, layers.BuildOptions{Driver: nsd, Image: image, BaseID: "base1", Recipe: recipe, SandboxID: "sbx_build1", Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("built layer %s (%d bytes) in %s", info.Key, info.Bytes, time.Since(t0))
	if info.Key != layers.Key("base1", recipe) {
		t.Fatalf("key %s", info.Key)
	}
	if _, err := os.Stat(filepath.Join(st.Path(info.Key), "layer", "workspace")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the layer holds the workspace: %v", err)
	}

	// An identical recipe is the same layer: no second build.
	again, err := st.Build(ctx, layers.BuildOptions{Driver: nsd, Image: image, BaseID: "base1", Recipe: recipe, SandboxID: "sbx_build2"})
	if err != nil || again.BuiltAt != info.BuiltAt {
		t.Fatalf("second build of one recipe: %+v %v", again, err)
	}

	// A failing step fails the build with its log, and leaves no layer.
	bad := layers.Recipe{Run: []string{"echo step-one", "echo boom >&2; exit 3", "echo never"}}
	var badLog bytes.Buffer
	_, err = st.Build(ctx, layers.BuildOptions{Driver: nsd, Image: image, BaseID: "base1", Recipe: bad, SandboxID: "sbx_build3", Log: &badLog})
	var se *layers.StepError
	if !errors.As(err, &se) || se.Step != "run[1]" || se.ExitCode != 3 {
		t.Fatalf("failing build: %v", err)
	}
	if stored, _ := st.Log(layers.Key("base1", bad)); !bytes.Contains(stored, []byte("boom")) || bytes.Contains(stored, []byte("never")) {
		t.Errorf("failed build's log: %q", stored)
	}
	if _, err := st.Rootfs(layers.Key("base1", bad), "base1", image); err == nil {
		t.Error("a failed build has a rootfs")
	}

	if _, err := st.Rootfs(info.Key, "base2", image); !errdefs.IsConflict(err) {
		t.Fatalf("a layer over another base: %v", err)
	}
	rootfs, err := st.Rootfs(info.Key, "base1", image)
	if err != nil {
		t.Fatal(err)
	}
	const probe = `python3 -c 'import helper; print(helper.greet())'; mytool; test -e /etc/motd && echo motd-there; cat /etc/issue`
	check := func(t *testing.T, d runtime.Driver, id string) {
		spec := runtime.Spec{ID: id, Image: rootfs}
		if _, ok := d.(runtime.LayerStacker); ok {
			dir, err := st.Layer(info.Key, "base1")
			if err != nil {
				t.Fatal(err)
			}
			spec = runtime.Spec{ID: id, Image: image, Layer: dir}
		}
		out := runSpec(t, d, spec, probe)
		if !strings.Contains(out, "hello from the layer") || !strings.Contains(out, "tool-ok") ||
			strings.Contains(out, "motd-there") || !strings.Contains(out, "changed") {
			t.Errorf("%s sandbox of the layer: %q", d.Name(), out)
		}
	}
	t.Run("ns", func(t *testing.T) {
		check(t, nsd, "sbx_layerns")
		// The layer is an idmapped lower directory of its own: its sandbox gets its own host
		// ids wherever a sandbox of the base does (an overlay made on the host could not be
		// idmapped, and fell back to the shared range).
		dir, err := st.Layer(info.Key, "base1")
		if err != nil {
			t.Fatal(err)
		}
		const ids = "awk '{print $2}' /proc/self/uid_map"
		layered := runSpec(t, nsd, runtime.Spec{ID: "sbx_layerids", Image: image, Layer: dir}, ids)
		plain := run(t, nsd, "sbx_plainids", image, ids)
		shared := fmt.Sprint(hostids.Shared.Base) + "\n"
		if (layered == shared) != (plain == shared) {
			t.Errorf("a sandbox of the layer maps host ids from %q, one of the base from %q (shared: %q)", layered, plain, shared)
		}
	})
	t.Run("gvisor", func(t *testing.T) {
		runsc := os.Getenv("LBB_RUNSC")
		if runsc == "" {
			runsc = gvisor.DefaultRunsc
		}
		testkit.RequiresRunsc(t, runsc)
		gd := gvisor.New(gvisor.Config{StateDir: runtimetest.StateDir(t), Runsc: runsc, AgentPath: agentBin,
			CgroupParent: "lbb-gvisor-test", Logger: runtimetest.Logger()})
		check(t, gd, "sbx_layergv")
	})
	// A microvm stacks the layer itself: a second read-only disk, made once from the layer.
	t.Run("microvm", func(t *testing.T) {
		md := microvm.New(microvm.Config{StateDir: runtimetest.StateDir(t), AgentPath: agentBin,
			CgroupParent: "lbb-microvm-test", Logger: runtimetest.Logger()})
		if err := runtime.CheckRequirements(md); err != nil {
			testkit.SkipPrivileged(t, "%v", err)
		}
		t0 := time.Now()
		check(t, md, "sbx_layervm")
		if _, err := os.Stat(st.Path(info.Key) + "/layer.ext4"); err != nil {
			t.Errorf("the layer's disk: %v", err)
		}
		t.Logf("a microvm of the layer (its disk made) in %s", time.Since(t0))
	})
	// The base is untouched for every other sandbox.
	if out := run(t, nsd, "sbx_plain", image, probe+"; true"); strings.Contains(out, "tool-ok") || !strings.Contains(out, "motd-there") {
		t.Errorf("the base sees the layer: %q", out)
	}

	// GC keeps what is used and removes the rest (the failed build's log too).
	removed, err := st.GC(map[string]bool{info.Key: true})
	if err != nil || len(removed) != 1 || removed[0] != layers.Key("base1", bad) {
		t.Fatalf("GC: %v %v", removed, err)
	}
	if removed, err := st.GC(nil); err != nil || len(removed) != 1 {
		t.Fatalf("GC of everything: %v %v", removed, err)
	}
	if _, err := os.Stat(st.Path(info.Key)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("collected layer stays: %v", err)
	}
}

func TestResolved(t *testing.T) {
	r := layers.Recipe{Apt: []string{"sqlite3"}, Pip: []string{"Tiny_Pkg==1.0"}, Npm: []string{"left-pad@1"}}
	frozen := "apt bash=5.2\napt sqlite3=3.46.1-7\npip numpy==2.0\npip tiny-pkg==1.0\nnpm left-pad=1.3.0\n"
	got := layers.ResolvedOf(frozen, r)
	want := map[string]string{"apt sqlite3": "3.46.1-7", "pip tiny-pkg": "1.0", "npm left-pad": "1.3.0"}
	if len(got) != len(want) {
		t.Fatalf("resolved %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("resolved %v, want %v", got, want)
		}
	}
}
