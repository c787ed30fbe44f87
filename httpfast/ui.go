package httpfast

import (
	"cmp"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"mime"
	"path"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/latchd/latchd/engine"
	"github.com/latchd/latchd/internal/clock"
)

// The dashboard: embedded static files under GET /ui/ that poll GET
// /v1/ui/keys. The files hold no data and are served without the bearer
// token; every data route still needs it (docs/dashboard.md).

//go:embed ui
var uiFS embed.FS

// uiFile is one embedded file with its content type.
type uiFile struct {
	body  []byte
	ctype string
}

// uiFiles maps a path under /ui/ ("" for the page itself) to its file.
var uiFiles = func() map[string]uiFile {
	m := map[string]uiFile{}
	_ = fs.WalkDir(uiFS, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := uiFS.ReadFile(p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, "ui/")
		ct := cmp.Or(mime.TypeByExtension(path.Ext(name)), "application/octet-stream")
		m[name] = uiFile{body: body, ctype: ct}
		if name == "index.html" {
			m[""] = m[name]
		}
		return nil
	})
	return m
}()

// uiCSP lets the page load only its own files and talk only to its own
// origin.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// serveUI answers GET /ui/{file}; rest is the path after "/ui".
func (s *Server) serveUI(ctx *fasthttp.RequestCtx, rest []byte) {
	if len(rest) == 0 {
		ctx.Response.Header.Set("Location", "/ui/")
		writeJSON(ctx, fasthttp.StatusMovedPermanently, []byte(`{"status":"moved","location":"/ui/"}`))
		return
	}
	f, ok := uiFiles[string(rest[1:])]
	if !ok {
		writeError(ctx, errNotFound, "no such file")
		return
	}
	h := &ctx.Response.Header
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	h.SetContentType(f.ctype)
	writeStatic(ctx, f.body)
}

// uiKeysMax caps ?limit= of GET /v1/ui/keys.
const (
	uiKeysDefault = 50
	uiKeysMax     = 1000
)

// uiKey is one key in GET /v1/ui/keys, with its first holder if any.
type uiKey struct {
	Key     string `json:"key"`
	Kind    string `json:"kind"`
	Limit   int    `json:"limit"`
	Holders int    `json:"holders"`
	Waiters int    `json:"waiters"`
	keyHolder
}

// uiTotals are the node's gauges and counters; the page turns the
// counters into rates between two polls.
type uiTotals struct {
	Connections int    `json:"connections"`
	Sessions    int    `json:"sessions"`
	Keys        int    `json:"keys"`
	Held        int    `json:"held"`
	Waiting     int    `json:"waiting"`
	Grants      uint64 `json:"grants_total"`
	Releases    uint64 `json:"releases_total"`
	Renewals    uint64 `json:"renewals_total"`
	Timeouts    uint64 `json:"timeouts_total"`
	Expiries    uint64 `json:"expiries_total"`
	Dropped     uint64 `json:"dropped_total"`
	LastFence   string `json:"last_fence"`
	Delayed     int    `json:"delayed"`           // slots a lock-delay holds back
	LockDelays  uint64 `json:"lock_delays_total"` // lock-delays begun
}

type uiKeys struct {
	Keys    []uiKey  `json:"keys"`
	Matched int      `json:"matched"`
	Totals  uiTotals `json:"totals"`
	Cluster any      `json:"cluster,omitempty"`
}

// serveUIKeys answers GET /v1/ui/keys?q=&limit=: the busiest keys whose
// name contains q (most waiters, then most holders, then by name), at
// most limit (default 50, at most 1000), with the node's totals.
func (s *Server) serveUIKeys(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	limit := uiKeysDefault
	if raw := args.Peek("limit"); len(raw) > 0 {
		n, err := strconv.Atoi(string(raw))
		if err != nil || n < 1 || n > uiKeysMax {
			writeError(ctx, errBadRequest, "limit must be an integer from 1 to 1000")
			return
		}
		limit = n
	}
	q := args.Peek("q")
	if len(q) > maxKeyLen {
		writeError(ctx, errBadRequest, "q must be at most 256 bytes")
		return
	}
	if !s.buildSlot(ctx) {
		return
	}
	defer func() { <-s.statsSem }()
	if !s.budget.Fits(int64(s.cfg.MaxStatsBytes)) {
		limit = 0 // over the output budget: the totals only
	}
	eng := s.be.Engine()
	now := clock.Now()
	top, matched := eng.TopKeys(now, string(q), limit)
	c, g := eng.Metrics()
	out := uiKeys{
		Keys:    make([]uiKey, len(top)),
		Matched: matched,
		Totals: uiTotals{
			Connections: s.conns() + g.Sessions, Sessions: g.Sessions, Keys: g.Keys, Held: g.Held, Waiting: g.Waiting,
			Grants: c.Grants, Releases: c.Releases, Renewals: c.Renewals, Timeouts: c.Timeouts, Expiries: c.Expiries,
			Dropped: c.Dropped, LastFence: strconv.FormatUint(eng.LastFence(), 10),
			Delayed: g.Delayed, LockDelays: c.Delays,
		},
	}
	for i, k := range top {
		out.Keys[i] = uiKey{Key: k.Key, Kind: kindOf(k.Limit), Limit: k.Limit, Holders: k.Holders, Waiters: k.Waiters}
		if k.Holders > 0 {
			out.Keys[i].keyHolder = holderOf(engine.Holder{Owner: k.Owner, Fence: k.Fence, LeaseExpiresInS: k.LeaseExpiresInS})
			out.Keys[i].Mode = rwModeName(k.Limit, k.Shared)
		}
	}
	out.Cluster = s.be.ClusterStatus()
	body, err := json.Marshal(out)
	if err != nil {
		writeError(ctx, errInternal, "cannot encode keys")
		return
	}
	s.writeCounted(ctx, typeJSON, body)
}

func kindOf(limit int) string {
	switch limit {
	case 1:
		return "lock"
	case engine.RWLimit:
		return "rwlock"
	}
	return "semaphore"
}

// keyHolder and keyWaiter are GET /v1/locks/{key}'s lists. Owners and
// fences are strings: they may not fit a float64, and the page is
// JavaScript. A fence is written as the token's first 16 hex digits.
type keyHolder struct {
	Owner           string  `json:"owner"`
	Fence           string  `json:"fence"`
	LeaseExpiresInS float64 `json:"lease_expires_in_s"`
	Mode            string  `json:"mode,omitempty"` // a read-write key's holder: read or write
}

func holderOf(h engine.Holder) keyHolder {
	return keyHolder{Owner: strconv.FormatUint(uint64(h.Owner), 10), Fence: fmt.Sprintf("%016x", h.Fence),
		LeaseExpiresInS: h.LeaseExpiresInS}
}

type keyWaiter struct {
	Owner          string   `json:"owner"`
	WaitExpiresInS *float64 `json:"wait_expires_in_s,omitempty"`
	Mode           string   `json:"mode,omitempty"` // a read-write key's waiter: read or write
}

type keyState struct {
	Key          string      `json:"key"`
	Exists       bool        `json:"exists"`
	Kind         string      `json:"kind"`
	Limit        int         `json:"limit"`
	Holders      []keyHolder `json:"holders"`
	Waiters      []keyWaiter `json:"waiters"`
	HoldersTotal int         `json:"holders_total"`
	WaitersTotal int         `json:"waiters_total"`
	Truncated    bool        `json:"truncated,omitempty"`
	IdleS        float64     `json:"idle_s"`
}

// keyListMax bounds the holders and the waiters GET /v1/locks/{key} lists
// (each): a key with 100,000 waiters answers the first keyListMax and the
// totals, about 50 KiB, not megabytes per request.
const keyListMax = 1000

// serveKey answers GET /v1/locks/{key} and GET /v1/semaphores/{key}: who
// holds the key and who waits, in queue order, from this node's engine (a
// key not in memory: exists false). The kind and limit are the key's own.
func (s *Server) serveKey(ctx *fasthttp.RequestCtx, o op, rawKey []byte) {
	var buf [maxKeyLen]byte
	key, ok := decodeKey(&buf, rawKey)
	if !ok {
		writeError(ctx, errBadRequest, "bad key: must be 1-256 bytes after URL-decoding, with no space, tab, CR or LF")
		return
	}
	// Built one or two at a time, like stats, and counted in the output
	// budget until written: past the budget, the totals only.
	if !s.buildSlot(ctx) {
		return
	}
	defer func() { <-s.statsSem }()
	most := keyListMax
	if !s.budget.Fits(int64(s.cfg.MaxStatsBytes)) {
		most = 0
	}
	ki, found := s.be.Engine().InspectMax(clock.Now(), string(key), most)
	st := keyState{Key: string(key), Exists: found, Holders: []keyHolder{}, Waiters: []keyWaiter{},
		HoldersTotal: ki.HoldersTotal, WaitersTotal: ki.WaitersTotal,
		Truncated: len(ki.Holders) < ki.HoldersTotal || len(ki.Waiters) < ki.WaitersTotal}
	if !found {
		st.Kind, st.Limit = "lock", 1
		switch o {
		case opSemGet:
			st.Kind, st.Limit = "semaphore", 0
		case opRWGet:
			st.Kind, st.Limit = "rwlock", engine.RWLimit
		}
	} else {
		st.Kind, st.Limit, st.IdleS = kindOf(ki.Limit), ki.Limit, ki.IdleS
		for _, h := range ki.Holders {
			kh := holderOf(h)
			kh.Mode = rwModeName(ki.Limit, h.Shared)
			st.Holders = append(st.Holders, kh)
		}
		for _, w := range ki.Waiters {
			kw := keyWaiter{Owner: strconv.FormatUint(uint64(w.Owner), 10), Mode: rwModeName(ki.Limit, w.Shared)}
			if w.WaitExpiresInS >= 0 {
				kw.WaitExpiresInS = &w.WaitExpiresInS
			}
			st.Waiters = append(st.Waiters, kw)
		}
	}
	body, err := json.Marshal(st)
	if err != nil {
		writeError(ctx, errInternal, "cannot encode key state")
		return
	}
	s.writeCounted(ctx, typeJSON, body)
}

// serveReadyz answers GET /readyz: 200 {"status":"ok"} when the node
// serves, else 503 unavailable with the reason.
func (s *Server) serveReadyz(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() || len(s.lnSet.Down()) > 0 {
		s.healthz(ctx) // stopping, or a listener not accepting: its 503
		return
	}
	var err error
	if s.ready != nil {
		err = s.ready()
	} else {
		err = s.be.Ready()
	}
	if err != nil {
		writeError(ctx, errUnavailable, "not ready: "+err.Error())
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, bodyOK)
}
