package buildinfo

import (
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
