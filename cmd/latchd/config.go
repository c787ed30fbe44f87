package main

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/latchd/latchd/codec"
	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/httpfast"
	"github.com/latchd/latchd/internal/listen"
	"github.com/latchd/latchd/replica"
	"github.com/latchd/latchd/server"
)

// options are the command line, after flags and LATCHD_* variables.
type options struct {
	host, authToken, authTokenFile string
	logLevel, logFormat, debugAddr string
	tlsCert, tlsKey, fenceFile     string
	metricsAddr                    string
	port, httpPort                 int
	defaultLeaseTTL, readTimeout   int
	gcMaxIdle, httpSessionTTL      int
	maxLocks, maxWaiters, maxConns int
	httpMaxConns                   int
	shutdownTimeout                int
	authFailuresPerMinute          int
	writeTimeout, maxOutputMB      int
	maxConnOutputKB, maxStatsKB    int
	sendBufferKB                   int
	autoRelease, version           bool
	metricsPublic                  bool
	authFromFile                   bool        // the secret was read from authTokenFile
	tls                            *tls.Config // loaded from tlsCert and tlsKey
	// The configs from their defaults: a flag that sets a field as given
	// is bound to it; engineConfig, serverConfig and httpConfig set the rest.
	ecfg engine.Config
	scfg server.Config
	hcfg httpfast.Config

	// Cluster mode (on with raftDir).
	raftDir, nodeID, raftAddr, raftAdvertise string
	advertiseAddr, clusterPeers, join        string
	advertiseHTTPAddr                        string
	raftAuthTokenFile, adminToken            string
	adminTokenFile, raftLogLevel             string
	raftBatchWait                            time.Duration
	learnerPromoteLag                        int
	bootstrap                                bool
	raftAuthToken                            string // read from raftAuthTokenFile

	// --restore (restore.go).
	restore      string
	restoreForce bool
	backup       *replica.BackupInfo // read from restore

	// dflockd compatibility (compat.go).
	leaseSweepInterval, gcInterval int
	debug, loopRawWait             bool      // loopRawWait: retired, ignored
	warnings                       []warning // logged at warn once the logger exists
}

// envName maps a flag to its environment variable: --max-locks is
// LATCHD_MAX_LOCKS. envNames adds the DFLOCKD_* fallbacks.
func envName(flagName string) string {
	return "LATCHD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// defaultMaxWaiters caps each key's queue. With no cap one connection
// may queue on every key (e with no deadline), and clients could fill
// memory at ~165 bytes per waiter. With it, waiters are bounded by
// --max-locks x this.
const defaultMaxWaiters = 1000

// defaultMaxKeysPerOwner is --max-keys-per-owner's default, a quarter of
// the default --max-locks: no one connection can take every key.
const defaultMaxKeysPerOwner = 256

// parseOptions reads args, then fills every flag not given on the command
// line from its environment variables: flags win, then LATCHD_*, then
// DFLOCKD_* (compat.go). Then it checks every value, naming the flag of
// the first one out of range, and reads the files the flags name.
func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{ecfg: engine.DefaultConfig(), scfg: server.DefaultConfig(), hcfg: httpfast.DefaultConfig()}
	fs := o.newFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	src, vars, err := applyEnv(fs, getenv)
	if err != nil {
		return nil, err
	}
	if err := checkFlags(fs, vars); err != nil {
		return nil, err
	}
	o.applyDflockdFlags(src)
	if err := o.resolveAuthToken(src); err != nil {
		return nil, err
	}
	if err := checkAuthSecret(o.authToken, o.authSource(vars)); err != nil {
		return nil, err
	}
	if err := o.clusterOptions(); err != nil {
		return nil, err
	}
	if err := o.restoreOptions(); err != nil {
		return nil, err
	}
	if err := o.loadTLS(); err != nil {
		return nil, err
	}
	if o.logFormat != "console" && o.logFormat != "json" {
		return nil, fmt.Errorf("--log-format must be console or json, got %q", o.logFormat)
	}
	return o, nil
}

// loadTLS reads --tls-cert and --tls-key, which go together.
func (o *options) loadTLS() error {
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	if o.tlsCert == "" {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
	if err != nil {
		return fmt.Errorf("--tls-cert, --tls-key: %w", err)
	}
	o.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return nil
}

// authSource names where the auth secret came from, for error messages:
// the flag or the variable (vars, from applyEnv) that set it.
func (o *options) authSource(vars map[string]string) string {
	name := "auth-token"
	if o.authFromFile {
		name = "auth-token-file"
	}
	where := cmp.Or(vars[name], "--"+name)
	if !o.authFromFile {
		return where
	}
	if vars[name] == "" {
		return where + " " + o.authTokenFile
	}
	return where + "=" + o.authTokenFile
}

// checkAuthSecret refuses a secret no TCP client could send on one auth
// line (at most codec.MaxLine bytes, no line break).
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

// metricsToken is the token --metrics-addr requires: the auth token, as
// the REST API's /metrics does, unless --metrics-public opens it.
func (o *options) metricsToken() string {
	if o.metricsPublic {
		return ""
	}
	return o.authToken
}

func secs(n int) time.Duration { return time.Duration(n) * time.Second }

func (o *options) engineConfig() (engine.Config, error) {
	c := o.ecfg
	c.MaxKeys = o.maxLocks
	c.MaxWaiters = o.maxWaiters
	c.DefaultTTL = secs(o.defaultLeaseTTL)
	c.GCMaxIdle = secs(o.gcMaxIdle)
	return c, c.Validate()
}

func (o *options) serverConfig() (server.Config, error) {
	c := o.scfg
	c.Addr = hostPort(o.host, o.port)
	c.ReadTimeout = secs(o.readTimeout)
	c.MaxConnections = o.maxConns
	c.AuthToken = o.authToken
	c.AutoRelease = o.autoRelease
	c.TLS = o.tls
	c.AuthFailuresPerMinute = o.authFailuresPerMinute
	c.WriteTimeout = secs(o.writeTimeout)
	c.MaxOutput = int64(o.maxOutputMB) << 20
	c.MaxConnOutput = o.maxConnOutputKB << 10
	c.MaxStatsBytes = o.maxStatsKB << 10
	c.SendBuffer = o.sendBufferKB << 10
	return c, c.Validate()
}

func (o *options) httpConfig() (httpfast.Config, error) {
	c := o.hcfg
	c.Addr = hostPort(o.host, o.httpPort)
	c.SessionTTL = secs(o.httpSessionTTL)
	c.AuthToken = o.authToken
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
	o.maxConns = cmp.Or(o.maxConns, tcp)
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
