package bench

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Target
		wantErr bool
	}{
		{name: "redis", in: "redis://127.0.0.1:6379", want: Target{Name: "redis://127.0.0.1:6379", Kind: KindRedis, Addr: "127.0.0.1:6379"}},
		{name: "named tcp", in: "ceiling=tcp://127.0.0.1:7000", want: Target{Name: "ceiling", Kind: KindTCP, Addr: "127.0.0.1:7000"}},
		{name: "http", in: "http://localhost:6389/", want: Target{Name: "http://localhost:6389", Kind: KindHTTP, Addr: "localhost:6389"}},
		{name: "etcd", in: "etcd3=etcd://127.0.0.1:2379", want: Target{Name: "etcd3", Kind: KindEtcd, Addr: "127.0.0.1:2379"}},
		{name: "unknown scheme", in: "memcache://127.0.0.1:1", wantErr: true},
		{name: "no port", in: "redis://127.0.0.1", wantErr: true},
		{name: "path", in: "tcp://127.0.0.1:1/x", wantErr: true},
		{name: "no scheme", in: "127.0.0.1:6379", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTarget(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseTarget(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseWorkers(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []int
		wantErr bool
	}{
		{name: "list", in: "1,10,50", want: []int{1, 10, 50}},
		{name: "spaces", in: " 2 , 3", want: []int{2, 3}},
		{name: "zero", in: "0", wantErr: true},
		{name: "empty item", in: "1,,2", wantErr: true},
		{name: "word", in: "ten", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseWorkers(tt.in)
			if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseWorkers(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{name: "default", mod: func(*Config) {}},
		{name: "no target", mod: func(c *Config) { c.Targets = nil }, wantErr: "no target"},
		{name: "no workers", mod: func(c *Config) { c.Workers = nil }, wantErr: "no worker"},
		{name: "zero worker", mod: func(c *Config) { c.Workers = []int{0} }, wantErr: "must be > 0"},
		{name: "no rounds", mod: func(c *Config) { c.Rounds = 0 }, wantErr: "rounds or duration"},
		{name: "duration only", mod: func(c *Config) { c.Rounds, c.Duration = 0, time.Second }},
		{name: "bad mode", mod: func(c *Config) { c.Mode = "spin" }, wantErr: "unknown mode"},
		{name: "sem without limit", mod: func(c *Config) { c.Mode, c.Limit = ModeSem, 0 }, wantErr: "limit"},
		{name: "fractional timeout", mod: func(c *Config) { c.AcquireTimeout = 1500 * time.Millisecond }, wantErr: "whole seconds"},
		{name: "negative rate", mod: func(c *Config) { c.Rate = -1 }, wantErr: "rate"},
		{name: "key with space", mod: func(c *Config) { c.KeyPrefix = "a b" }, wantErr: "key prefix"},
		{name: "redis twophase", mod: func(c *Config) {
			c.Mode = ModeTwoPhase
			c.Targets = append(c.Targets, Target{Name: "r", Kind: KindRedis, Addr: "x:1"})
		}, wantErr: "no queue"},
		{name: "etcd sem", mod: func(c *Config) {
			c.Mode, c.Limit = ModeSem, 2
			c.Targets = append(c.Targets, Target{Name: "e", Kind: KindEtcd, Addr: "x:1"})
		}, wantErr: "lock and contended"},
		{name: "etcd contended", mod: func(c *Config) {
			c.Mode = ModeContended
			c.Targets = append(c.Targets, Target{Name: "e", Kind: KindEtcd, Addr: "x:1"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v; want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, o Options)
		wantErr bool
	}{
		{name: "defaults", args: nil, check: func(t *testing.T, o Options) {
			want := DefaultConfig()
			if !reflect.DeepEqual(o.Config, want) {
				t.Fatalf("Config = %+v; want %+v", o.Config, want)
			}
		}},
		{name: "README command", args: []string{"--addr", "127.0.0.1:7000", "--workers", "1,10,50,100,200,500", "--rounds", "1000"}, check: func(t *testing.T, o Options) {
			c := o.Config
			if c.Targets[0].Addr != "127.0.0.1:7000" || c.Targets[0].Kind != KindTCP || len(c.Workers) != 6 || c.Workers[5] != 500 || c.Rounds != 1000 {
				t.Fatalf("Config = %+v", c)
			}
		}},
		{name: "http transport", args: []string{"--transport", "http", "--http-addr", "127.0.0.1:9", "--mode", "sem", "--limit", "3"}, check: func(t *testing.T, o Options) {
			c := o.Config
			if c.Targets[0] != (Target{Name: "latchd", Kind: KindHTTP, Addr: "127.0.0.1:9"}) || c.Mode != ModeSem || c.Limit != 3 {
				t.Fatalf("Config = %+v", c)
			}
		}},
		{name: "compare twice", args: []string{"--compare", "redis://127.0.0.1:6379", "--compare", "ceiling=tcp://127.0.0.1:1"}, check: func(t *testing.T, o Options) {
			ts := o.Config.Targets
			if len(ts) != 3 || ts[1].Kind != KindRedis || ts[2].Name != "ceiling" {
				t.Fatalf("Targets = %+v", ts)
			}
		}},
		{name: "open loop duration", args: []string{"--duration", "2s", "--rate", "5000", "--ttl", "5", "--timeout", "3", "--json", "--plot", "x.svg"}, check: func(t *testing.T, o Options) {
			c := o.Config
			if c.Duration != 2*time.Second || c.Rate != 5000 || c.LeaseTTL != 5*time.Second || c.AcquireTimeout != 3*time.Second || !o.JSON || o.Plot != "x.svg" {
				t.Fatalf("Options = %+v", o)
			}
		}},
		{name: "bad transport", args: []string{"--transport", "udp"}, wantErr: true},
		{name: "bad workers", args: []string{"--workers", "1,x"}, wantErr: true},
		{name: "bad compare", args: []string{"--compare", "ftp://a:1"}, wantErr: true},
		{name: "bad mode", args: []string{"--mode", "spin"}, wantErr: true},
		{name: "negative ttl", args: []string{"--ttl", "-1"}, wantErr: true},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := ParseArgs(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseArgs(%q) error = %v; want error %v", tt.args, err, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}
