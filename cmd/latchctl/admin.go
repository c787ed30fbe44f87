package main

// The admin API client of member and leader: the nodes' REST ports,
// /v1/admin (docs/http.md). A change goes to the leader; a follower's 503
// not_leader names it and latchctl follows.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// defaultHTTP is the REST address member and leader use without --http.
const defaultHTTP = "http://127.0.0.1:6389"

// maxHops bounds how many not_leader answers one change follows.
const maxHops = 4

// adminWaitMargin is added to the dial timeout to bound one admin call:
// the server answers a change within 10 s (503 unknown_outcome after).
const adminWaitMargin = 15 * time.Second

// noLeaderPause and noLeaderRetry: while an election runs no node names a
// leader; latchctl asks again after a pause, for up to noLeaderRetry.
const (
	noLeaderPause = 250 * time.Millisecond
	noLeaderRetry = 10 * time.Second
)

// adminFlags are the flags of member and leader.
type adminFlags struct {
	http, token, tokenFile string
}

func (a *adminFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	a.token = getenv("LATCHD_ADMIN_TOKEN")
	fs.StringVar(&a.http, "http", cmp.Or(getenv("LATCHD_HTTP"), defaultHTTP), "comma-separated REST addresses of the cluster's nodes; changes follow the leader (env LATCHD_HTTP)")
	fs.Var((*secret)(&a.token), "admin-token", "the admin token (env LATCHD_ADMIN_TOKEN; prefer it or --admin-token-file: arguments show in ps)")
	fs.StringVar(&a.tokenFile, "admin-token-file", "", "file holding the admin token")
}

// adminClient sends admin API calls to a cluster's nodes.
type adminClient struct {
	seeds  []string // base URLs, scheme://host:port
	scheme string   // for a leader named by its address alone: https if TLS is on or a seed says so
	token  string
	hc     *http.Client
}

// newAdmin returns the client the flags describe.
func (c *common) newAdmin(a *adminFlags) (*adminClient, error) {
	token := a.token
	if a.tokenFile != "" {
		b, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return nil, usagef("the admin API needs a token: --admin-token-file FILE or LATCHD_ADMIN_TOKEN")
	}
	cfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if cfg != nil {
		scheme = "https"
	}
	ac := &adminClient{scheme: scheme, token: token}
	for s := range strings.SplitSeq(a.http, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = scheme + "://" + s
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, usagef("--http: bad address %q (want host:port or http[s]://host:port)", s)
		}
		ac.seeds = append(ac.seeds, u.Scheme+"://"+u.Host)
		if u.Scheme == "https" {
			ac.scheme = "https"
		}
	}
	if len(ac.seeds) == 0 {
		return nil, usagef("--http: no address")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	ac.hc = &http.Client{Transport: tr, Timeout: c.dialTimeout + adminWaitMargin}
	return ac, nil
}

// maxAnswer bounds an admin answer other than a backup.
const maxAnswer = 1 << 20

// apiError is an answer other than 2xx, as the server put it.
type apiError struct {
	method, url, status string
	Code                string `json:"error"`
	Message             string `json:"message"`
	Leader              string `json:"leader"`
	code                int
}

func (e *apiError) Error() string {
	msg := e.status
	if e.Code != "" {
		msg += ": " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return fmt.Sprintf("%s %s: %s", e.method, e.url, msg)
}

// notLeader reports whether the answer is 503 not_leader.
func (e *apiError) notLeader() bool {
	return e.code == http.StatusServiceUnavailable && e.Code == "not_leader"
}

// send makes one call to base+path and returns the answer's body, of up
// to limit bytes.
func (ac *adminClient) send(ctx context.Context, method, base, path string, body []byte, limit int64) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+ac.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := ac.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	out, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, base+path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{method: method, url: base + path, status: resp.Status, code: resp.StatusCode}
		_ = json.Unmarshal(out, e) // a body that is not the API's: the status says enough
		return nil, e
	}
	return out, nil
}

// get asks the first node that answers.
func (ac *adminClient) get(ctx context.Context, path string) ([]byte, error) {
	var errs []error
	for _, base := range ac.seeds {
		out, err := ac.send(ctx, http.MethodGet, base, path, nil, maxAnswer)
		var ae *apiError
		if err == nil || errors.As(err, &ae) { // the node answered: its answer stands
			return out, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// change sends a change to the leader: each seed in turn, following
// not_leader answers up to maxHops, and again after a pause while no node
// knows a leader (an election), for up to noLeaderRetry.
func (ac *adminClient) change(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	deadline := time.Now().Add(noLeaderRetry)
	for {
		out, electing, err := ac.changeOnce(ctx, method, path, body)
		if !electing || time.Now().After(deadline) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(noLeaderPause):
		}
	}
}

// changeOnce is one round of change; electing reports that it failed
// only because some node knew no leader.
func (ac *adminClient) changeOnce(ctx context.Context, method, path string, body []byte) ([]byte, bool, error) {
	var errs []error
	electing := false
	for _, base := range ac.seeds {
		for hop := 0; ; hop++ {
			out, err := ac.send(ctx, method, base, path, body, maxAnswer)
			var ae *apiError
			if err == nil || !errors.As(err, &ae) || !ae.notLeader() {
				if err == nil || ae != nil { // an answer: ok or refused
					return out, false, err
				}
				errs = append(errs, err) // unreachable: try the next seed
				break
			}
			if ae.Leader == "" {
				electing = true
				errs = append(errs, fmt.Errorf("%s: no leader known (an election may be running)", base))
				break
			}
			scheme, _, _ := strings.Cut(base, "://") // the leader's REST port speaks as this node's does
			next := scheme + "://" + ae.Leader
			if strings.Contains(ae.Leader, "://") {
				next = ae.Leader
			}
			if hop >= maxHops || next == base {
				errs = append(errs, fmt.Errorf("%w (gave up following the leader after %d hops)", err, hop))
				break
			}
			base = next
		}
	}
	return nil, electing, errors.Join(errs...)
}

// clusterStatus is what GET /v1/admin/cluster answers (the fields shown).
type clusterStatus struct {
	NodeID           string   `json:"node_id"`
	Role             string   `json:"role"`
	Term             uint64   `json:"term"`
	CommitIndex      uint64   `json:"commit_index"`
	AppliedIndex     uint64   `json:"applied_index"`
	LeaderID         string   `json:"leader_id"`
	LeaderClientAddr string   `json:"leader_client_addr"`
	LeaderHTTPAddr   string   `json:"leader_http_addr"`
	Voters           []member `json:"voters"`
}

// member is one server of the configuration.
type member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Suffrage string `json:"suffrage"` // "voter" or "nonvoter"
}

// role names m's suffrage as the commands do.
func (m member) role() string {
	if m.Suffrage == "nonvoter" {
		return "learner"
	}
	return cmp.Or(m.Suffrage, "-")
}

// status returns the report of the first node that answers, and its
// JSON.
func (ac *adminClient) status(ctx context.Context) (*clusterStatus, []byte, error) {
	raw, err := ac.get(ctx, "/v1/admin/cluster")
	if err != nil {
		return nil, nil, err
	}
	st, err := parseStatus(raw)
	return st, raw, err
}

// statusAt returns the report of the node at base.
func (ac *adminClient) statusAt(ctx context.Context, base string) (*clusterStatus, error) {
	raw, err := ac.send(ctx, http.MethodGet, base, "/v1/admin/cluster", nil, maxAnswer)
	if err != nil {
		return nil, err
	}
	return parseStatus(raw)
}

func parseStatus(raw []byte) (*clusterStatus, error) {
	var st clusterStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("GET /v1/admin/cluster: bad answer: %w", err)
	}
	return &st, nil
}

// writeMembers prints st as the member list's table.
func writeMembers(w io.Writer, st *clusterStatus) error {
	leader := cmp.Or(st.LeaderID, "none known")
	fmt.Fprintf(w, "seen by %s (%s), term %d, commit %d, applied %d; leader %s\n",
		st.NodeID, st.Role, st.Term, st.CommitIndex, st.AppliedIndex, leader)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDR\tROLE\tLEADER\tCLIENT ADDR\tREST ADDR")
	for _, m := range st.Voters {
		mark, client, rest := "", "-", "-"
		if m.ID == st.LeaderID {
			mark, client, rest = "*", cmp.Or(st.LeaderClientAddr, "-"), cmp.Or(st.LeaderHTTPAddr, "-")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.RaftAddr, m.role(), mark, client, rest)
	}
	return tw.Flush()
}
