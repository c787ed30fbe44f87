package metrics

import (
	"strings"
	"testing"
)

func TestOutputCollector(t *testing.T) {
	reg := NewRegistry(nil)
	used := int64(1234)
	reg.MustRegister(OutputCollectors(func() int64 { return used }, 64<<20)...)
	var b strings.Builder
	if _, err := reg.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"latchd_output_unsent_bytes 1234\n", "latchd_output_budget_bytes 6.7108864e+07\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}
