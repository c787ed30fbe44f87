package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/latchd/latchd/internal/backupfile"
)

// maxSnapshot bounds the answer of GET /v1/admin/snapshot.
const maxSnapshot = 4 << 30

// runSnapshot is latchctl snapshot save FILE | status FILE.
func runSnapshot(fs *flag.FlagSet, c *common, args []string, getenv func(string) string, stdout io.Writer) error {
	var a adminFlags
	a.register(fs, getenv)
	asJSON := fs.Bool("json", false, "status: print the file's header as JSON")
	pos, cmd, err := parse(fs, args)
	if err != nil {
		return err
	}
	if cmd != nil || len(pos) != 2 || (pos[0] != "save" && pos[0] != "status") {
		return usagef("usage: latchctl snapshot save FILE | status FILE [--json]")
	}
	if pos[0] == "status" {
		return snapshotStatus(pos[1], *asJSON, stdout)
	}
	if *asJSON {
		return usagef("--json goes with snapshot status")
	}
	ac, err := c.newAdmin(&a)
	if err != nil {
		return err
	}
	return snapshotSave(context.Background(), ac, pos[1], stdout)
}

// snapshotSave writes to path, atomically, the first sound backup a node
// gives; during an election it asks again for up to noLeaderRetry.
func snapshotSave(ctx context.Context, ac *adminClient, path string, stdout io.Writer) error {
	deadline := time.Now().Add(noLeaderRetry)
	for {
		data, from, again, err := ac.snapshotOnce(ctx)
		if err == nil {
			m, _, _ := backupfile.Decode(path, data) // checked by snapshotOnce
			if err := backupfile.WriteFile(path, data); err != nil {
				return fmt.Errorf("snapshot save: %w", err)
			}
			fmt.Fprintf(stdout, "saved %s: %d bytes, raft index %d, highest fence %d, from %s\n", path, len(data), m.Index, m.Fence, from)
			return nil
		}
		if !again || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(noLeaderPause):
		}
	}
}

// snapshotOnce asks each node in turn for a backup and returns the first
// sound one and its node; again reports that some node could not answer
// for want of a leader.
func (ac *adminClient) snapshotOnce(ctx context.Context) (data []byte, from string, again bool, err error) {
	var errs []error
	for _, base := range ac.seeds {
		data, err := ac.send(ctx, http.MethodGet, base, "/v1/admin/snapshot", nil, maxSnapshot)
		if err == nil {
			if _, _, err = backupfile.Decode("the answer of "+base, data); err == nil {
				return data, base, false, nil
			}
		}
		errs = append(errs, err)
		var ae *apiError
		if errors.As(err, &ae) {
			if ae.code/100 == 4 { // refused (a wrong token): another node says the same
				return nil, "", false, err
			}
			again = again || ae.notLeader()
		}
	}
	return nil, "", again, errors.Join(errs...)
}

// snapshotReport is what snapshot status prints of a file.
type snapshotReport struct {
	File    string    `json:"file"`
	Version int       `json:"version"`
	Index   uint64    `json:"raft_index"`
	Fence   uint64    `json:"highest_fence"`
	Taken   time.Time `json:"taken"`
	Bytes   int       `json:"bytes"`
	Sum     string    `json:"sha256"`
}

// snapshotStatus checks the file at path and prints its header.
func snapshotStatus(path string, asJSON bool, stdout io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	m, _, err := backupfile.Decode(path, data)
	if err != nil {
		return err
	}
	r := snapshotReport{File: path, Version: backupfile.Version, Index: m.Index, Fence: m.Fence, Taken: m.Created.UTC(),
		Bytes: len(data), Sum: backupfile.Sum(data)}
	if asJSON {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	fmt.Fprintf(stdout, "%s: latchd backup version %d, checksum ok\nraft index     %d\nhighest fence  %d\ntaken          %s\nbytes          %d\nsha256         %s\n",
		r.File, r.Version, r.Index, r.Fence, r.Taken.Format(time.RFC3339), r.Bytes, r.Sum)
	return nil
}
