package bench

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// etcdLeaseTTL is the lease of one worker's etcd session. It outlives any
// row, so no keepalive runs during the measurement; the lease is revoked
// when the worker closes.
const etcdLeaseTTL = 3600

// etcdDriver drives an etcd v3 cluster through its JSON gateway (no gRPC
// client; etcd pays a JSON decode per request): each worker holds one
// lease, and each op is a Lock and an Unlock of the v3lock service.
type etcdDriver struct {
	fastConn
	base    string // "http://host:port"
	lease   string
	lockReq []byte // {"name":...,"lease":...}
	unlock  []byte // scratch: {"key":...}
	timeout time.Duration
}

func dialEtcd(ctx context.Context, cfg Config, addr string, w int) (driver, error) {
	d := &etcdDriver{
		fastConn: newFastConn(&fasthttp.HostClient{Addr: addr, MaxConns: 1, NoDefaultUserAgentHeader: true}),
		base:     "http://" + addr,
		timeout:  cfg.AcquireTimeout + 30*time.Second,
	}
	dl, _ := ctx.Deadline()
	body, err := d.post("/v3/lease/grant", []byte(`{"TTL":`+strconv.Itoa(etcdLeaseTTL)+`}`), dl)
	if err == nil {
		d.lease = string(jsonString(body, `"ID"`))
		if d.lease == "" {
			err = fmt.Errorf("etcd lease grant: no ID in %s", body)
		}
	}
	if err != nil {
		d.release()
		return nil, err
	}
	name := base64.StdEncoding.EncodeToString(cfg.key(w))
	d.lockReq = []byte(`{"name":"` + name + `","lease":"` + d.lease + `"}`)
	return d, nil
}

// post sends one JSON request and returns the body of a 200 answer.
func (d *etcdDriver) post(path string, body []byte, deadline time.Time) ([]byte, error) {
	d.req.Reset()
	d.req.Header.SetMethod(fasthttp.MethodPost)
	d.req.SetRequestURI(d.base + path)
	d.req.Header.SetContentType("application/json")
	d.req.SetBodyRaw(body)
	if deadline.IsZero() {
		deadline = time.Now().Add(d.timeout)
	}
	if err := d.hc.DoDeadline(d.req, d.resp, deadline); err != nil {
		return nil, err
	}
	if sc := d.resp.StatusCode(); sc != fasthttp.StatusOK {
		return nil, fmt.Errorf("etcd %s: %d %s", path, sc, d.resp.Body())
	}
	return d.resp.Body(), nil
}

func (d *etcdDriver) op() error {
	body, err := d.post("/v3/lock/lock", d.lockReq, time.Time{})
	if err != nil {
		return err
	}
	key := jsonString(body, `"key"`)
	if len(key) == 0 {
		return fmt.Errorf("etcd lock: no key in %s", body)
	}
	d.unlock = append(append(append(d.unlock[:0], `{"key":"`...), key...), `"}`...)
	_, err = d.post("/v3/lock/unlock", d.unlock, time.Time{})
	return err
}

func (d *etcdDriver) close() error {
	if d.lease != "" {
		_, _ = d.post("/v3/lease/revoke", []byte(`{"ID":"`+d.lease+`"}`), time.Now().Add(5*time.Second))
	}
	d.release()
	return nil
}
