package httpfast

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/latchd/latchd/fence"
)

const typeJSON = "application/json"

var (
	contentJSON = []byte(typeJSON)

	bodyOK       = []byte(`{"status":"ok"}`)
	bodyQueued   = []byte(`{"status":"queued"}`)
	bodyTimedOut = []byte(`{"status":"timeout"}`)
)

// respBufLen fits every answer of the lock routes, so building one needs
// no heap memory: the longest is a grant, about 90 bytes.
const respBufLen = 128

func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.Response.Header.SetContentTypeBytes(contentJSON)
	ctx.SetBody(body)
}

// writeError answers {"error":code,"message":msg} with the code's status.
func writeError(ctx *fasthttp.RequestCtx, e apiErr, msg string) {
	var buf [respBufLen]byte
	b := append(buf[:0], `{"error":"`...)
	b = append(b, apiErrs[e].code...)
	b = append(b, `","message":`...)
	b = appendJSONString(b, msg)
	b = append(b, '}')
	if apiErrs[e].status == fasthttp.StatusTooManyRequests && len(ctx.Response.Header.Peek("Retry-After")) == 0 {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	writeJSON(ctx, apiErrs[e].status, b)
}

// writeGrant answers {"status":status,"token":...,"lease_ttl_s":...}.
func writeGrant(ctx *fasthttp.RequestCtx, status string, tok fence.Token, ttl time.Duration) {
	var buf [respBufLen]byte
	b := append(buf[:0], `{"status":"`...)
	b = append(b, status...)
	b = append(b, `","token":"`...)
	b = tok.AppendHex(b)
	b = append(b, `","lease_ttl_s":`...)
	b = appendSeconds(b, ttl)
	b = append(b, '}')
	writeJSON(ctx, fasthttp.StatusOK, b)
}

// writeSeconds answers status with head, d in seconds and a closing
// brace: head is a JSON object up to a number, `{"status":"ok","ttl_s":`.
func writeSeconds(ctx *fasthttp.RequestCtx, status int, head string, d time.Duration) {
	var buf [respBufLen]byte
	b := append(buf[:0], head...)
	b = appendSeconds(b, d)
	writeJSON(ctx, status, append(b, '}'))
}

// appendSeconds appends d in seconds as a JSON number: "33", "0.25".
func appendSeconds(dst []byte, d time.Duration) []byte {
	if d%time.Second == 0 {
		return strconv.AppendInt(dst, int64(d/time.Second), 10)
	}
	return strconv.AppendFloat(dst, d.Seconds(), 'f', -1, 64)
}

// appendJSONString appends s as a JSON string, escaping what JSON requires
// and replacing invalid UTF-8.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}
