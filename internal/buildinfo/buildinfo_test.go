package buildinfo

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestRead(t *testing.T) {
	installed := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	checkout := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	tests := []struct {
		name            string
		version, commit string
		build           func() (*debug.BuildInfo, bool)
		want            Info
	}{
		{name: "stamped wins", version: "v2.0.0", commit: "abc", build: installed,
			want: Info{Version: "v2.0.0", Commit: "abc", GoVersion: "go1.26.8"}},
		{name: "go install", build: installed,
			want: Info{Version: "v1.4.0", Commit: "0123456789ab-dirty", GoVersion: "go1.26.8"}},
		{name: "checkout", build: checkout,
			want: Info{Version: "devel", Commit: "unknown", GoVersion: "go1.26.8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := read(tt.version, tt.commit, tt.build)
			if got != tt.want {
				t.Fatalf("read = %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := read("", "", none); got.Version != "devel" || got.Commit != "unknown" || got.GoVersion == "" {
		t.Fatalf("no build info: %+v", got)
	}
}

// The Makefile's -X flags reach the binary.
func TestStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	out := filepath.Join(t.TempDir(), "printversion")
	pkg := "github.com/latchd/latchd/internal/buildinfo"
	build := exec.Command("go", "build", "-o", out,
		"-ldflags", "-X "+pkg+".Version=v9.8.7 -X "+pkg+".Commit=0123abc", "./testdata/printversion")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	b, err := exec.Command(out).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "v9.8.7 (commit 0123abc, " + runtime.Version() + ")\n"
	if string(b) != want {
		t.Fatalf("stamped binary printed %q, want %q", b, want)
	}
}
