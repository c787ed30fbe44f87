package deploy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// There is no docker here, so these tests do by hand what the Dockerfile's
// build stage does, in its order: each COPY from the build context (the
// tree minus .dockerignore), each RUN in the work directory with the
// stage's ARG and ENV values. A go.mod that names a module by a local path
// the copies so far do not hold fails go mod download, as in docker.

// step is one instruction of a Dockerfile build stage.
type step struct {
	op   string // COPY, RUN, ENV, ARG or WORKDIR
	args string
}

// buildStage returns the instructions of the stage named name, with
// continuation lines joined and comments dropped.
func buildStage(dockerfile, name string) ([]step, error) {
	var steps []step
	in := false
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(dockerfile))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if l, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(l + " ")
			continue
		}
		cur.WriteString(line)
		inst := cur.String()
		cur.Reset()
		op, args, _ := strings.Cut(inst, " ")
		op = strings.ToUpper(op)
		if op == "FROM" {
			f := strings.Fields(args)
			in = len(f) == 3 && strings.EqualFold(f[1], "AS") && f[2] == name
			continue
		}
		if in {
			steps = append(steps, step{op: op, args: strings.TrimSpace(args)})
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no stage named %q", name)
	}
	return steps, sc.Err()
}

// ignorePattern is one line of .dockerignore.
type ignorePattern struct {
	re     *regexp.Regexp
	negate bool
}

// readDockerignore parses a .dockerignore: Go's filepath.Match syntax plus
// ** for any number of directories, ! to re-include, the last match wins.
func readDockerignore(file string) ([]ignorePattern, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ignorePattern
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := ignorePattern{}
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			p.negate, line = true, rest
		}
		line = strings.TrimPrefix(path.Clean("/"+line), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(?:.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		p.re = regexp.MustCompile(re.String())
		out = append(out, p)
	}
	return out, nil
}

// ignored reports whether rel (slash-separated, relative to the context)
// is left out of the context: it or a directory above it matches.
func ignored(pats []ignorePattern, rel string) bool {
	out := false
	for _, p := range pats {
		for dir := rel; dir != "." && dir != "/"; dir = path.Dir(dir) {
			if p.re.MatchString(dir) {
				out = !p.negate
				break
			}
		}
	}
	return out
}

// copyContext copies src (a path in the context) to dst as COPY does: a
// directory's contents, not the directory itself, minus what .dockerignore
// leaves out.
func copyContext(ctxDir string, pats []ignorePattern, src, dst string) error {
	src = path.Clean(src)
	root := filepath.Join(ctxDir, filepath.FromSlash(src))
	info, err := os.Stat(root)
	if err != nil || (src != "." && ignored(pats, src)) {
		return fmt.Errorf("COPY %s: not in the build context", src)
	}
	if !info.IsDir() {
		if strings.HasSuffix(dst, "/") || isDir(dst) {
			dst = filepath.Join(dst, filepath.Base(root))
		}
		return copyFile(root, dst)
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(ctxDir, p)
		if rel != "." && ignored(pats, filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		inner, _ := filepath.Rel(root, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, inner), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil // sockets, symlinks: none in a Go tree's build
		}
		return copyFile(p, filepath.Join(dst, inner))
	})
}

func isDir(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.IsDir()
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // the copy's error is the one to report
		return err
	}
	return out.Close()
}

// simBuild is a build stage run by hand.
type simBuild struct {
	ctxDir string // the build context
	root   string // stands for / in the image: WORKDIR and /out live here
	env    map[string]string
	work   string
	log    strings.Builder
}

// inRoot maps a path of the image to this machine.
func (b *simBuild) inRoot(p string) string {
	if path.IsAbs(p) {
		return filepath.Join(b.root, filepath.FromSlash(p))
	}
	return filepath.Join(b.work, filepath.FromSlash(p))
}

// runStage runs steps in order; the first failure stops it.
func (b *simBuild) runStage(ctx context.Context, steps []step) error {
	pats, err := readDockerignore(filepath.Join(b.ctxDir, ".dockerignore"))
	if err != nil {
		return err
	}
	b.env, b.work = map[string]string{}, b.root
	for _, s := range steps {
		if err := b.do(ctx, pats, s); err != nil {
			return fmt.Errorf("%s %s: %w", s.op, s.args, err)
		}
	}
	return nil
}

func (b *simBuild) do(ctx context.Context, pats []ignorePattern, s step) error {
	switch s.op {
	case "WORKDIR":
		b.work = b.inRoot(s.args)
		return os.MkdirAll(b.work, 0o755)
	case "ARG", "ENV":
		for _, kv := range strings.Fields(s.args) {
			k, v, _ := strings.Cut(kv, "=")
			if _, set := b.env[k]; s.op == "ARG" && set {
				continue // a --build-arg would win; none here
			}
			b.env[k] = v
		}
	case "COPY":
		f := strings.Fields(s.args)
		for len(f) > 0 && strings.HasPrefix(f[0], "--") {
			if strings.HasPrefix(f[0], "--from") {
				return errors.New("COPY --from in the build stage is not simulated")
			}
			f = f[1:]
		}
		if len(f) < 2 {
			return errors.New("COPY needs a source and a destination")
		}
		dst := b.inRoot(f[len(f)-1])
		if strings.HasSuffix(f[len(f)-1], "/") || f[len(f)-1] == "." {
			dst += string(filepath.Separator)
		}
		for _, src := range f[:len(f)-1] {
			if err := copyContext(b.ctxDir, pats, src, dst); err != nil {
				return err
			}
		}
	case "RUN":
		return b.run(ctx, s.args)
	default:
		return fmt.Errorf("instruction %s is not simulated", s.op)
	}
	return nil
}

// run runs a RUN's shell command, its /out and /src paths mapped under
// b.root, first offline from the module cache, then, if a module is
// missing from it, through the Go proxy.
func (b *simBuild) run(ctx context.Context, cmd string) error {
	for strings.HasPrefix(cmd, "--") { // --mount=type=cache,...: the local caches serve
		_, cmd, _ = strings.Cut(cmd, " ")
		cmd = strings.TrimSpace(cmd)
	}
	cmd = regexp.MustCompile(`(^|[\s"'=])/(out|src)\b`).ReplaceAllString(cmd, "${1}"+b.root+"/${2}")
	var err error
	for _, proxy := range []string{"off", os.Getenv("GOPROXY")} {
		c := exec.CommandContext(ctx, "sh", "-c", cmd)
		c.Dir = b.work
		c.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOWORK=off", "GOPROXY="+proxy)
		for k, v := range b.env {
			c.Env = append(c.Env, k+"="+v)
		}
		var out strings.Builder
		c.Stdout, c.Stderr = &out, &out
		err = c.Run()
		fmt.Fprintf(&b.log, "$ %s\n%s", cmd, out.String())
		if err == nil {
			return nil
		}
		if !strings.Contains(out.String(), "GOPROXY=off") {
			return err // the output is in b.log
		}
	}
	return err
}

// TestDockerBuildStage builds what deploy/Dockerfile's build stage builds,
// from the context .dockerignore leaves, in the Dockerfile's order, and
// runs the binaries it made. The final stage's files from the context
// must be in it too.
func TestDockerBuildStage(t *testing.T) {
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	steps, err := buildStage(string(df), "build")
	if err != nil {
		t.Fatal(err)
	}
	ctxDir, _ := filepath.Abs("..")
	b := &simBuild{ctxDir: ctxDir, root: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := b.runStage(ctx, steps); err != nil {
		t.Fatalf("the build stage fails: %v\n%s", err, b.log.String())
	}
	for c, arg := range map[string]string{"latchd": "--version", "latchctl": "version"} {
		out, err := exec.CommandContext(ctx, filepath.Join(b.root, "out", c), arg).CombinedOutput()
		if err != nil || !strings.Contains(string(out), " dev ") {
			t.Errorf("%s %s: %v: %q, want the version ARG's default (dev)", c, arg, err, out)
		}
	}
	// The final stage's COPY from the context (not --from=build).
	pats, err := readDockerignore(filepath.Join(ctxDir, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for m := range strings.Lines(string(df)) {
		f := strings.Fields(m)
		if len(f) >= 3 && f[0] == "COPY" && !strings.HasPrefix(f[1], "--") && !strings.Contains(m, "--from") {
			for _, src := range f[1 : len(f)-1] {
				if _, err := os.Stat(filepath.Join(ctxDir, src)); err != nil || (src != "." && ignored(pats, src)) {
					t.Errorf("%s: %s is not in the build context", strings.TrimSpace(m), src)
				}
			}
		}
	}
}

// TestDockerBuildStageCatchesLocalReplace: the simulation fails, as docker
// does, when go mod download runs before the copy that brings a module
// go.mod replaces with a local path; copying the tree first passes.
func TestDockerBuildStageCatchesLocalReplace(t *testing.T) {
	ctxDir := t.TempDir()
	files := map[string]string{
		"go.mod":               "module example.com/app\n\ngo 1.26\n\nrequire example.com/x v0.0.0\n\nreplace example.com/x => ./third_party/x\n",
		"go.sum":               "",
		"main.go":              "package main\n\nimport \"example.com/x\"\n\nfunc main() { x.F() }\n",
		"third_party/x/go.mod": "module example.com/x\n\ngo 1.26\n",
		"third_party/x/x.go":   "package x\n\nfunc F() {}\n",
		".dockerignore":        ".git\n",
	}
	for name, body := range files {
		p := filepath.Join(ctxDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, tt := range []struct {
		name, dockerfile string
		wantErr          bool
	}{
		{name: "download before the tree", wantErr: true, dockerfile: "FROM golang AS build\nWORKDIR /src\nCOPY go.mod go.sum ./\nRUN go mod download\nCOPY . .\nRUN go build -o /out/app .\n"},
		{name: "tree first", dockerfile: "FROM golang AS build\nWORKDIR /src\nCOPY . .\nRUN go mod download\nRUN go build -o /out/app .\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			steps, err := buildStage(tt.dockerfile, "build")
			if err != nil {
				t.Fatal(err)
			}
			b := &simBuild{ctxDir: ctxDir, root: t.TempDir()}
			err = b.runStage(ctx, steps)
			if (err != nil) != tt.wantErr {
				t.Fatalf("build stage error %v, want an error: %v\n%s", err, tt.wantErr, b.log.String())
			}
			if err != nil && !strings.Contains(err.Error(), "go mod download") {
				t.Fatalf("failed at %v, want at go mod download", err)
			}
		})
	}
}

// TestDockerignore: the build context leaves out what the image does not
// need, and keeps what it does.
func TestDockerignore(t *testing.T) {
	pats, err := readDockerignore("../.dockerignore")
	if err != nil || pats == nil {
		t.Fatalf(".dockerignore: %v (%d patterns)", err, len(pats))
	}
	for rel, want := range map[string]bool{
		".git": true, ".git/HEAD": true, "bin/latchd": true, "dist/x.tar.gz": true, "data/n1/wal": true,
		"latchd": true, "engine/engine_test.go": true, "codec/testdata/fuzz/x": true, "engine.test": true,
		"docs/img/a.png": true,
		"go.mod":         false, "go.sum": false, "LICENSE": false, "cmd/latchd/main.go": false,
		"httpfast/openapi.json": false, "httpfast/ui/index.html": false, "cmd/latchd/latchd": false,
	} {
		if got := ignored(pats, rel); got != want {
			t.Errorf("%s: left out %v, want %v", rel, got, want)
		}
	}
}
