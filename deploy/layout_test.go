package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeLayout: the README's Layout section names every top-level
// directory and every internal/ package of the tree, and nothing that is
// not there.
func TestReadmeLayout(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "## Layout")
	if !ok {
		t.Fatal("README.md has no Layout section")
	}
	_, block, _ := strings.Cut(sec, "```\n")
	block, _, _ = strings.Cut(block, "```")
	var listed []string
	for _, line := range strings.Split(block, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			listed = append(listed, strings.TrimSuffix(f[0], "/"))
		}
	}
	for _, p := range listed {
		if fi, err := os.Stat(filepath.Join("..", p)); err != nil || !fi.IsDir() {
			t.Errorf("README Layout lists %s, which is not a directory of the tree", p)
		}
	}
	hidden := regexp.MustCompile(`^[._]|^(bin|dist|data|testdata)$`)
	var want []string
	for _, parent := range []string{".", "internal", "cmd"} {
		ents, err := os.ReadDir(filepath.Join("..", parent))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if !e.IsDir() || hidden.MatchString(e.Name()) || (parent == "." && (e.Name() == "internal" || e.Name() == "cmd")) {
				continue
			}
			want = append(want, filepath.ToSlash(filepath.Join(parent, e.Name())))
		}
	}
	for _, p := range want {
		if !slices.Contains(listed, p) {
			t.Errorf("README Layout does not list %s", p)
		}
	}
}
