package httpfast

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/latchd/latchd/backend"
	"github.com/latchd/latchd/internal/testutil"
	"github.com/latchd/latchd/server/servertest"
)

// harness is an engine with its clock and TCP server (from testutil) plus
// an httpfast server on 127.0.0.1:0, and a client that checks every
// response against the OpenAPI document.
type harness struct {
	t      *testing.T
	ts     *servertest.Server
	srv    *Server
	base   string
	client *http.Client
	router routers.Router
}

// startHTTP starts a harness. mod adjusts the httpfast config.
func startHTTP(t *testing.T, mod func(*Config), opts ...servertest.Option) *harness {
	t.Helper()
	ts := servertest.StartServer(t, opts...)
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg, backend.NewLocal(ts.Engine), zaptest.NewLogger(t), WithConnections(ts.TCP.Connections))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	h := &harness{
		t:      t,
		ts:     ts,
		srv:    srv,
		base:   "http://" + srv.Addr(),
		client: &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}},
	}
	t.Cleanup(func() {
		h.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	h.router = openAPIRouter(t, h.base)
	return h
}

var (
	docOnce sync.Once
	docVal  *openapi3.T
	docErr  error
)

// openAPIRouter loads the embedded document once, validates it, and
// routes requests to base against it.
func openAPIRouter(t *testing.T, base string) routers.Router {
	t.Helper()
	docOnce.Do(func() {
		// The dashboard's files (/ui/) are text; check them as such.
		for _, ct := range []string{"text/html", "text/javascript", "text/css"} {
			openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
		}
		docVal, docErr = openapi3.NewLoader().LoadFromData(openAPIDoc)
		if docErr == nil {
			docErr = docVal.Validate(context.Background())
		}
	})
	if docErr != nil {
		t.Fatalf("OpenAPI document: %v", docErr)
	}
	doc := *docVal // shallow: only Servers differs per harness
	doc.Servers = openapi3.Servers{{URL: base}}
	r, err := legacy.NewRouter(&doc)
	if err != nil {
		t.Fatalf("router: %v", err)
	}
	return r
}

// resp is a response the harness has checked against the document.
type resp struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (r resp) str(field string) string {
	s, _ := r.body[field].(string)
	return s
}

func (r resp) num(field string) float64 {
	f, _ := r.body[field].(float64)
	return f
}

// call is a request; hdr holds extra headers as name, value pairs.
type call struct {
	method  string
	path    string
	session string
	body    string
	hdr     []string
	// invalid marks a request meant to break the contract, so only its
	// response is checked against the document.
	invalid bool
}

func (h *harness) do(c call) resp {
	h.t.Helper()
	r, err := h.try(c)
	if err != nil {
		h.t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	return r
}

// try makes the request and validates it (unless invalid) and its
// response against the OpenAPI document. Paths with no route must
// answer 404 or 405 in the error shape.
func (h *harness) try(c call) (resp, error) {
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, h.base+c.path, body)
	unparsable := err != nil
	if unparsable {
		// A path net/url refuses (bad percent-encoding): send it raw.
		if req, err = http.NewRequest(c.method, h.base+"/", body); err != nil {
			return resp{}, err
		}
		req.URL.Opaque = c.path
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.session != "" {
		req.Header.Set("X-Latchd-Session", c.session)
	}
	for i := 0; i+1 < len(c.hdr); i += 2 {
		req.Header.Set(c.hdr[i], c.hdr[i+1])
	}
	hr, err := h.client.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer hr.Body.Close()
	raw, err := io.ReadAll(hr.Body)
	if err != nil {
		return resp{}, err
	}
	r := resp{status: hr.StatusCode, header: hr.Header, raw: raw}
	if strings.HasPrefix(hr.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			h.t.Errorf("%s %s: answer is not a JSON object: %q", c.method, c.path, raw)
		}
	}
	if unparsable {
		checkErrorShape(h.t, raw)
	} else {
		h.validate(c, req, hr, raw)
	}
	return r, nil
}

func (h *harness) validate(c call, req *http.Request, hr *http.Response, raw []byte) {
	h.t.Helper()
	route, params, err := h.router.FindRoute(req)
	if err != nil {
		// No route in the document: the server must say so in the
		// error shape.
		if hr.StatusCode != http.StatusNotFound && hr.StatusCode != http.StatusMethodNotAllowed {
			h.t.Errorf("%s %s: not in the OpenAPI document (%v) but answered %d", c.method, c.path, err, hr.StatusCode)
		}
		checkErrorShape(h.t, raw)
		return
	}
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		MultiError:            true,
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if !c.invalid {
		vreq := req.Clone(context.Background())
		vreq.Body = io.NopCloser(strings.NewReader(c.body))
		in.Request = vreq
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			h.t.Errorf("%s %s: request does not match the OpenAPI document: %v", c.method, c.path, err)
		}
		in.Request = req
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 hr.StatusCode,
		Header:                 hr.Header,
		Body:                   io.NopCloser(bytes.NewReader(raw)),
		Options:                opts,
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		h.t.Errorf("%s %s: response %d %s does not match the OpenAPI document: %v", c.method, c.path, hr.StatusCode, raw, err)
	}
}

// checkErrorShape fails unless raw is {"error":<code>,"message":<text>}.
func checkErrorShape(t *testing.T, raw []byte) {
	t.Helper()
	var e map[string]any
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Errorf("error body %q is not JSON: %v", raw, err)
		return
	}
	code, ok1 := e["error"].(string)
	_, ok2 := e["message"].(string)
	if !ok1 || !ok2 || code == "" || len(e) != 2 {
		t.Errorf("error body %q is not {error, message}", raw)
	}
}

// session opens a session and returns its id.
func (h *harness) session() string {
	h.t.Helper()
	r := h.do(call{method: "POST", path: "/v1/sessions"})
	if r.status != http.StatusCreated {
		h.t.Fatalf("POST /v1/sessions = %d %s", r.status, r.raw)
	}
	return r.str("session_id")
}

// wantStatus fails unless r has the status and, for an error, the code
// (or, for a 2xx/409 answer, the "status" field).
func wantStatus(t *testing.T, what string, r resp, status int, code string) {
	t.Helper()
	got := r.str("error")
	if got == "" {
		got = r.str("status")
	}
	if r.status != status || (code != "" && got != code) {
		t.Fatalf("%s = %d %s; want %d %q", what, r.status, r.raw, status, code)
	}
}

// held returns the engine's held and waiting counts.
func (h *harness) held() (held, waiting int) {
	_, g := h.ts.Engine.Metrics()
	return g.Held, g.Waiting
}

// waitFor polls until the engine reports the counts.
func (h *harness) waitFor(held, waiting int) {
	h.t.Helper()
	testutil.Eventually(h.t, 5*time.Second, func() bool {
		hh, ww := h.held()
		return hh == held && ww == waiting
	}, "engine held/waiting counts")
}

// tcpClient speaks the TCP protocol to the testutil server.
type tcpClient struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dialTCP(t *testing.T, addr string) *tcpClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &tcpClient{t: t, c: c, rd: bufio.NewReader(c)}
}

func (c *tcpClient) send(cmd, key, arg string) {
	c.t.Helper()
	if _, err := c.c.Write([]byte(cmd + "\n" + key + "\n" + arg + "\n")); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *tcpClient) read() string {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := c.rd.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return strings.TrimSuffix(line, "\n")
}

// startBench starts engine, clock, TCP and httpfast servers for a
// benchmark, logging nothing.
func startBench(b *testing.B) *harness {
	b.Helper()
	ts := servertest.StartServer(b)
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	srv, err := New(cfg, backend.NewLocal(ts.Engine), zap.NewNop(), WithConnections(ts.TCP.Connections))
	if err != nil {
		b.Fatalf("New: %v", err)
	}
	if err := srv.Start(); err != nil {
		b.Fatalf("Start: %v", err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			b.Errorf("Stop: %v", err)
		}
	})
	return &harness{ts: ts, srv: srv}
}
