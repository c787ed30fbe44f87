package httpfast

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkAcquireRelease measures one try-lock acquire plus its release
// over one HTTP keep-alive connection.
func BenchmarkAcquireRelease(b *testing.B) {
	h := startBench(b)
	c := &fasthttp.HostClient{Addr: h.srv.Addr(), MaxConns: 1}
	id := benchSession(b, c)
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	var tokBody []byte
	b.ReportAllocs()
	for b.Loop() {
		req.Reset()
		req.SetRequestURI("http://" + h.srv.Addr() + "/v1/locks/bench")
		req.Header.SetMethod("POST")
		req.Header.Set("X-Latchd-Session", id)
		if err := c.Do(req, res); err != nil || res.StatusCode() != 200 {
			b.Fatalf("acquire: %v %d %s", err, res.StatusCode(), res.Body())
		}
		body := res.Body()
		tok := body[len(`{"status":"ok","token":"`):][:32]
		tokBody = append(append(append(tokBody[:0], `{"token":"`...), tok...), `"}`...)
		req.Header.SetMethod("DELETE")
		req.SetBody(tokBody)
		if err := c.Do(req, res); err != nil || res.StatusCode() != 200 {
			b.Fatalf("release: %v %d %s", err, res.StatusCode(), res.Body())
		}
	}
}

func benchSession(b *testing.B, c *fasthttp.HostClient) string {
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.SetRequestURI("http://" + c.Addr + "/v1/sessions")
	req.Header.SetMethod("POST")
	if err := c.Do(req, res); err != nil || res.StatusCode() != 201 {
		b.Fatalf("session: %v %d", err, res.StatusCode())
	}
	return string(res.Body()[len(`{"session_id":"`):][:32])
}
