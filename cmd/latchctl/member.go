package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
)

// runMember is latchctl member list|add|promote|remove.
func runMember(fs *flag.FlagSet, c *common, args []string, getenv func(string) string, stdout io.Writer) error {
	var a adminFlags
	a.register(fs, getenv)
	asJSON := fs.Bool("json", false, "list: print the node's report as JSON")
	learner := fs.Bool("learner", false, "add: as a learner, without a vote until promoted")
	pos, cmd, err := parse(fs, args)
	if err != nil {
		return err
	}
	if cmd != nil || len(pos) == 0 {
		return usagef("usage: latchctl member list|add ID RAFT_ADDR [--learner]|promote ID|remove ID")
	}
	action, pos := pos[0], pos[1:]
	want := map[string]int{"list": 0, "add": 2, "promote": 1, "remove": 1}
	n, ok := want[action]
	switch {
	case !ok:
		return usagef("member: unknown action %q (want list, add, promote or remove)", action)
	case len(pos) != n:
		return usagef("member %s takes %d argument(s), got %d", action, n, len(pos))
	case *learner && action != "add":
		return usagef("--learner goes with member add")
	case *asJSON && action != "list":
		return usagef("--json goes with member list")
	}
	ac, err := c.newAdmin(&a)
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch action {
	case "list":
		return memberList(ctx, ac, *asJSON, stdout)
	case "add":
		return memberAdd(ctx, ac, pos[0], pos[1], *learner, stdout)
	case "promote":
		return memberPromote(ctx, ac, pos[0], stdout)
	default:
		return memberRemove(ctx, ac, pos[0], stdout)
	}
}

func memberList(ctx context.Context, ac *adminClient, asJSON bool, stdout io.Writer) error {
	st, raw, err := ac.status(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			return err
		}
		b.WriteByte('\n')
		_, err := b.WriteTo(stdout)
		return err
	}
	return writeMembers(stdout, st)
}

// voterBody is the body of POST /v1/admin/voters.
type voterBody struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Learner  bool   `json:"learner,omitempty"`
}

// changed is the answer of a membership change.
type changed struct {
	Voters []member `json:"voters"`
}

// postVoter adds, updates or promotes a member and prints the new
// configuration after what.
func postVoter(ctx context.Context, ac *adminClient, b voterBody, what string, stdout io.Writer) error {
	body, _ := json.Marshal(b) // strings and a bool: cannot fail
	out, err := ac.change(ctx, http.MethodPost, "/v1/admin/voters", body)
	if err != nil {
		return err
	}
	return writeChanged(stdout, out, what)
}

func memberAdd(ctx context.Context, ac *adminClient, id, raftAddr string, learner bool, stdout io.Writer) error {
	what := "added " + id + " as a voter"
	if learner {
		what = "added " + id + " as a learner"
	}
	return postVoter(ctx, ac, voterBody{ID: id, RaftAddr: raftAddr, Learner: learner}, what, stdout)
}

// memberPromote makes learner id a voter: the API's add again, without
// learner, at the address the configuration has for it.
func memberPromote(ctx context.Context, ac *adminClient, id string, stdout io.Writer) error {
	st, _, err := ac.status(ctx)
	if err != nil {
		return err
	}
	if st.Role != "leader" && st.LeaderHTTPAddr != "" { // the leader's configuration is the latest
		if lst, err := ac.statusAt(ctx, ac.scheme+"://"+st.LeaderHTTPAddr); err == nil {
			st = lst
		}
	}
	for _, m := range st.Voters {
		if m.ID != id {
			continue
		}
		if m.role() == "voter" {
			fmt.Fprintf(stdout, "%s is a voter already\n", id)
			return nil
		}
		return postVoter(ctx, ac, voterBody{ID: id, RaftAddr: m.RaftAddr}, "promoted "+id+" to voter", stdout)
	}
	return fmt.Errorf("%s is not a member (as %s sees the cluster; add it with member add ID RAFT_ADDR --learner)", id, st.NodeID)
}

func memberRemove(ctx context.Context, ac *adminClient, id string, stdout io.Writer) error {
	out, err := ac.change(ctx, http.MethodDelete, "/v1/admin/voters/"+url.PathEscape(id), nil)
	if err != nil {
		return err
	}
	return writeChanged(stdout, out, "removed "+id)
}

// writeChanged prints what and the configuration in a change's answer.
func writeChanged(w io.Writer, out []byte, what string) error {
	var ch changed
	if err := json.Unmarshal(out, &ch); err != nil {
		return fmt.Errorf("bad answer to the change (it was made): %w", err)
	}
	fmt.Fprintln(w, what)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDR\tROLE")
	for _, m := range ch.Voters {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.ID, m.RaftAddr, m.role())
	}
	return tw.Flush()
}

// runLeader is latchctl leader transfer [ID].
func runLeader(fs *flag.FlagSet, c *common, args []string, getenv func(string) string, stdout io.Writer) error {
	var a adminFlags
	a.register(fs, getenv)
	pos, cmd, err := parse(fs, args)
	if err != nil {
		return err
	}
	if cmd != nil || len(pos) == 0 || pos[0] != "transfer" || len(pos) > 2 {
		return usagef("usage: latchctl leader transfer [ID]")
	}
	ac, err := c.newAdmin(&a)
	if err != nil {
		return err
	}
	var b struct {
		ID string `json:"id,omitempty"`
	}
	if len(pos) == 2 {
		b.ID = pos[1]
	}
	body, _ := json.Marshal(b) // a string: cannot fail
	if _, err := ac.change(context.Background(), http.MethodPost, "/v1/admin/leadership-transfer", body); err != nil {
		return err
	}
	if b.ID != "" {
		fmt.Fprintf(stdout, "leadership transferred to %s\n", b.ID)
	} else {
		fmt.Fprintln(stdout, "the leader stepped down; the most up-to-date voter takes over")
	}
	return nil
}
