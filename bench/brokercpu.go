package main

// The broker's CPU time, for the figures whose limit is the broker on the
// same machine: read from /proc for the process at the other end of the raw
// twins' connection, on Linux.

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// brokerPID is the broker's process id, 0 when it could not be found (not
// Linux, or a broker on another machine): the figures then leave the
// broker's CPU out.
var brokerPID int

// findBroker finds the process that owns the broker's end of conn: the TCP
// socket whose local port is conn's remote port and whose remote port is
// conn's local one.
func findBroker(conn *amqp.Connection) (int, error) {
	local, ok1 := conn.LocalAddr().(*net.TCPAddr)
	remote, ok2 := conn.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("not a TCP connection")
	}
	inode := ""
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if inode = socketInode(table, remote.Port, local.Port); inode != "" {
			break
		}
	}
	if inode == "" {
		return 0, fmt.Errorf("no local socket serves port %d to port %d: the broker is not on this machine", remote.Port, local.Port)
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && l == "socket:["+inode+"]" {
			return strconv.Atoi(strings.Split(fd, "/")[2])
		}
	}
	return 0, fmt.Errorf("no process holds socket %s", inode)
}

// socketInode is the inode of the socket of table (/proc/net/tcp's format)
// from local port lport to remote port rport, or "".
func socketInode(table string, lport, rport int) string {
	f, err := os.Open(table)
	if err != nil {
		return ""
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", lport)
	peer := fmt.Sprintf(":%04X", rport)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fs := strings.Fields(sc.Text())
		if len(fs) > 9 && strings.HasSuffix(fs[1], want) && strings.HasSuffix(fs[2], peer) {
			return fs[9]
		}
	}
	return ""
}

// brokerCPU is the CPU time the broker has used so far (user and system,
// from /proc/PID/stat in clock ticks of 10 ms), 0 when brokerPID is.
func brokerCPU() time.Duration {
	if brokerPID == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(brokerPID) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command, which is in parentheses: utime and
	// stime are the 12th and 13th of them.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}
