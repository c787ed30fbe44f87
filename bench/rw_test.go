package bench

import "testing"

func TestRWPickRatio(t *testing.T) {
	for _, tt := range []struct {
		ratio    float64
		min, max int
	}{{0, 0, 0}, {1, 10000, 10000}, {0.9, 8800, 9200}, {0.5, 4800, 5200}} {
		p := newRWPick(tt.ratio, 3)
		reads := 0
		for range 10000 {
			if p.read() {
				reads++
			}
		}
		if reads < tt.min || reads > tt.max {
			t.Errorf("ratio %v: %d reads of 10000; want %d to %d", tt.ratio, reads, tt.min, tt.max)
		}
	}
	cfg := DefaultConfig()
	cfg.Mode, cfg.ReadRatio = ModeRW, 1.5
	if err := cfg.Validate(); err == nil || err.Error() != "bench: read ratio must be in [0, 1]" {
		t.Errorf("a read ratio of 1.5: %v", err)
	}
}
