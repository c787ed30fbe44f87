package bench

import (
	"bufio"
	"bytes"
	"cmp"
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
	ttl := cmp.Or(cfg.LeaseTTL, RedisTTL)
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
	_ = conn.SetDeadline(time.Time{})
	return d, nil
}

func (d *redisDriver) scriptLoad(script string) ([]byte, error) {
	d.command([]byte("SCRIPT"), []byte("LOAD"), []byte(script))
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
		d.command(redisZREM, d.key, d.token)
	} else {
		d.command(redisEVALSHA, d.release, redisOne, d.key, d.token)
	}
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
		d.scratch = strconv.AppendInt(d.scratch[:0], time.Now().UnixMilli(), 10)
		d.command(redisEVALSHA, d.acquire, redisOne, d.key, d.token, d.limit, d.scratch, d.ttlMs)
		n, err := d.intReply()
		return n == 1, err
	}
	d.command(redisSET, d.key, d.token, redisNX, redisPX, d.ttlMs)
	line, err := d.reply()
	switch {
	case err != nil:
		return false, err
	case bytes.HasPrefix(line, []byte("+OK")):
		return true, nil
	case bytes.HasPrefix(line, []byte("$-1")):
		return false, nil // nil reply: the key is taken
	}
	return false, fmt.Errorf("SET NX: %q", line)
}

// The words of the commands sent per op.
var (
	redisSET, redisNX, redisPX = []byte("SET"), []byte("NX"), []byte("PX")
	redisEVALSHA, redisZREM    = []byte("EVALSHA"), []byte("ZREM")
	redisOne                   = []byte("1")
)

// command encodes one command into d.out.
func (d *redisDriver) command(args ...[]byte) {
	d.out = append(strconv.AppendInt(append(d.out[:0], '*'), int64(len(args)), 10), '\r', '\n')
	for _, a := range args {
		d.out = append(strconv.AppendInt(append(d.out, '$'), int64(len(a)), 10), '\r', '\n')
		d.out = append(append(d.out, a...), '\r', '\n')
	}
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
	n, err := strconv.ParseInt(string(trimCRLF(line[1:])), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redis: bad integer %q", line)
	}
	return n, nil
}

func (d *redisDriver) interrupt() { _ = d.conn.SetDeadline(timePast) }

func (d *redisDriver) close() error { return d.conn.Close() }

func trimCRLF(b []byte) []byte { return bytes.TrimRight(b, "\r\n") }
