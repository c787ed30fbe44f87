package metrics

import (
	"testing"

	"github.com/latchd/latchd/internal/buildinfo"
)

func TestBuildInfoMetric(t *testing.T) {
	mfs, err := NewRegistry(nil).Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := buildinfo.Get()
	for _, mf := range mfs {
		if mf.GetName() != "latchd_build_info" {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["version"] != want.Version || labels["commit"] != want.Commit || labels["goversion"] != want.GoVersion {
			t.Fatalf("latchd_build_info = %v %v; want 1 with %+v", m.GetGauge().GetValue(), labels, want)
		}
		return
	}
	t.Fatal("no latchd_build_info in a scrape")
}
