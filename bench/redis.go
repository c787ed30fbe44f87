package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"time"
)

// The classic single-instance Redis lock: acquire with SET key token NX PX
// ttl, release with a script that deletes the key only if it still holds
// the caller's token. The semaphore is a sorted set of holders scored by
// lease expiry.
const (
	redisReleaseScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	// ARGV: token, limit, now_ms, ttl_ms.
	redisSemAcquireScript = `redis.call("zremrangebyscore", KEYS[1], "-inf", ARGV[3])
if redis.call("zcard", KEYS[1]) < tonumber(ARGV[2]) then
  redis.call("zadd", KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[1])
  redis.call("pexpire", KEYS[1], ARGV[4])
  return 1
end
return 0`
)

// Backoff of a Redis acquire that found the key taken: Redis has no queue,
// so a contended client polls, sleeping a jittered, doubling pause.
const (
	redisBackoffMin = 50 * time.Microsecond
	redisBackoffMax = 2 * time.Millisecond
)

// redisDriver speaks RESP2 over one connection, with one reused request
// buffer and a bufio.Reader, like tcpDriver: the comparison measures the
// servers, not two client libraries.
type redisDriver struct {
	conn net.Conn
	rd   *bufio.Reader
	out  []byte

	key      []byte
	sem      bool
	limit    []byte
	ttlMs    []byte
	timeout  time.Duration
	release  []byte // SHA1 of the release script
	acquire  []byte // SHA1 of the semaphore script
	token    []byte
	tokenLen int // length of the random prefix
	seq      uint64
	rng      *mrand.Rand
	scratch  []byte
}

func dialRedis(ctx context.Context, cfg Config, addr string, w int) (driver, error) {
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	ttl := cfg.LeaseTTL
	if ttl == 0 {
		ttl = RedisTTL
	}
	var seed [16]byte
	_, _ = rand.Read(seed[:])
	d := &redisDriver{
		conn:    conn,
		rd:      bufio.NewReaderSize(conn, 4096),
		out:     make([]byte, 0, 512),
		key:     cfg.key(w),
		sem:     cfg.Mode == ModeSem,
		limit:   []byte(strconv.Itoa(cfg.Limit)),
		ttlMs:   []byte(strconv.FormatInt(ttl.Milliseconds(), 10)),
		timeout: cfg.AcquireTimeout,
		token:   []byte(hex.EncodeToString(seed[:8])),
		rng:     mrand.New(mrand.NewPCG(0, uint64(w))),
	}
	d.tokenLen = len(d.token)
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if d.release, err = d.scriptLoad(redisReleaseScript); err == nil && d.sem {
		d.acquire, err = d.scriptLoad(redisSemAcquireScript)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(timeZero)
	return d, nil
}

func (d *redisDriver) scriptLoad(script string) ([]byte, error) {
	d.out = appendArray(d.out[:0], 3)
	d.out = appendBulk(d.out, []byte("SCRIPT"))
	d.out = appendBulk(d.out, []byte("LOAD"))
	d.out = appendBulk(d.out, []byte(script))
	if _, err := d.conn.Write(d.out); err != nil {
		return nil, err
	}
	line, err := d.rd.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if line[0] != '$' {
		return nil, fmt.Errorf("SCRIPT LOAD: %q", line)
	}
	n, err := strconv.Atoi(string(trimCRLF(line[1:])))
	if err != nil || n <= 0 || n > 128 {
		return nil, fmt.Errorf("SCRIPT LOAD: %q", line)
	}
	sha := make([]byte, n+2)
	if _, err := io.ReadFull(d.rd, sha); err != nil {
		return nil, err
	}
	return sha[:n], nil
}

func (d *redisDriver) op() error {
	d.seq++
	d.token = strconv.AppendUint(d.token[:d.tokenLen], d.seq, 16)
	var deadline time.Time
	backoff := redisBackoffMin
	for {
		ok, err := d.tryAcquire()
		if err != nil {
			return err
		}
		if ok {
			break
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(d.timeout)
		}
		if !now.Before(deadline) {
			return refused("timeout (the key stayed taken)")
		}
		time.Sleep(backoff/2 + time.Duration(d.rng.Int64N(int64(backoff))))
		backoff = min(2*backoff, redisBackoffMax)
	}
	if d.sem {
		d.out = appendArray(d.out[:0], 3)
		d.out = appendBulk(d.out, []byte("ZREM"))
	} else {
		d.out = appendArray(d.out[:0], 5)
		d.out = appendBulk(d.out, []byte("EVALSHA"))
		d.out = appendBulk(d.out, d.release)
		d.out = appendBulk(d.out, []byte("1"))
	}
	d.out = appendBulk(d.out, d.key)
	d.out = appendBulk(d.out, d.token)
	n, err := d.intReply()
	if err != nil {
		return err
	}
	if n != 1 {
		return refused("release found the lease gone")
	}
	return nil
}

// tryAcquire makes one attempt and reports whether it was granted.
func (d *redisDriver) tryAcquire() (bool, error) {
	if d.sem {
		d.out = appendArray(d.out[:0], 8)
		d.out = appendBulk(d.out, []byte("EVALSHA"))
		d.out = appendBulk(d.out, d.acquire)
		d.out = appendBulk(d.out, []byte("1"))
		d.out = appendBulk(d.out, d.key)
		d.out = appendBulk(d.out, d.token)
		d.out = appendBulk(d.out, d.limit)
		d.scratch = strconv.AppendInt(d.scratch[:0], time.Now().UnixMilli(), 10)
		d.out = appendBulk(d.out, d.scratch)
		d.out = appendBulk(d.out, d.ttlMs)
		n, err := d.intReply()
		return n == 1, err
	}
	d.out = appendArray(d.out[:0], 6)
	d.out = appendBulk(d.out, []byte("SET"))
	d.out = appendBulk(d.out, d.key)
	d.out = appendBulk(d.out, d.token)
	d.out = appendBulk(d.out, []byte("NX"))
	d.out = appendBulk(d.out, []byte("PX"))
	d.out = appendBulk(d.out, d.ttlMs)
	line, err := d.reply()
	if err != nil {
		return false, err
	}
	switch {
	case len(line) >= 3 && line[0] == '+' && line[1] == 'O' && line[2] == 'K':
		return true, nil
	case len(line) >= 3 && line[0] == '$' && line[1] == '-' && line[2] == '1':
		return false, nil // nil reply: the key is taken
	}
	return false, fmt.Errorf("SET NX: %q", line)
}

// reply writes d.out and reads one reply line; an error reply is an error.
func (d *redisDriver) reply() ([]byte, error) {
	if _, err := d.conn.Write(d.out); err != nil {
		return nil, err
	}
	line, err := d.rd.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if line[0] == '-' {
		return nil, fmt.Errorf("redis: %s", trimCRLF(line[1:]))
	}
	return line, nil
}

// intReply writes d.out and reads an integer reply.
func (d *redisDriver) intReply() (int64, error) {
	line, err := d.reply()
	if err != nil {
		return 0, err
	}
	if line[0] != ':' {
		return 0, fmt.Errorf("redis: want an integer, got %q", line)
	}
	var n int64
	for _, c := range trimCRLF(line[1:]) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("redis: bad integer %q", line)
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}

func (d *redisDriver) interrupt() { _ = d.conn.SetDeadline(timePast) }

func (d *redisDriver) close() error { return d.conn.Close() }

func trimCRLF(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func appendArray(dst []byte, n int) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '\r', '\n')
}

func appendBulk(dst, b []byte) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}
