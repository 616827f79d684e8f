package embeddedtest

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/embedded"
)

// Cluster is three embedded NATS servers routed into one JetStream cluster. Servers[i] is nil
// while node i is stopped; Opts[i] starts it again.
type Cluster struct {
	Opts    []embedded.NATSOptions
	Servers []*embedded.NATS
}

// StartCluster starts a cluster named name, on files of the test, and returns once it takes a
// stream of three replicas; the nodes still running stop when the test ends.
func StartCluster(t testing.TB, name string) *Cluster {
	t.Helper()
	c := &Cluster{}
	var routes []string
	ports := make([]int, 3)
	for i := range 3 {
		ports[i] = FreePort(t)
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(FreePort(t)))
	}
	dir := t.TempDir()
	for i := range 3 {
		_, route, _ := strings.Cut(strings.TrimPrefix(routes[i], "nats-route://"), ":")
		rp, _ := strconv.Atoi(route)
		c.Opts = append(c.Opts, embedded.NATSOptions{Dir: filepath.Join(dir, strconv.Itoa(i)), Port: ports[i], Name: name + "-" + strconv.Itoa(i),
			Cluster: &embedded.ClusterOptions{Name: name, Port: rp, Routes: routes}})
	}
	c.Servers = make([]*embedded.NATS, 3)
	// The nodes wait for each other to elect a JetStream leader: start them together.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { c.Servers[i], errs[i] = embedded.StartNATS(c.Opts[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if c.Servers[i] != nil {
				c.Servers[i].Shutdown()
			}
		})
	}
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	Eventually(t, time.Minute, "the cluster takes a stream of 3 replicas", func() bool {
		_, err := js.AddStream(&nats.StreamConfig{Name: "READY", Subjects: []string{"ready"}, Replicas: 3})
		return err == nil
	})
	_ = js.DeleteStream("READY")
	return c
}

// URL is the client address of every node, comma-separated.
func (c *Cluster) URL() string {
	var urls []string
	for _, o := range c.Opts {
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(o.Port))
	}
	return strings.Join(urls, ",")
}

// FreePort is a loopback port nobody listens on, for a server that must come back on the same
// address.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
