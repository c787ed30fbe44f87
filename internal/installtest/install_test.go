package installtest

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// commands are what `go install <module>/cmd/...@<version>` must build.
var commands = []string{"latchd", "latchctl", "latchd-bench"}

// Limits of a module zip, as the go command checks them
// (golang.org/x/mod/zip).
const (
	maxZipFile = 500 << 20 // the whole zip, uncompressed
	maxGoMod   = 16 << 20  // go.mod
	maxLicense = 16 << 20  // LICENSE
)

// TestGoInstallByVersion serves the module from a file:// GOPROXY built
// from the tracked files of this checkout, under a pseudo-version, and runs
// `go install <module>/cmd/...@<version>` in an empty directory, with the
// module's dependencies taken from the local module cache (or the real
// GOPROXY when missing there) into a temporary one. It fails when go.mod has a replace
// directive, or when the commands do not build from what the zip holds.
func TestGoInstallByVersion(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git command on PATH: the module zip is built from `git ls-files`")
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget(t))
	defer cancel()
	root := filepath.Dir(goEnv(t, goBin, "GOMOD"))
	modPath, goMod := readModule(t, root)
	if !isCheckout(root) {
		t.Skip("not a git checkout: the module zip is built from `git ls-files`")
	}
	ver := pseudoVersion(t, root)
	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	writeProxy(t, proxy, root, modPath, ver, goMod, trackedFiles(t, root))

	gobin := filepath.Join(tmp, "bin")
	work := filepath.Join(tmp, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	realCache := filepath.Join(goEnv(t, goBin, "GOMODCACHE"), "cache", "download")
	cmd := exec.CommandContext(ctx, goBin, "install", modPath+"/cmd/...@"+ver)
	cmd.Dir = work
	cmd.Env = append(os.Environ(),
		"GOPROXY="+fileURL(proxy)+","+fileURL(realCache)+","+goEnv(t, goBin, "GOPROXY"),
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		// -modcacherw: the temporary module cache can be removed;
		// -trimpath: compiled dependencies are cached whatever the
		// module cache's directory, so later runs reuse them.
		"GOFLAGS=-mod=mod -modcacherw -trimpath",
		// The dependencies come from the local module cache, verified
		// when they were downloaded; offline, the checksum database
		// cannot be asked again.
		"GOSUMDB=off", "GONOPROXY=", "GOPRIVATE=",
		"GOBIN="+gobin, "GOWORK=off", "GOTOOLCHAIN=local",
	)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("go install did not finish within %v:\n%s", budget(t), out)
	}
	if err != nil {
		t.Fatalf("go install %s/cmd/...@%s: %v\n%s", modPath, ver, err, out)
	}
	t.Logf("go install %s/cmd/...@%s took %v", modPath, ver, time.Since(start).Round(time.Millisecond))
	for _, c := range commands {
		if fi, err := os.Stat(filepath.Join(gobin, c)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("go install built no %s in GOBIN: %v", c, err)
		}
	}
	checkVersion(t, ctx, filepath.Join(gobin, "latchd"), ver)
}

// checkVersion: a binary installed by version reports that version.
func checkVersion(t *testing.T, ctx context.Context, bin, ver string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", filepath.Base(bin), err, out)
	}
	if !strings.Contains(string(out), ver) {
		t.Errorf("%s --version = %q, want it to name %s", filepath.Base(bin), out, ver)
	}
}

// budget bounds the install: ten minutes, or less when the test binary's
// own deadline comes sooner.
func budget(t *testing.T) time.Duration {
	d := 10 * time.Minute
	if dl, ok := t.Deadline(); ok {
		d = min(d, time.Until(dl)-30*time.Second)
	}
	return max(d, time.Second)
}

func goEnv(t *testing.T, goBin, key string) string {
	t.Helper()
	out, err := exec.Command(goBin, "env", key).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", key, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" || v == os.DevNull {
		t.Fatalf("go env %s is empty: not inside the module", key)
	}
	return v
}

// readModule returns the module path and the go.mod file.
func readModule(t *testing.T, root string) (string, []byte) {
	t.Helper()
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(goMod)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`), goMod
		}
	}
	t.Fatal("go.mod names no module")
	return "", nil
}

func isCheckout(root string) bool {
	return exec.Command("git", "-C", root, "rev-parse", "--git-dir").Run() == nil
}

// pseudoVersion names the checkout as a proxy would name its HEAD commit:
// v0.0.0-<commit time, UTC>-<12 hex digits of the commit>.
func pseudoVersion(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "log", "-1", "--format=%ct %H").Output()
	if err != nil {
		t.Fatalf("git log: %v", err)
	}
	var sec int64
	var hash string
	if _, err := fmt.Sscan(string(out), &sec, &hash); err != nil || len(hash) < 12 {
		t.Fatalf("git log printed %q", out)
	}
	return "v0.0.0-" + time.Unix(sec, 0).UTC().Format("20060102150405") + "-" + hash[:12]
}

// trackedFiles lists the files a module zip of the checkout holds: the
// tracked regular files that exist, outside vendor directories and
// directories of other modules (a go.mod of their own).
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	names := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	nested := map[string]bool{}
	for _, n := range names {
		if path.Base(n) == "go.mod" && n != "go.mod" {
			nested[path.Dir(n)] = true
		}
	}
	var files []string
	for _, n := range names {
		if n == "" || inVendor(n) || inNested(n, nested) {
			continue
		}
		fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(n)))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxZipFile {
			continue // deleted and not yet committed, a link, or too big
		}
		files = append(files, n)
	}
	return files
}

func inVendor(name string) bool {
	return strings.HasPrefix(name, "vendor/") || strings.Contains(name, "/vendor/")
}

func inNested(name string, nested map[string]bool) bool {
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		if nested[d] {
			return true
		}
	}
	return false
}

// writeProxy lays out a GOPROXY directory serving the module at ver:
// <module>/@v/list, <ver>.info, <ver>.mod and <ver>.zip.
func writeProxy(t *testing.T, dir, root, modPath, ver string, goMod []byte, files []string) {
	t.Helper()
	vdir := filepath.Join(dir, filepath.FromSlash(modPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(struct{ Version, Time string }{ver, time.Now().UTC().Format(time.RFC3339)})
	zipped, err := moduleZip(root, modPath+"@"+ver, files)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"list": []byte(ver + "\n"), ver + ".info": info, ver + ".mod": goMod, ver + ".zip": zipped,
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// moduleZip writes the files under prefix ("module@version/") as the go
// command expects a module zip, within its size limits.
func moduleZip(root, prefix string, files []string) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var total int64
	for _, n := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(n)))
		if err != nil {
			return nil, err
		}
		total += int64(len(data))
		switch {
		case total > maxZipFile:
			return nil, errors.New("module zip: the tracked files exceed 500 MiB")
		case n == "go.mod" && len(data) > maxGoMod, n == "LICENSE" && len(data) > maxLicense:
			return nil, errors.New("module zip: " + n + " exceeds 16 MiB")
		}
		w, err := zw.Create(prefix + "/" + n)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fileURL is dir as a file:// URL for GOPROXY.
func fileURL(dir string) string {
	d := filepath.ToSlash(dir)
	if !strings.HasPrefix(d, "/") {
		d = "/" + d // C:/... on Windows
	}
	return "file://" + d
}
