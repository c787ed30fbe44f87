//go:build nemesis

package nemesis

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// namePrefix marks every namespace, link and mount a run creates:
// "ltnm<pid>-". Interface names must fit 15 bytes: ltnm + 7 digits + -n1h.
const namePrefix = "ltnm"

var staleName = regexp.MustCompile(`^` + namePrefix + `(\d+)-`)

// net is the run's topology: a bridge in the root namespace with no
// address, one namespace per node and one for the clients, each with a
// veth to the bridge and an address in 198.18.0.0/24 and no other route.
type topo struct {
	prefix  string
	bridge  string
	nodeNS  []string // per node
	hostIf  []string // per node: the bridge-side veth
	nodeIP  []string
	client  string // the clients' namespace
	mounts  []string
	imgDir  string    // the tmpfs holding the loop images
	loops   []loopDev // per node
	cgroups []string

	qdiscOnce sync.Once
	shape     []string // the qdisc that shapes a link (qdisc)
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newTopo builds the topology, or reports why it cannot. The caller
// registers cleanup before anything else can fail.
func newTopo(t *testing.T, nodes int) (*topo, error) {
	sweep(false)
	p := fmt.Sprintf("%s%d-", namePrefix, os.Getpid())
	tp := &topo{prefix: p, bridge: p + "br", client: p + "c"}
	t.Cleanup(func() { tp.teardown(t) })
	if err := run("ip", "link", "add", tp.bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	if err := run("ip", "link", "set", tp.bridge, "up"); err != nil {
		return nil, err
	}
	for i := range nodes {
		ns, ip := fmt.Sprintf("%sn%d", p, i+1), fmt.Sprintf("198.18.0.%d", 11+i)
		tp.nodeNS, tp.nodeIP = append(tp.nodeNS, ns), append(tp.nodeIP, ip)
		tp.hostIf = append(tp.hostIf, ns+"h")
		if err := tp.attach(ns, ip); err != nil {
			return nil, err
		}
	}
	return tp, tp.attach(tp.client, clientIP)
}

// clientIP is the clients' address. Their sockets bind it, so a socket
// made outside the clients' namespace fails instead of leaving the host.
const clientIP = "198.18.0.100"

// attach creates namespace ns with a veth (ns+"h" on the bridge, ns+"p"
// inside) carrying ip/24 and no other route.
func (tp *topo) attach(ns, ip string) error {
	host, peer := ns+"h", ns+"p"
	for _, c := range [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", ns},
		{"ip", "link", "set", host, "master", tp.bridge},
		{"ip", "link", "set", host, "up"},
		{"ip", "-n", ns, "addr", "add", ip + "/24", "dev", peer},
		{"ip", "-n", ns, "link", "set", peer, "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
	} {
		if err := run(c...); err != nil {
			return err
		}
	}
	return nil
}

// mountTmpfs mounts a tmpfs of size bytes on dir, its source named with
// the run's prefix so a later run can find it if this one crashes.
func (tp *topo) mountTmpfs(dir, name string, size int64) error {
	src := tp.prefix + name
	if err := unix.Mount(src, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	tp.mounts = append(tp.mounts, dir)
	return nil
}

func (tp *topo) teardown(t *testing.T) {
	for _, l := range tp.loops {
		if l.dir != "" {
			if err := unix.Unmount(l.dir, unix.MNT_DETACH); err != nil {
				t.Logf("unmount %s: %v", l.dir, err)
			}
		}
		if err := run("losetup", "-d", l.dev); err != nil {
			t.Logf("%v", err)
		}
	}
	tp.loops = nil
	for _, cg := range tp.cgroups {
		leaveCgroup(cg, filepath.Dir(cg))
	}
	for _, m := range tp.mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Logf("unmount %s: %v", m, err)
		}
	}
	tp.mounts = nil
	sweepPrefix(tp.prefix)
	if tp.imgDir != "" {
		_ = os.Remove(tp.imgDir)
	}
}

// sweep removes what earlier runs left behind: names with the prefix of a
// process that no longer exists (all of them when all is set).
func sweep(all bool) {
	for _, p := range leftovers() {
		m := staleName.FindStringSubmatch(p)
		pid, _ := strconv.Atoi(m[1])
		if all || (pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH) {
			for _, dir := range loopMounts(m[0]) {
				// the crashed run's temporary directory: .../TestNemesisN/001/nX
				if top := filepath.Dir(filepath.Dir(dir)); strings.HasPrefix(filepath.Base(top), "TestNemesis") {
					defer os.RemoveAll(top) // once unmounted
				}
			}
			sweepPrefix(m[0])
			_ = os.Remove(filepath.Join(os.TempDir(), m[0]+"img"))
		}
	}
}

// leftovers lists every name prefix found among namespaces, links and
// tmpfs mounts.
func leftovers() []string {
	seen := map[string]bool{}
	add := func(name string) {
		if m := staleName.FindStringSubmatch(name); m != nil {
			seen[m[0]] = true
		}
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			add(strings.Fields(l + " x")[0])
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			add(i.Name)
		}
	}
	for _, m := range prefixMounts("") {
		add(m[0])
	}
	diskLeftovers(add)
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	return out
}

// prefixMounts returns {source, mountpoint} of mounts whose source has
// the given prefix (any run's when prefix is "").
func prefixMounts(prefix string) [][2]string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][2]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 2 && fs[2] == "tmpfs" && staleName.MatchString(fs[0]) && strings.HasPrefix(fs[0], prefix) {
			out = append(out, [2]string{fs[0], fs[1]})
		}
	}
	return out
}

// sweepPrefix deletes every namespace, link, loop device, cgroup and
// tmpfs mount named with prefix. Deleting a namespace kills nothing: its processes are the
// caller's to stop first.
func sweepPrefix(prefix string) {
	sweepDisks(prefix)
	for _, m := range prefixMounts(prefix) {
		_ = unix.Unmount(m[1], unix.MNT_DETACH)
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
				killIn(f[0])
				_ = run("ip", "netns", "del", f[0])
			}
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			if strings.HasPrefix(i.Name, prefix) {
				_ = run("ip", "link", "del", i.Name)
			}
		}
	}
}

// killIn kill -9s what still runs in namespace ns: latchd nodes a run
// that crashed left behind.
func killIn(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// nsDialer dials from inside a namespace: one goroutine, locked to an OS
// thread that joined the namespace, makes every socket, and a socket stays
// in the namespace it was made in. The thread is never unlocked, so the
// runtime discards it when the goroutine ends.
type nsDialer struct {
	req  chan dialReq
	stop chan struct{} // closed at the end of the test: no more dials
}

type dialReq struct {
	addr string
	out  chan dialRes
}

type dialRes struct {
	c   net.Conn
	err error
}

func newNSDialer(t *testing.T, ns string, threads int) (*nsDialer, error) {
	stop := make(chan struct{})
	d := &nsDialer{req: make(chan dialReq), stop: stop}
	t.Cleanup(func() { close(stop) })
	for range threads {
		ready := make(chan error, 1)
		go d.serve(ns, ready, stop)
		if err := <-ready; err != nil {
			return nil, fmt.Errorf("join namespace %s: %w", ns, err)
		}
	}
	return d, nil
}

func (d *nsDialer) serve(ns string, ready chan<- error, stop <-chan struct{}) {
	runtime.LockOSThread()
	f, err := os.Open("/run/netns/" + ns)
	if err == nil {
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		_ = f.Close()
	}
	ready <- err
	if err != nil {
		return
	}
	for {
		select {
		case r := <-d.req:
			d := net.Dialer{Timeout: 300 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientIP)}}
			c, err := d.Dial("tcp", r.addr)
			r.out <- dialRes{c, err}
		case <-stop:
			return
		}
	}
}

// Dial connects to addr from the namespace.
func (d *nsDialer) Dial(addr string) (net.Conn, error) {
	out := make(chan dialRes, 1)
	select {
	case d.req <- dialReq{addr, out}:
	case <-d.stop:
		return nil, net.ErrClosed
	}
	r := <-out
	return r.c, r.err
}
