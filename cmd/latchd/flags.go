package main

import (
	"flag"
	"io"
	"time"

	"github.com/latchd/latchd/replica"
)

// The flags, by the section of --help they appear in. Each group function
// defines its flags in the order --help lists them.

// flagGroups defines every flag on fs, group by group, and returns the
// groups in the order --help prints them.
func (o *options) flagGroups(fs *flag.FlagSet) []*flagGroup {
	var groups []*flagGroup
	for _, g := range []struct {
		title  string
		define func(*flagGroup)
	}{
		{"Listeners", o.listenerFlags},
		{"Limits", o.limitFlags},
		{"Leases", o.leaseFlags},
		{"Security", o.securityFlags},
		{"Cluster", o.clusterFlags},
		{"Backup and restore", o.restoreFlags},
		{"Observability", o.observabilityFlags},
		{"Tuning", o.tuningFlags},
		{"dflockd compatibility", o.addDflockdFlags},
	} {
		fg := &flagGroup{title: g.title, fs: fs}
		g.define(fg)
		groups = append(groups, fg)
	}
	return groups
}

// newFlagSet returns latchd's flag set, its usage grouped as --help prints
// it, writing to stderr.
func (o *options) newFlagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("latchd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	groups := o.flagGroups(fs)
	fs.Usage = func() { printUsage(fs.Output(), groups) }
	return fs
}

func (o *options) listenerFlags(g *flagGroup) {
	g.strFlag(&o.host, "host", "127.0.0.1", "address to bind, TCP and REST")
	g.intFlag(&o.port, "port", 6388, "TCP port of the lock protocol")
	g.intFlag(&o.httpPort, "http-port", 0, "REST port: the REST API, /healthz, /readyz, /metrics and the dashboard at /ui/ (0 = off)")
	g.intFlag(&o.shutdownTimeout, "shutdown-timeout", 5, "seconds a graceful stop gives holders to release before closing everything (0 = until they have; a second signal cuts it short)")
}

func (o *options) limitFlags(g *flagGroup) {
	g.intFlag(&o.maxLocks, "max-locks", 1024, "cap on keys in memory (0 = no cap)")
	g.intFlag(&o.maxWaiters, "max-waiters", defaultMaxWaiters, "cap on each key's queue (0 = no cap)")
	g.intFlag(&o.ecfg.MaxKeysPerOwner, "max-keys-per-owner", defaultMaxKeysPerOwner, "cap on the keys one TCP connection or REST session holds or waits on at once (0 = no cap); the default, a quarter of the default --max-locks, keeps one client from taking every key")
	g.intFlag(&o.maxConns, "max-connections", 0, "cap on open TCP connections (0 = no cap of its own: derived from the file descriptor limit)")
	g.intFlag(&o.scfg.MaxConnectionsPerIP, "max-connections-per-ip", 0, "cap on open TCP connections from one IP (0 = no cap)")
	g.intFlag(&o.httpMaxConns, "http-max-connections", 0, "cap on open REST connections; past it a connection gets 503 and is closed (0 = no cap of its own: derived from the file descriptor limit)")
	g.intFlag(&o.hcfg.MaxConnectionsPerIP, "http-max-connections-per-ip", 1000, "cap on open REST connections from one client IP (an IPv6 client is its /64); past it a connection gets 429 and is closed (0 = no cap)")
	g.intFlag(&o.hcfg.MaxSessions, "http-max-sessions", 100000, "cap on open REST sessions; past it POST /v1/sessions answers 429 (0 = no cap)")
	g.intFlag(&o.hcfg.MaxSessionsPerIP, "http-max-sessions-per-ip", 1000, "cap on REST sessions one client IP may hold open; past it POST /v1/sessions answers 429 (0 = no cap)")
	g.floatFlag(&o.hcfg.RateLimitPerIP, "http-rate-limit-per-ip", 0, "REST requests per second per client IP (0 = no cap)")
	g.intFlag(&o.readTimeout, "read-timeout", 23, "seconds a connection may sit on a partial request")
	g.intFlag(&o.writeTimeout, "write-timeout", 10, "seconds a connection may leave its answers unread (nothing of them sent) before it is closed (0 = off)")
	g.intFlag(&o.maxOutputMB, "max-output-mb", 64, "MiB of unsent answers for all clients together; past it the largest holders are closed and stats answer totals only (0 = no cap)")
	g.intFlag(&o.maxConnOutputKB, "max-conn-output-kb", 4096, "KiB of unsent answers one TCP connection may hold before it is closed (at least 64)")
	g.intFlag(&o.maxStatsKB, "max-stats-kb", 1024, "KiB cap on a stats answer's JSON; a bigger state answers a truncated list with totals (4 to half of --max-conn-output-kb)")
}

func (o *options) leaseFlags(g *flagGroup) {
	g.intFlag(&o.defaultLeaseTTL, "default-lease-ttl", 33, "lease TTL in seconds when a request names none")
	g.boolFlag(&o.autoRelease, "auto-release-on-disconnect", true, "release what a connection held when it closes")
	g.intFlag(&o.gcMaxIdle, "gc-max-idle", 60, "seconds an idle key is kept")
	g.durFlag(&o.ecfg.LockDelay, "lock-delay", 0, "after a holder loses a key involuntarily (lease expiry, disconnect; not a release), grant it again only after this long (0 = at once); a request may set its own; the same on every node of a cluster")
	g.intFlag(&o.httpSessionTTL, "http-session-ttl", 60, "seconds a REST session lives without a request")
	g.strFlag(&o.fenceFile, "fence-state-file", "", "fence-counter journal: tokens never go back, even across crashes and clock steps")
}

func (o *options) securityFlags(g *flagGroup) {
	g.strFlag(&o.authToken, "auth-token", "", "shared secret clients must send with auth")
	g.strFlag(&o.authTokenFile, "auth-token-file", "", "file holding the shared secret")
	g.intFlag(&o.authFailuresPerMinute, "auth-failures-per-minute", 60, "failed auths (TCP auth, REST bearer token) one IP may make at once and then per minute; past it, it is refused without a check (0 = no cap)")
	g.strFlag(&o.tlsCert, "tls-cert", "", "PEM certificate: serve TLS on both listeners (with --tls-key)")
	g.strFlag(&o.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
}

func (o *options) clusterFlags(g *flagGroup) {
	g.strFlag(&o.raftDir, "raft-dir", "", "cluster mode: directory of this node's raft log and snapshots (off when empty)")
	g.strFlag(&o.nodeID, "node-id", "", "cluster mode: this node's ID, unique in the cluster")
	g.strFlag(&o.raftAddr, "raft-addr", "127.0.0.1:7388", "cluster mode: host:port of the raft transport")
	g.strFlag(&o.raftAdvertise, "raft-advertise", "", "cluster mode: raft address peers dial, when --raft-addr binds a wildcard")
	g.strFlag(&o.advertiseAddr, "advertise-addr", "", "cluster mode: host:port clients reach this node's TCP port at (default --host:--port)")
	g.strFlag(&o.advertiseHTTPAddr, "advertise-http-addr", "", "cluster mode: host:port REST clients reach this node at, named in 503 not_leader (default --host:--http-port)")
	g.boolFlag(&o.bootstrap, "bootstrap", false, "cluster mode: write the first configuration (this node, or --cluster-peers) into an empty raft dir")
	g.strFlag(&o.clusterPeers, "cluster-peers", "", "cluster mode: initial voters, id=raft_addr=client_addr,... (with --bootstrap on each)")
	g.strFlag(&o.join, "join", "", "cluster mode: HTTP addresses of members to ask to add this node (as a learner, promoted once caught up), host:port,...")
	g.intFlag(&o.learnerPromoteLag, "learner-promote-lag", replica.DefaultLearnerPromoteLag, "cluster mode: the leader promotes a learner to a voter once its log is within this many entries of the commit index (0 = never: promote by hand)")
	g.strFlag(&o.raftAuthTokenFile, "raft-auth-token-file", "", "cluster mode: file holding the secret nodes prove to each other")
	g.strFlag(&o.adminToken, "admin-token", "", "bearer token for the admin API (/v1/admin/*: cluster membership, and snapshots on a single node too; off when empty)")
	g.strFlag(&o.adminTokenFile, "admin-token-file", "", "file holding the admin token")
	g.durFlag(&o.scfg.OrphanTTL, "orphan-ttl", 5*time.Second, "cluster mode (and tagged connections on any node): how long what a TCP session's connection held and waited for is kept after the connection dies, for the client to take back (0 = no TCP sessions: released at once)")
	g.durFlag(&o.raftBatchWait, "raft-batch-wait", 2*time.Millisecond, "cluster mode: how long the leader holds queued commands for the clients it just answered, to commit them together (0 = off; at most 100ms)")
	g.strFlag(&o.raftLogLevel, "raft-log-level", "warn", "raft's log level: off, error, warn, info, debug")
}

func (o *options) observabilityFlags(g *flagGroup) {
	g.strFlag(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	g.strFlag(&o.logFormat, "log-format", "console", "console or json")
	g.strFlag(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address (the REST port serves it too)")
	g.boolFlag(&o.metricsPublic, "metrics-public", false, "serve --metrics-addr without the bearer token even when auth is on")
	g.strFlag(&o.debugAddr, "debug-addr", "", "serve net/http/pprof on this address (off when empty)")
	g.boolFlag(&o.version, "version", false, "print the version and exit")
}

func (o *options) tuningFlags(g *flagGroup) {
	g.intFlag(&o.scfg.EventLoops, "event-loops", 0, "gnet event loops (0 = one per core but one, at least one)")
	g.intFlag(&o.ecfg.Shards, "shards", 64, "engine shards (a power of two)")
	g.boolFlag(&o.scfg.DirectHandOff, "direct-handoff", true, "write a grant to an idle waiter's socket from the granting goroutine instead of waking its event loop")
	g.intFlag(&o.sendBufferKB, "send-buffer-kb", 256, "KiB of kernel send buffer per connection, TCP and REST; bounds what the kernel keeps for a client that does not read (0 = the kernel's autotuning, up to 4 MiB each)")
}
