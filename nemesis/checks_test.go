//go:build nemesis

package nemesis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/latchd/latchd/internal/lincheck"
)

// What every replica holds after heal, with the load stopped.

// keyState is the part of GET /v1/locks/{key} the nemesis reads.
type keyState struct {
	Holders []struct {
		Owner string  `json:"owner"`
		Fence string  `json:"fence"`
		Lease float64 `json:"lease_expires_in_s"`
	} `json:"holders"`
	Waiters []struct {
		Owner string `json:"owner"`
	} `json:"waiters"`
}

// readKey reads key on n with a consistent read, trying again until one
// answers or serve has passed. call is when the read that answered was
// sent, in rec's time.
func (c *cluster) readKey(rec *lincheck.Recorder, n *node, key string) (ks keyState, call int64, err error) {
	for end := time.Now().Add(serve); ; time.Sleep(100 * time.Millisecond) {
		call = rec.Now()
		var code int
		var b []byte
		code, b, err = c.get(n, "/v1/locks/"+key+"?consistent=true", false)
		if err == nil && code != 200 {
			err = fmt.Errorf("%d %s", code, b)
		}
		if err == nil {
			ks = keyState{}
			err = json.Unmarshal(b, &ks)
		}
		if err == nil || time.Now().After(end) {
			return ks, call, err
		}
	}
}

// finalReads reads every key of the phase on every node with a consistent
// read and adds each answer to the history as a read (RecordRead): the
// history then checks that no grant, renewal or release a client saw ok
// for is missing from any replica. A lease longer than the grants' ttl
// (secs) was renewed: renewals ask for twice it. It returns the nodes
// that could not answer.
func (c *cluster) finalReads(rec *lincheck.Recorder, prefix string, secs int64) []string {
	var bad []string
	for _, n := range c.nodes {
		for k := range keys {
			key := prefix + strconv.Itoa(k)
			ks, call, err := c.readKey(rec, n, key)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: no consistent read of %s within %v of heal: %v", n.id, key, serve, err))
				break
			}
			var fence uint64
			held := len(ks.Holders) > 0
			if held {
				fence, err = strconv.ParseUint(ks.Holders[0].Fence, 16, 64)
				if err != nil {
					bad = append(bad, fmt.Sprintf("%s: %s: bad fence %q", n.id, key, ks.Holders[0].Fence))
					continue
				}
			}
			rec.RecordRead(1000+n.idx, key, call, held, fence, held && ks.Holders[0].Lease > float64(secs))
		}
	}
	return bad
}

// digest is GET /v1/admin/state-digest's answer.
type digest struct {
	Index  uint64 `json:"applied_index"`
	Digest string `json:"digest"`
}

// digests waits until every node reports its state's digest at one
// applied index and checks they are the same. Expiries of the probes'
// leases still add entries now and then, so it polls until it sees the
// nodes at one index.
func (c *cluster) digests() []string {
	var last []digest
	for end := time.Now().Add(2 * serve); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		last = last[:0]
		for _, n := range c.nodes {
			var d digest
			code, b, err := c.get(n, "/v1/admin/state-digest", true)
			if err == nil && code == 200 {
				err = json.Unmarshal(b, &d)
			}
			if err != nil || code != 200 {
				break
			}
			last = append(last, d)
		}
		if len(last) < len(c.nodes) {
			continue
		}
		same := true
		for _, d := range last[1:] {
			same = same && d.Index == last[0].Index
		}
		if !same {
			continue
		}
		for i, d := range last[1:] {
			if d.Digest != last[0].Digest {
				return []string{fmt.Sprintf("replicas differ: at applied index %d %s's state digest is %s, %s's %s",
					d.Index, c.nodes[0].id, last[0].Digest, c.nodes[i+1].id, d.Digest)}
			}
		}
		c.t.Logf("replicas agree: state digest %.16s... at applied index %d on every node", last[0].Digest, last[0].Index)
		return nil
	}
	return []string{fmt.Sprintf("replicas did not reach one applied index within %v of heal: %+v", 2*serve, last)}
}
