package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/httpfast"
	"github.com/latchd/latchd/internal/listen"
	"github.com/latchd/latchd/internal/metrics"
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
	maxKeysPerOwner                int
	eventLoops, shards             int
	loopRawWait                    bool
	httpMaxSessions, httpMaxConns  int
	shutdownTimeout                int
	httpMaxSessionsPerIP           int
	httpMaxConnsPerIP              int
	authFailuresPerMinute          int
	writeTimeout, maxOutputMB      int
	maxConnOutputKB, maxStatsKB    int
	sendBufferKB                   int
	directHandOff                  bool
	httpRateLimit                  float64
	autoRelease, version           bool
	metricsPublic                  bool
	authFromFile                   bool        // the secret was read from authTokenFile
	tls                            *tls.Config // loaded from tlsCert and tlsKey

	// Cluster mode (on with raftDir).
	raftDir, nodeID, raftAddr, raftAdvertise string
	advertiseAddr, clusterPeers, join        string
	advertiseHTTPAddr                        string
	raftAuthTokenFile, adminToken            string
	adminTokenFile, raftLogLevel             string
	raftBatchWait                            time.Duration
	bootstrap                                bool
	raftAuthToken                            string // read from raftAuthTokenFile

	// dflockd compatibility (compat.go).
	leaseSweepInterval, gcInterval int
	debug                          bool
	warnings                       []warning // logged at warn once the logger exists
}

// envName maps a flag to its environment variable: --max-locks is
// LATCHD_MAX_LOCKS. envNames adds the DFLOCKD_* fallbacks.
func envName(flagName string) string {
	return "LATCHD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// defaultMaxWaiters caps each key's queue. With no cap one connection
// may queue on every key (e with no deadline), so a client could fill
// memory at ~165 bytes per waiter: 2,000 connections x 1,024 keys took
// 350 MB in 3 s. With it, waiters are bounded by --max-locks x this
// (~170 MB at the defaults).
const defaultMaxWaiters = 1000

// parseOptions reads args, then fills every flag not given on the command
// line from its environment variables: flags win, then LATCHD_*, then
// DFLOCKD_* (compat.go).
func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("latchd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to bind")
	fs.IntVar(&o.port, "port", 6388, "TCP port")
	fs.IntVar(&o.httpPort, "http-port", 0, "HTTP REST port (0 = off)")
	fs.IntVar(&o.defaultLeaseTTL, "default-lease-ttl", 33, "lease TTL in seconds when a request names none")
	fs.IntVar(&o.maxLocks, "max-locks", 1024, "cap on keys in memory (0 = no cap)")
	fs.IntVar(&o.maxWaiters, "max-waiters", defaultMaxWaiters, "cap on each key's queue (0 = no cap)")
	fs.IntVar(&o.maxKeysPerOwner, "max-keys-per-owner", 0, "cap on the keys one TCP connection or REST session holds or waits on at once (0 = a quarter of --max-locks; no cap when --max-locks is 0)")
	fs.IntVar(&o.maxConns, "max-connections", 0, "cap on open TCP connections (0 = derived from the file descriptor limit)")
	fs.IntVar(&o.httpMaxConns, "http-max-connections", 0, "cap on open REST connections; past it a connection gets 503 and is closed (0 = derived from the file descriptor limit)")
	fs.IntVar(&o.shutdownTimeout, "shutdown-timeout", 5, "seconds a graceful stop gives holders to release before closing everything (0 = until they have; a second signal cuts it short)")
	fs.IntVar(&o.readTimeout, "read-timeout", 23, "seconds a connection may sit on a partial request")
	fs.IntVar(&o.writeTimeout, "write-timeout", 10, "seconds a connection may leave its answers unread (nothing of them sent) before it is closed (0 = off)")
	fs.IntVar(&o.maxOutputMB, "max-output-mb", 64, "MiB of unsent answers for all clients together; past it the largest holders are closed and stats answer totals only (0 = no budget)")
	fs.IntVar(&o.maxConnOutputKB, "max-conn-output-kb", 4096, "KiB of unsent answers one TCP connection may hold before it is closed")
	fs.IntVar(&o.maxStatsKB, "max-stats-kb", 1024, "KiB cap on a stats answer's JSON; a bigger state answers a truncated list with totals")
	fs.IntVar(&o.sendBufferKB, "send-buffer-kb", 256, "KiB of kernel send buffer per connection, TCP and REST; bounds what the kernel keeps for a client that does not read (0 = the kernel's autotuning, up to 4 MiB each)")
	fs.BoolVar(&o.autoRelease, "auto-release-on-disconnect", true, "release what a connection held when it closes")
	fs.IntVar(&o.gcMaxIdle, "gc-max-idle", 60, "seconds an idle key is kept")
	fs.StringVar(&o.authToken, "auth-token", "", "shared secret clients must send with auth")
	fs.StringVar(&o.authTokenFile, "auth-token-file", "", "file holding the shared secret")
	fs.IntVar(&o.eventLoops, "event-loops", 0, "gnet event loops (0 = one per core but one, at least one)")
	fs.BoolVar(&o.loopRawWait, "loop-raw-wait", true, "no effect: accepted so that existing configurations still start (an idle event loop waits in gnet's ordinary epoll_wait)")
	fs.IntVar(&o.shards, "shards", 64, "engine shards (a power of two)")
	fs.BoolVar(&o.directHandOff, "direct-handoff", true, "write a grant to an idle waiter's socket from the granting goroutine instead of waking its event loop")
	fs.IntVar(&o.httpSessionTTL, "http-session-ttl", 60, "seconds a REST session lives without a request")
	fs.IntVar(&o.httpMaxSessions, "http-max-sessions", 100000, "cap on open REST sessions; past it POST /v1/sessions answers 429 (0 = no cap)")
	fs.IntVar(&o.httpMaxSessionsPerIP, "http-max-sessions-per-ip", 1000, "cap on REST sessions one client IP may hold open; past it POST /v1/sessions answers 429 (0 = no cap)")
	fs.IntVar(&o.httpMaxConnsPerIP, "http-max-connections-per-ip", 1000, "cap on open REST connections from one client IP (an IPv6 client is its /64); past it a connection gets 429 and is closed (0 = no cap)")
	fs.IntVar(&o.authFailuresPerMinute, "auth-failures-per-minute", 60, "failed auths (TCP auth, REST bearer token) one IP may make at once and then per minute; past it, it is refused without a check (0 = no limit)")
	fs.Float64Var(&o.httpRateLimit, "http-rate-limit-per-ip", 0, "REST requests per second per client IP (0 = off)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "console", "console or json")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate: serve TLS on both listeners (with --tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.IntVar(&o.maxConnsPerIP, "max-connections-per-ip", 0, "cap on open TCP connections from one IP (0 = no cap)")
	fs.StringVar(&o.fenceFile, "fence-state-file", "", "fence-counter journal: tokens never go back, even across crashes and clock steps")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address (the REST port serves it too)")
	fs.BoolVar(&o.metricsPublic, "metrics-public", false, "serve --metrics-addr without the bearer token even when auth is on")
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
	fs.StringVar(&o.raftLogLevel, "raft-log-level", "warn", "raft's log level: off, error, warn, info, debug")
	fs.DurationVar(&o.raftBatchWait, "raft-batch-wait", 2*time.Millisecond, "cluster mode: how long the leader holds queued commands for the clients it just answered, to commit them together (0 = off; at most 100ms)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	o.addDflockdFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	src, err := applyEnv(fs, getenv)
	if err != nil {
		return nil, err
	}
	o.applyDflockdFlags(src)
	if err := o.resolveAuthToken(src); err != nil {
		return nil, err
	}
	if err := checkAuthSecret(o.authToken, o.authSource(src)); err != nil {
		return nil, err
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
	if o.shutdownTimeout < 0 {
		return nil, fmt.Errorf("--shutdown-timeout must be >= 0, got %d", o.shutdownTimeout)
	}
	if o.httpMaxConnsPerIP < 0 {
		return nil, fmt.Errorf("--http-max-connections-per-ip must be >= 0, got %d", o.httpMaxConnsPerIP)
	}
	if o.httpMaxConns < 0 {
		return nil, fmt.Errorf("--http-max-connections must be >= 0, got %d", o.httpMaxConns)
	}
	return o, nil
}

// authSource names where the auth secret came from, for error messages.
func (o *options) authSource(src map[string]source) string {
	name := "auth-token"
	if o.authFromFile {
		name = "auth-token-file"
	}
	where := envName(name)
	switch src[name] {
	case fromFlag:
		where = "--" + name
	case fromDflockdEnv:
		where = "DFLOCKD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	}
	if !o.authFromFile {
		return where
	}
	if src[name] == fromFlag {
		return where + " " + o.authTokenFile
	}
	return where + "=" + o.authTokenFile
}

// checkAuthSecret refuses a secret no TCP client could send: the auth
// request carries it on one line of at most codec.MaxLine bytes, which
// cannot hold a line break. (REST would accept a longer one, so without
// this check latchd would start and TCP auth would fail forever.)
func checkAuthSecret(tok, source string) error {
	switch {
	case len(tok) > codec.MaxLine:
		return fmt.Errorf("auth token from %s is %d bytes: TCP clients send it on one auth line of at most %d bytes, so none could authenticate; use a secret of at most %d bytes",
			source, len(tok), codec.MaxLine, codec.MaxLine)
	case strings.ContainsAny(tok, "\r\n"):
		return fmt.Errorf("auth token from %s contains a line break, which no auth line can carry", source)
	}
	return nil
}

// metricsOptions protects --metrics-addr with the auth token, as the REST
// API's /metrics is, unless --metrics-public opens it.
func (o *options) metricsOptions() []metrics.ServeOption {
	if o.metricsPublic || o.authToken == "" {
		return nil
	}
	return []metrics.ServeOption{metrics.WithBearerToken(o.authToken)}
}

// maxKeysPerOwner resolves --max-keys-per-owner: 0 derives a quarter of
// --max-locks, so that one connection or session cannot take every key
// (the red team's finding in #11: one connection enqueueing on 1,024 keys
// left every other client error_max_locks), while four owners still can
// between them. A negative value is left for Validate to refuse.
func maxKeysPerOwner(flag, maxLocks int) int {
	if flag != 0 || maxLocks == 0 {
		return flag
	}
	return max(1, maxLocks/4)
}

func secs(n int) time.Duration { return time.Duration(n) * time.Second }

func (o *options) engineConfig() (engine.Config, error) {
	c := engine.DefaultConfig()
	c.Shards = o.shards
	c.MaxKeys = o.maxLocks
	c.MaxWaiters = o.maxWaiters
	c.MaxKeysPerOwner = maxKeysPerOwner(o.maxKeysPerOwner, o.maxLocks)
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
	c.AuthFailuresPerMinute = o.authFailuresPerMinute
	c.WriteTimeout = secs(o.writeTimeout)
	c.MaxOutput = int64(o.maxOutputMB) << 20
	c.MaxConnOutput = o.maxConnOutputKB << 10
	c.MaxStatsBytes = o.maxStatsKB << 10
	c.SendBuffer = o.sendBufferKB << 10
	return c, c.Validate()
}

func (o *options) httpConfig() (httpfast.Config, error) {
	c := httpfast.DefaultConfig()
	c.Addr = hostPort(o.host, o.httpPort)
	c.SessionTTL = secs(o.httpSessionTTL)
	c.AuthToken = o.authToken
	c.RateLimitPerIP = o.httpRateLimit
	c.MaxSessions = o.httpMaxSessions
	c.MaxSessionsPerIP = o.httpMaxSessionsPerIP
	c.MaxConnectionsPerIP = o.httpMaxConnsPerIP
	c.AuthFailuresPerMinute = o.authFailuresPerMinute
	c.TLS = o.tls
	c.MaxConnections = o.httpMaxConns
	c.WriteTimeout = secs(o.writeTimeout)
	c.MaxOutput = int64(o.maxOutputMB) << 20
	c.MaxStatsBytes = o.maxStatsKB << 10
	c.SendBuffer = o.sendBufferKB << 10
	return c, c.Validate()
}

// applyFDLimit fills the connection caps left at 0 from a descriptor
// limit of n (see listen.DefaultCaps).
func (o *options) applyFDLimit(n uint64) {
	tcp, rest := listen.DefaultCaps(n, o.httpPort != 0)
	if o.maxConns == 0 {
		o.maxConns = tcp
	}
	if o.httpMaxConns == 0 && o.httpPort != 0 {
		o.httpMaxConns = rest
	}
}

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("%s:%d", host, port)
}
