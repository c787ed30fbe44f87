package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/httpfast"
	"github.com/latchd/latchd/server"
)

// options are the command line, after flags and LATCHD_* variables.
type options struct {
	host, authToken, authTokenFile string
	logLevel, logFormat, debugAddr string
	tlsCert, tlsKey, fenceFile     string
	metricsAddr                    string
	maxConnsPerIP                  int
	port, httpPort                 int
	defaultLeaseTTL, readTimeout   int
	gcMaxIdle, httpSessionTTL      int
	maxLocks, maxWaiters, maxConns int
	eventLoops, shards             int
	directHandOff                  bool
	httpMaxSessions                int
	httpRateLimit                  float64
	autoRelease, version           bool
	tls                            *tls.Config // loaded from tlsCert and tlsKey

	// Cluster mode (on with raftDir).
	raftDir, nodeID, raftAddr, raftAdvertise string
	advertiseAddr, clusterPeers, join        string
	advertiseHTTPAddr                        string
	raftAuthTokenFile, adminToken            string
	adminTokenFile, raftLogLevel             string
	bootstrap                                bool
	raftAuthToken                            string // read from raftAuthTokenFile
}

// envName maps a flag to its environment variable: --max-locks is
// LATCHD_MAX_LOCKS.
func envName(flagName string) string {
	return "LATCHD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseOptions reads args, then fills every flag not given on the command
// line from its environment variable: flags win.
func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("latchd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to bind")
	fs.IntVar(&o.port, "port", 6388, "TCP port")
	fs.IntVar(&o.httpPort, "http-port", 0, "HTTP REST port (0 = off)")
	fs.IntVar(&o.defaultLeaseTTL, "default-lease-ttl", 33, "lease TTL in seconds when a request names none")
	fs.IntVar(&o.maxLocks, "max-locks", 1024, "cap on keys in memory (0 = no cap)")
	fs.IntVar(&o.maxWaiters, "max-waiters", 0, "cap on each key's queue (0 = no cap)")
	fs.IntVar(&o.maxConns, "max-connections", 0, "cap on open TCP connections (0 = no cap)")
	fs.IntVar(&o.readTimeout, "read-timeout", 23, "seconds a connection may sit on a partial request")
	fs.BoolVar(&o.autoRelease, "auto-release-on-disconnect", true, "release what a connection held when it closes")
	fs.IntVar(&o.gcMaxIdle, "gc-max-idle", 60, "seconds an idle key is kept")
	fs.StringVar(&o.authToken, "auth-token", "", "shared secret clients must send with auth")
	fs.StringVar(&o.authTokenFile, "auth-token-file", "", "file holding the shared secret")
	fs.IntVar(&o.eventLoops, "event-loops", 0, "gnet event loops (0 = one per core but one, at least one)")
	fs.IntVar(&o.shards, "shards", 64, "engine shards (a power of two)")
	fs.BoolVar(&o.directHandOff, "direct-handoff", true, "write a grant to an idle waiter's socket from the granting goroutine instead of waking its event loop")
	fs.IntVar(&o.httpSessionTTL, "http-session-ttl", 60, "seconds a REST session lives without a request")
	fs.IntVar(&o.httpMaxSessions, "http-max-sessions", 100000, "cap on open REST sessions; past it POST /v1/sessions answers 429 (0 = no cap)")
	fs.Float64Var(&o.httpRateLimit, "http-rate-limit-per-ip", 0, "REST requests per second per client IP (0 = off)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "console", "console or json")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate: serve TLS on both listeners (with --tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.IntVar(&o.maxConnsPerIP, "max-connections-per-ip", 0, "cap on open TCP connections from one IP (0 = no cap)")
	fs.StringVar(&o.fenceFile, "fence-state-file", "", "fence-counter journal: tokens never go back, even across crashes and clock steps")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address (the REST port serves it too)")
	fs.StringVar(&o.debugAddr, "debug-addr", "", "serve net/http/pprof on this address (off when empty)")
	fs.StringVar(&o.raftDir, "raft-dir", "", "cluster mode: directory of this node's raft log and snapshots (off when empty)")
	fs.StringVar(&o.nodeID, "node-id", "", "cluster mode: this node's ID, unique in the cluster")
	fs.StringVar(&o.raftAddr, "raft-addr", "127.0.0.1:7388", "cluster mode: host:port of the raft transport")
	fs.StringVar(&o.raftAdvertise, "raft-advertise", "", "cluster mode: raft address peers dial, when --raft-addr binds a wildcard")
	fs.StringVar(&o.advertiseAddr, "advertise-addr", "", "cluster mode: host:port clients reach this node's TCP port at (default --host:--port)")
	fs.StringVar(&o.advertiseHTTPAddr, "advertise-http-addr", "", "cluster mode: host:port REST clients reach this node at, named in 503 not_leader (default --host:--http-port)")
	fs.BoolVar(&o.bootstrap, "bootstrap", false, "cluster mode: write the first configuration (this node, or --cluster-peers) into an empty raft dir")
	fs.StringVar(&o.clusterPeers, "cluster-peers", "", "cluster mode: initial voters, id=raft_addr=client_addr,... (with --bootstrap on each)")
	fs.StringVar(&o.join, "join", "", "cluster mode: HTTP addresses of members to ask to add this node, host:port,...")
	fs.StringVar(&o.raftAuthTokenFile, "raft-auth-token-file", "", "cluster mode: file holding the secret nodes prove to each other")
	fs.StringVar(&o.adminToken, "admin-token", "", "bearer token for the cluster admin API (/v1/admin/*; off when empty)")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "file holding the admin token")
	fs.StringVar(&o.raftLogLevel, "raft-log-level", "warn", "hashicorp/raft log level: off, error, warn, info, debug")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %v", envName(f.Name), v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if o.authTokenFile != "" {
		tok, err := readSecret(o.authTokenFile, "auth token")
		if err != nil {
			return nil, err
		}
		o.authToken = tok
	}
	if err := o.clusterOptions(); err != nil {
		return nil, err
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, fmt.Errorf("--tls-cert and --tls-key go together")
	}
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("TLS key pair: %w", err)
		}
		o.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if o.logFormat != "console" && o.logFormat != "json" {
		return nil, fmt.Errorf("--log-format must be console or json, got %q", o.logFormat)
	}
	if o.port < 0 || o.port > 65535 || o.httpPort < 0 || o.httpPort > 65535 {
		return nil, fmt.Errorf("ports must be within 0-65535")
	}
	return o, nil
}

func secs(n int) time.Duration { return time.Duration(n) * time.Second }

func (o *options) engineConfig() (engine.Config, error) {
	c := engine.DefaultConfig()
	c.Shards = o.shards
	c.MaxKeys = o.maxLocks
	c.MaxWaiters = o.maxWaiters
	c.DefaultTTL = secs(o.defaultLeaseTTL)
	c.GCMaxIdle = secs(o.gcMaxIdle)
	return c, c.Validate()
}

func (o *options) serverConfig() (server.Config, error) {
	c := server.DefaultConfig()
	c.Addr = hostPort(o.host, o.port)
	c.EventLoops = o.eventLoops
	c.DirectHandOff = o.directHandOff
	c.ReadTimeout = secs(o.readTimeout)
	c.MaxConnections = o.maxConns
	c.AuthToken = o.authToken
	c.AutoRelease = o.autoRelease
	c.TLS = o.tls
	c.MaxConnectionsPerIP = o.maxConnsPerIP
	return c, c.Validate()
}

func (o *options) httpConfig() (httpfast.Config, error) {
	c := httpfast.DefaultConfig()
	c.Addr = hostPort(o.host, o.httpPort)
	c.SessionTTL = secs(o.httpSessionTTL)
	c.AuthToken = o.authToken
	c.RateLimitPerIP = o.httpRateLimit
	c.MaxSessions = o.httpMaxSessions
	c.TLS = o.tls
	return c, c.Validate()
}

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("%s:%d", host, port)
}
