package bench

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// sessionHeader carries the REST session of a state-touching request.
const sessionHeader = "X-Latchd-Session"

// httpDriver drives latchd's REST API over one keep-alive connection with
// one session. Requests, responses and URLs are reused between ops, and
// answers are scanned for "status" and "token" without a JSON decoder.
type httpDriver struct {
	fastConn
	session []byte

	base     []byte // "http://host:port/v1/locks/<key>" or .../semaphores/<key>
	url      []byte // scratch
	acqBody  []byte
	enqBody  []byte
	waitBody []byte
	twoPhase bool
	rw       rwPick // ModeRW: reads or writes, per op
	token    []byte
	timeout  time.Duration // client-side bound on one request
}

func dialHTTP(ctx context.Context, cfg Config, addr string, w int) (driver, error) {
	d := &httpDriver{
		fastConn: newFastConn(&fasthttp.HostClient{
			Addr:                          addr,
			MaxConns:                      1,
			DisableHeaderNamesNormalizing: true,
			NoDefaultUserAgentHeader:      true,
		}),
		twoPhase: cfg.Mode == ModeTwoPhase,
		timeout:  cfg.AcquireTimeout + 30*time.Second,
	}
	kind := "/v1/locks/"
	limit := ""
	switch cfg.Mode {
	case ModeSem:
		kind = "/v1/semaphores/"
		limit = `,"limit":` + strconv.Itoa(cfg.Limit)
	case ModeRW:
		kind = "/v1/rwlocks/"
		d.rw = newRWPick(cfg.ReadRatio, w)
	}
	d.base = append([]byte("http://"+addr+kind), cfg.key(w)...)
	ttl := ""
	if cfg.LeaseTTL > 0 {
		ttl = `,"lease_ttl_s":` + strconv.FormatInt(seconds(cfg.LeaseTTL), 10)
	}
	timeout := strconv.FormatInt(seconds(cfg.AcquireTimeout), 10)
	d.acqBody = []byte(`{"acquire_timeout_s":` + timeout + ttl + limit + `}`)
	d.enqBody = []byte(`{` + strings.TrimPrefix(ttl+limit, ",") + `}`)
	d.waitBody = []byte(`{"wait_timeout_s":` + timeout + `}`)

	if err := d.openSession(ctx); err != nil {
		d.release()
		return nil, err
	}
	return d, nil
}

// openSession opens the session, and the connection, before the clock
// starts; ctx carries dialAll's deadline.
func (d *httpDriver) openSession(ctx context.Context) error {
	d.req.Header.SetMethod(fasthttp.MethodPost)
	d.req.SetRequestURI("http://" + d.hc.Addr + "/v1/sessions")
	dl, _ := ctx.Deadline()
	if err := d.hc.DoDeadline(d.req, d.resp, dl); err != nil {
		return err
	}
	if sc := d.resp.StatusCode(); sc != fasthttp.StatusCreated && sc != fasthttp.StatusOK {
		return fmt.Errorf("POST /v1/sessions: %d %s", sc, d.resp.Body())
	}
	id := jsonString(d.resp.Body(), `"session_id"`)
	if len(id) == 0 {
		return fmt.Errorf("POST /v1/sessions: no session_id in %s", d.resp.Body())
	}
	d.session = append([]byte(nil), id...)
	return nil
}

// do sends one request with the session header and a JSON body.
func (d *httpDriver) do(method string, url, body []byte) error {
	d.req.Reset()
	d.req.Header.SetMethod(method)
	d.req.SetRequestURIBytes(url)
	d.req.Header.SetBytesV(sessionHeader, d.session)
	if body != nil {
		d.req.Header.SetContentType("application/json")
		d.req.SetBodyRaw(body)
	}
	return d.hc.DoTimeout(d.req, d.resp, d.timeout)
}

func (d *httpDriver) op() error {
	var err error
	if d.twoPhase {
		err = d.enqueueWait()
	} else {
		err = d.do(fasthttp.MethodPost, d.acquireURL(), d.acqBody)
		if err == nil {
			err = d.grant("ok")
		}
	}
	if err != nil {
		return err
	}
	d.url = append(append(append(d.url[:0], d.base...), "?token="...), d.token...)
	if err := d.do(fasthttp.MethodDelete, d.url, nil); err != nil {
		return err
	}
	if d.resp.StatusCode() != fasthttp.StatusOK {
		return d.refusal()
	}
	return nil
}

func (d *httpDriver) enqueueWait() error {
	d.url = append(append(d.url[:0], d.base...), "/enqueue"...)
	if err := d.do(fasthttp.MethodPost, d.url, d.enqBody); err != nil {
		return err
	}
	if d.resp.StatusCode() == fasthttp.StatusOK && string(jsonString(d.resp.Body(), `"status"`)) == "queued" {
		d.url = append(append(d.url[:0], d.base...), "/wait"...)
		if err := d.do(fasthttp.MethodPost, d.url, d.waitBody); err != nil {
			return err
		}
		return d.grant("ok")
	}
	return d.grant("acquired")
}

// grant checks that the response is a grant and keeps its token.
func (d *httpDriver) grant(status string) error {
	body := d.resp.Body()
	if d.resp.StatusCode() != fasthttp.StatusOK {
		return d.refusal()
	}
	tok := jsonString(body, `"token"`)
	if len(tok) == 0 || string(jsonString(body, `"status"`)) != status {
		return fmt.Errorf("unexpected grant %s", body)
	}
	d.token = append(d.token[:0], tok...)
	return nil
}

// refusal classifies a non-200 answer: a timeout, a conflict or a limit
// is a refused op; anything else ends the run.
func (d *httpDriver) refusal() error {
	switch d.resp.StatusCode() {
	case fasthttp.StatusConflict, fasthttp.StatusTooManyRequests:
		return refused(fmt.Sprintf("HTTP %d %s", d.resp.StatusCode(), bytes.TrimSpace(d.resp.Body())))
	}
	return fmt.Errorf("HTTP %d: %s", d.resp.StatusCode(), d.resp.Body())
}

// jsonString returns the string value of the first "name": "value" in
// body, or nil. It is enough for the flat objects of the REST API, whose
// strings (tokens, ids, status words) hold no escapes.
func jsonString(body []byte, name string) []byte {
	_, rest, ok := bytes.Cut(body, []byte(name))
	if ok {
		rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " \t\r\n"), []byte(":"))
	}
	if ok {
		rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " \t\r\n"), []byte(`"`))
	}
	if ok {
		rest, _, ok = bytes.Cut(rest, []byte(`"`))
	}
	if !ok {
		return nil
	}
	return rest
}

func (d *httpDriver) close() error {
	if d.req == nil {
		return nil
	}
	// Ending the session releases anything still held; best effort.
	d.url = append(append(d.url[:0], "http://"+d.hc.Addr+"/v1/sessions/"...), d.session...)
	d.req.Reset()
	d.req.Header.SetMethod(fasthttp.MethodDelete)
	d.req.SetRequestURIBytes(d.url)
	_ = d.hc.DoTimeout(d.req, d.resp, time.Second)
	d.hc.CloseIdleConnections()
	d.release()
	return nil
}

// fastConn is a worker's one keep-alive fasthttp connection, with the
// request and response it reuses.
type fastConn struct {
	hc   *fasthttp.HostClient
	req  *fasthttp.Request
	resp *fasthttp.Response
}

func newFastConn(hc *fasthttp.HostClient) fastConn {
	return fastConn{hc: hc, req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse()}
}

// interrupt closes idle connections; a request in progress ends at its
// own timeout.
func (c *fastConn) interrupt() { c.hc.CloseIdleConnections() }

func (c *fastConn) release() {
	fasthttp.ReleaseRequest(c.req)
	fasthttp.ReleaseResponse(c.resp)
	c.req, c.resp = nil, nil
}
