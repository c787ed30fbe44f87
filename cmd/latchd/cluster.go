package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/fencefile"
	"github.com/latchd/latchd/replica"
)

// clusterOptions checks the cluster flags and reads their secret files.
func (o *options) clusterOptions() error {
	if err := readSecret(&o.adminToken, o.adminTokenFile, "admin token"); err != nil {
		return err
	}
	if o.raftDir == "" {
		for name, v := range map[string]bool{"--node-id": o.nodeID != "", "--bootstrap": o.bootstrap,
			"--cluster-peers": o.clusterPeers != "", "--join": o.join != "",
			"--raft-auth-token-file": o.raftAuthTokenFile != "", "--advertise-addr": o.advertiseAddr != "",
			"--advertise-http-addr": o.advertiseHTTPAddr != ""} {
			if v {
				return fmt.Errorf("%s needs --raft-dir (cluster mode)", name)
			}
		}
		return nil
	}
	if o.nodeID == "" {
		return errors.New("--raft-dir needs --node-id")
	}
	if o.bootstrap && o.join != "" {
		return errors.New("--bootstrap and --join exclude each other: bootstrap the first node, join the others")
	}
	if err := readSecret(&o.raftAuthToken, o.raftAuthTokenFile, "raft auth token"); err != nil {
		return err
	}
	// Other nodes send clients to these addresses: a wildcard host names
	// no machine.
	for _, a := range []struct{ flag, addr string }{
		{"--advertise-addr", o.clientAddr()},
		{"--advertise-http-addr", o.httpAddr()},
	} {
		if a.addr == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a.addr)
		if err != nil {
			return fmt.Errorf("%s %q: %v", a.flag, a.addr, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("--host %q is a wildcard, which other nodes cannot send clients to: set %s", o.host, a.flag)
		}
	}
	_, err := o.peers()
	return err
}

// readSecret sets *dst to the secret in the file at path, trimmed; an
// empty path leaves it.
func readSecret(dst *string, path, what string) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s file: %w", what, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return fmt.Errorf("%s file %s is empty", what, path)
	}
	*dst = tok
	return nil
}

// clientAddr is where this node's clients connect, named in
// error_not_leader.
func (o *options) clientAddr() string { return cmp.Or(o.advertiseAddr, hostPort(o.host, o.port)) }

// raftPeerAddr is where the other nodes dial this node's raft transport.
func (o *options) raftPeerAddr() string { return cmp.Or(o.raftAdvertise, o.raftAddr) }

// httpAddr is where this node's REST clients connect, named in the REST
// API's 503 not_leader once this node leads; empty without HTTP.
func (o *options) httpAddr() string {
	if o.advertiseHTTPAddr != "" {
		return o.advertiseHTTPAddr
	}
	if o.httpPort == 0 {
		return ""
	}
	return hostPort(o.host, o.httpPort)
}

// peers parses --cluster-peers; without it a bootstrapping node starts a
// cluster of itself.
func (o *options) peers() ([]replica.Peer, error) {
	if o.clusterPeers == "" {
		return []replica.Peer{{ID: o.nodeID, RaftAddr: o.raftPeerAddr(), ClientAddr: o.clientAddr()}}, nil
	}
	var ps []replica.Peer
	for _, item := range strings.Split(o.clusterPeers, ",") {
		f := strings.Split(strings.TrimSpace(item), "=")
		if len(f) < 2 || len(f) > 3 || f[0] == "" || f[1] == "" {
			return nil, fmt.Errorf("--cluster-peers: %q is not id=raft_addr[=client_addr]", item)
		}
		for _, a := range f[1:] {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("--cluster-peers: %q: %v", item, err)
			}
		}
		p := replica.Peer{ID: f[0], RaftAddr: f[1]}
		if len(f) == 3 {
			p.ClientAddr = f[2]
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func (o *options) replicaConfig(ecfg engine.Config) (replica.Config, error) {
	c := replica.DefaultConfig()
	c.NodeID = o.nodeID
	c.BindAddr = o.raftAddr
	c.AdvertiseAddr = o.raftAdvertise
	c.ClientAddr = o.clientAddr()
	c.HTTPAddr = o.httpAddr()
	c.RaftDir = o.raftDir
	c.Bootstrap = o.bootstrap
	c.RaftLogLevel = o.raftLogLevel
	c.BatchWait = o.raftBatchWait
	c.LearnerPromoteLag = uint64(o.learnerPromoteLag)
	c.AuthToken = o.raftAuthToken
	ps, err := o.peers()
	if err != nil {
		return c, err
	}
	c.Peers = ps
	// Every node must build the same engine: no clock-seeded fence
	// counter (the log carries the counter), no local reservation hook.
	ecfg.FenceSeed, ecfg.FenceLimit, ecfg.FenceReserve = 0, 0, nil
	c.Engine = ecfg
	return c, c.Validate()
}

// fenceFloor reads a single node's fence journal once: the cluster's
// fences start above what that node could have issued. The raft log keeps
// the counter from then on; the file is not written again.
func fenceFloor(path string) (uint64, error) {
	j, err := fencefile.Open(path)
	if err != nil {
		return 0, err
	}
	floor := j.Seed()
	_ = j.Close()
	return floor, nil
}

// startNode opens the raft dir and starts this node.
func startNode(o *options, ecfg engine.Config, log *zap.Logger) (*replica.Node, error) {
	rcfg, err := o.replicaConfig(ecfg)
	if err != nil {
		return nil, err
	}
	if o.fenceFile != "" {
		if rcfg.FenceFloor, err = fenceFloor(o.fenceFile); err != nil {
			return nil, err
		}
		log.Info("fence floor from the fence journal", zap.String("file", o.fenceFile), zap.Uint64("floor", rcfg.FenceFloor))
	}
	if err := seedRaftDir(o, &rcfg, log); err != nil {
		return nil, err
	}
	st, err := replica.DiskStorage(rcfg, log.Named("raft"))
	if err != nil {
		return nil, err
	}
	n, err := replica.New(rcfg, log.Named("raft"), st)
	if err != nil {
		if st.Close != nil {
			_ = st.Close()
		}
		return nil, err
	}
	peers := make([]string, 0, len(rcfg.Peers))
	for _, p := range rcfg.Peers {
		peers = append(peers, p.ID+"="+p.RaftAddr)
	}
	log.Info("cluster mode", zap.String("node_id", rcfg.NodeID), zap.String("raft_addr", rcfg.BindAddr),
		zap.String("raft_dir", rcfg.RaftDir), zap.Bool("bootstrap", rcfg.Bootstrap), zap.Strings("peers", peers),
		zap.String("join", o.join))
	return n, nil
}

// handOffWait bounds the leadership transfer a stopping leader makes
// (replica.Node.HandOff); past it the others elect one after their
// election timeout.
const handOffWait = 5 * time.Second

// joinCluster asks the members at o.join (HTTP addresses) to add this node
// as a learner, in turn, until one does or ctx ends: it catches up without
// a vote, so the quorum never waits on it, and the leader promotes it to a
// voter once its log is within --learner-promote-lag entries of the
// commit index (replica/promote.go). A member that is not the leader
// answers 503 naming it; the loop goes on to the next address.
func joinCluster(ctx context.Context, o *options, n *replica.Node, log *zap.Logger) {
	for _, m := range n.Status().Voters {
		if m.ID == o.nodeID {
			return // already a member: a restart, not a join
		}
	}
	body, _ := json.Marshal(map[string]any{"id": o.nodeID, "raft_addr": o.raftPeerAddr(), "client_addr": o.clientAddr(),
		"learner": true})
	scheme, hc := "http", &http.Client{Timeout: 5 * time.Second}
	if o.tls != nil {
		scheme, hc.Transport = "https", &http.Transport{TLSClientConfig: o.tls.Clone()}
	}
	addrs := strings.Split(o.join, ",")
	for attempt := 0; ; attempt++ {
		addr := strings.TrimSpace(addrs[attempt%len(addrs)])
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, scheme+"://"+addr+"/v1/admin/voters", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if o.adminToken != "" {
			req.Header.Set("Authorization", "Bearer "+o.adminToken)
		}
		resp, err := hc.Do(req)
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096)) // best effort, for the log
			_ = resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				log.Info("joined the cluster as a learner", zap.String("via", addr))
				return
			}
			err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
		}
		log.Warn("join attempt failed", zap.String("via", addr), zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Duration(attempt+1)*250*time.Millisecond, 3*time.Second)):
		}
	}
}
