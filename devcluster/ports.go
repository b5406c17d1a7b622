package devcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowestPort is the bottom of the range free ports are chosen from.
const lowestPort = 10000

// FreePort returns a loopback port that is free now. It is chosen below the
// kernel's ephemeral range: a port from ":0" is an ephemeral one, and the
// kernel hands those to outgoing connections too, so on a busy machine
// another process's connection can take it between the choice and the
// listen. Outside that range only another listener can.
func FreePort() (int, error) {
	l, err := listenFree()
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// listenFree listens on a free loopback port below the ephemeral range (or,
// if none is found, on any free port).
func listenFree() (net.Listener, error) {
	high := ephemeralLow()
	for range 200 {
		p := lowestPort + rand.IntN(high-lowestPort)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			return l, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("finding a free port: %w", err)
	}
	return l, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	low := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > lowestPort+1000 {
				low = n
			}
		}
	}
	return low
}
