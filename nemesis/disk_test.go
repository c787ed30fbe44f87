//go:build nemesis

package nemesis

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Each node keeps its data on an ext4 filesystem of its own, on a loop
// device whose image is a file on a tmpfs: at memory speed until the
// nemesis throttles the device for that node's process (a blkio cgroup),
// and small enough to fill.

// loopDev is one node's filesystem: the device and where it is mounted.
type loopDev struct {
	dev, dir string
}

// imgSize is each node's filesystem: room for two 64 MiB log segments and
// the snapshots.
const imgSize = 256 << 20

// mountLoop makes an ext4 filesystem of size bytes on a new loop device
// and mounts it on dir. The image lives in the run's image tmpfs, named
// with the run's prefix so a later run can find it if this one crashes.
func (tp *topo) mountLoop(dir, name string, size int64) error {
	if tp.imgDir == "" {
		d := filepath.Join(os.TempDir(), tp.prefix+"img")
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := tp.mountTmpfs(d, "img", 5*size); err != nil {
			return err
		}
		tp.imgDir = d
	}
	img := filepath.Join(tp.imgDir, tp.prefix+name+".img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(img, size); err != nil {
		return err
	}
	out, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		return fmt.Errorf("losetup %s: %w", img, err)
	}
	dev := strings.TrimSpace(string(out))
	tp.loops = append(tp.loops, loopDev{dev: dev})
	if err := run("mkfs.ext4", "-q", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev); err != nil {
		return err
	}
	if err := unix.Mount(dev, dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mount %s on %s: %w", dev, dir, err)
	}
	tp.loops[len(tp.loops)-1].dir = dir
	return nil
}

// devNum returns "major:minor" of block device dev.
func devNum(dev string) (string, error) {
	b, err := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/dev")
	return strings.TrimSpace(string(b)), err
}

// throttle limits the writes pid makes to dev to iops a second and bps
// bytes a second, through a blkio cgroup (v1) or io.max (v2) named with
// the run's prefix, and returns the cgroup and what lifts the limit.
func (tp *topo) throttle(name, dev string, pid, iops, bps int) (string, func() error, error) {
	num, err := devNum(dev)
	if err != nil {
		return "", nil, err
	}
	root, files := "/sys/fs/cgroup/blkio", map[string]string{
		"blkio.throttle.write_iops_device": fmt.Sprintf("%s %d", num, iops),
		"blkio.throttle.write_bps_device":  fmt.Sprintf("%s %d", num, bps),
	}
	if _, err := os.Stat(root); err != nil {
		root = "/sys/fs/cgroup" // v2: the io controller must be on for the root's children
		_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+io"), 0)
		files = map[string]string{"io.max": fmt.Sprintf("%s wiops=%d wbps=%d", num, iops, bps)}
	}
	cg := filepath.Join(root, tp.prefix+name)
	if err := os.Mkdir(cg, 0o755); err != nil && !os.IsExist(err) {
		return "", nil, err
	}
	tp.cgroups = append(tp.cgroups, cg)
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(cg, f), []byte(v), 0); err != nil {
			return "", nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return "", nil, fmt.Errorf("move %d into %s: %w", pid, cg, err)
	}
	return cg, func() error {
		leaveCgroup(cg, root)
		return nil
	}, nil
}

// leaveCgroup moves every process of cgroup cg back to root and removes
// cg.
// canThrottle reports whether writes to dev can be throttled here, by
// throttling a short-lived child for a moment: the slow-disk faults need it.
func (tp *topo) canThrottle(dev string) error {
	p := exec.Command("sleep", "30")
	if err := p.Start(); err != nil {
		return err
	}
	defer func() { _ = p.Process.Kill(); _ = p.Wait() }()
	_, heal, err := tp.throttle("probe", dev, p.Process.Pid, 1000, 1<<20)
	if err != nil {
		return err
	}
	return heal()
}

func leaveCgroup(cg, root string) {
	b, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
	for _, p := range strings.Fields(string(b)) {
		_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(p), 0)
	}
	for range 50 { // rmdir fails while a process that just exited is still counted
		if err := syscall.Rmdir(cg); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncProbe times n synced 4 KiB writes to dir made from inside cgroup
// cg (or outside any, when cg is ""), to show what a node's fdatasync
// costs there.
func syncProbe(cg, dir string, n int) (time.Duration, error) {
	script := fmt.Sprintf("dd if=/dev/zero of=%s bs=4k count=%d oflag=dsync 2>/dev/null; rm -f %[1]s",
		filepath.Join(dir, "nemesis-probe"), n)
	if cg != "" {
		script = "echo $$ > " + filepath.Join(cg, "cgroup.procs") + " && " + script
	}
	t0 := time.Now()
	err := exec.Command("sh", "-c", script).Run()
	return time.Since(t0), err
}

// sweepDisks removes the loop devices (after unmounting them) and the
// cgroups named with prefix.
func sweepDisks(prefix string) {
	out, _ := exec.Command("losetup", "-a").Output()
	for _, l := range strings.Split(string(out), "\n") {
		dev, rest, ok := strings.Cut(l, ":")
		if !ok || !strings.Contains(rest, "/"+prefix) {
			continue
		}
		for _, m := range mountsOf(dev) {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		_ = run("losetup", "-d", dev)
	}
	for _, root := range []string{"/sys/fs/cgroup/blkio", "/sys/fs/cgroup"} {
		cgs, _ := filepath.Glob(filepath.Join(root, prefix+"*"))
		for _, cg := range cgs {
			leaveCgroup(cg, root)
		}
	}
}

// mountsOf lists the mount points of device dev.
func mountsOf(dev string) []string {
	b, _ := os.ReadFile("/proc/self/mounts")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == dev {
			out = append(out, f[1])
		}
	}
	return out
}

// diskLeftovers lists the prefixes of loop images and cgroups that runs
// left behind.
func diskLeftovers(add func(string)) {
	out, _ := exec.Command("losetup", "-a").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if i := strings.LastIndex(l, "/"); i >= 0 {
			add(strings.TrimSuffix(l[i+1:], ")"))
		}
	}
	for _, root := range []string{"/sys/fs/cgroup/blkio", "/sys/fs/cgroup"} {
		cgs, _ := filepath.Glob(filepath.Join(root, namePrefix+"*"))
		for _, cg := range cgs {
			add(filepath.Base(cg))
		}
	}
}

// loopMounts lists where the loop devices whose images are named with
// prefix are mounted.
func loopMounts(prefix string) []string {
	out, _ := exec.Command("losetup", "-a").Output()
	var dirs []string
	for _, l := range strings.Split(string(out), "\n") {
		if dev, rest, ok := strings.Cut(l, ":"); ok && strings.Contains(rest, "/"+prefix) {
			dirs = append(dirs, mountsOf(dev)...)
		}
	}
	return dirs
}
