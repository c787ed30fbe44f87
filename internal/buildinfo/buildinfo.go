// Package buildinfo says which build of latchd is running: the version and
// commit stamped at build time (make build, make dist) or, when not
// stamped, what the Go toolchain recorded (go install ...@v1.2.3 records
// the module version; a build from a checkout records the commit).
package buildinfo

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// Version and Commit are stamped by the Makefile:
//
//	-ldflags "-X github.com/latchd/latchd/internal/buildinfo.Version=v1.2.3
//	          -X github.com/latchd/latchd/internal/buildinfo.Commit=0123abc"
var (
	Version string
	Commit  string
)

// Info is one build's identity.
type Info struct {
	Version   string // "v1.2.3", "v1.2.3-4-g0123abc-dirty", or "devel"
	Commit    string // the VCS revision, or "unknown"
	GoVersion string // the toolchain that built it: "go1.26.8"
}

var get = sync.OnceValue(func() Info { return read(Version, Commit, debug.ReadBuildInfo) })

// Get returns the running binary's build identity.
func Get() Info { return get() }

// read fills in what was not stamped from the toolchain's record.
func read(version, commit string, build func() (*debug.BuildInfo, bool)) Info {
	i := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if bi, ok := build(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		var rev string
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if i.Commit == "" && rev != "" {
			i.Commit = rev[:min(len(rev), 12)]
			if modified {
				i.Commit += "-dirty"
			}
		}
		i.GoVersion = cmp.Or(bi.GoVersion, i.GoVersion)
	}
	i.Version, i.Commit = cmp.Or(i.Version, "devel"), cmp.Or(i.Commit, "unknown")
	return i
}

// String formats i for --version: "v1.2.3 (commit 0123abc, go1.26.8)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s)", i.Version, i.Commit, i.GoVersion)
}
