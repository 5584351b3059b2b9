package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/testkit/proc"
)

// The suite runs its own Redis and PostgreSQL: restarting them is a fault
// it injects, and the local stack's instances are shared by every other
// test running on the machine, which such a restart would break. Kafka is
// the local stack's three-broker cluster (infra/local/stack.sh up-kafka3),
// whose nodes the suite kills and restarts through stack.sh.

// freePort returns a 127.0.0.1 port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// redisServer is a private redis-server without persistence, so a restart
// comes back empty.
type redisServer struct {
	Addr string
	p    *proc.Proc
}

func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (install redis-server): %w", err)
	}
	r := &redisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	r.p = &proc.Proc{Name: "redis", Bin: bin, Log: filepath.Join(dir, "redis.log"),
		Args: []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--protected-mode", "yes",
			"--save", "", "--appendonly", "no", "--dir", dir}}
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *redisServer) start(ctx context.Context) error {
	if err := r.p.Start(); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	return waitFor(ctx, 30*time.Second, "redis "+r.Addr, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
}

// restart kills redis -9 and starts it again, empty, after hold.
func (r *redisServer) restart(ctx context.Context, hold time.Duration) error {
	r.p.Kill()
	if err := sleep(ctx, hold); err != nil {
		return err
	}
	return r.start(ctx)
}

func (r *redisServer) close() { r.p.Kill() }

// postgres is a private PostgreSQL cluster in a temporary directory,
// trust auth on 127.0.0.1 only. Run as root, it runs as the OS user
// "postgres" (PostgreSQL refuses root).
type postgres struct {
	URL  string
	bin  string
	dir  string // data directory
	log  string
	user string // OS user to run as, empty for the current one
}

func pgBinDir() (string, error) {
	if d := os.Getenv("SEQFLOW_PG_BIN"); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(ms) == 0 {
		return "", errors.New("pg_ctl not found (install postgresql, or set SEQFLOW_PG_BIN)")
	}
	return filepath.Dir(ms[len(ms)-1]), nil
}

func startPostgres(ctx context.Context, dir string) (*postgres, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	pg := &postgres{bin: bin, dir: filepath.Join(dir, "pgdata"), log: filepath.Join(dir, "postgres.log"),
		URL: fmt.Sprintf("postgres://seqflow@127.0.0.1:%d/seqflow?sslmode=disable", port)}
	sock := filepath.Join(dir, "pgsock")
	if err := os.MkdirAll(sock, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs an OS user postgres to run PostgreSQL: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, sock} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, err
			}
		}
		pg.user = "postgres"
	}
	if out, err := pg.run(ctx, "initdb", "-D", pg.dir, "-U", "seqflow", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-instructions"); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nmax_connections = 200\n"+
		"shared_buffers = 64MB\nfsync = on\nsynchronous_commit = on\nlogging_collector = off\n", port, sock)
	if out, err := pg.run(ctx, "sh", "-c", "cat >> "+filepath.Join(pg.dir, "postgresql.conf")+" <<'EOF'\n"+conf+"EOF\n"); err != nil {
		return nil, fmt.Errorf("write postgresql.conf: %w\n%s", err, out)
	}
	if err := pg.start(ctx); err != nil {
		return nil, err
	}
	admin := strings.Replace(pg.URL, "/seqflow?", "/postgres?", 1)
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("connect postgres: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "CREATE DATABASE seqflow"); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	return pg, nil
}

// run runs a PostgreSQL tool (or sh) as the cluster's OS user.
func (pg *postgres) run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	path := tool
	if tool != "sh" {
		path = filepath.Join(pg.bin, tool)
	}
	var cmd *exec.Cmd
	if pg.user != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", pg.user, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = os.TempDir()
	return cmd.CombinedOutput()
}

func (pg *postgres) start(ctx context.Context) error {
	// pg_ctl must not hold our stdout open: it daemonizes the postmaster.
	if out, err := pg.run(ctx, "pg_ctl", "-D", pg.dir, "-l", pg.log, "-w", "-t", "120", "-s", "start"); err != nil {
		b, _ := os.ReadFile(pg.log)
		return fmt.Errorf("start postgres: %w\n%s\n%s", err, out, tail(b, 2000))
	}
	return waitFor(ctx, 60*time.Second, "postgres", func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, strings.Replace(pg.URL, "/seqflow?", "/postgres?", 1))
		if err != nil {
			return err
		}
		return c.Close(ctx)
	})
}

// restart stops PostgreSQL in immediate mode (no shutdown checkpoint, as a
// crash would: the next start runs crash recovery) and starts it again
// after hold.
func (pg *postgres) restart(ctx context.Context, hold time.Duration) error {
	if out, err := pg.run(ctx, "pg_ctl", "-D", pg.dir, "-m", "immediate", "-w", "-t", "60", "-s", "stop"); err != nil {
		return fmt.Errorf("stop postgres: %w\n%s", err, out)
	}
	if err := sleep(ctx, hold); err != nil {
		return err
	}
	return pg.start(ctx)
}

func (pg *postgres) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, _ = pg.run(ctx, "pg_ctl", "-D", pg.dir, "-m", "fast", "-w", "-t", "30", "-s", "stop")
}

// kafka3 is the local stack's three-broker cluster; stack.sh kills and
// restarts its nodes. Node n (1..3) listens on Brokers[n-1].
type kafka3 struct {
	Brokers []string
	script  string

	mu      sync.Mutex
	pending chan error // a start still running in the background
}

func (k *kafka3) stack(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "bash", append([]string{k.script}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("stack.sh %s: %w\n%s", strings.Join(args, " "), err, tail(out, 2000))
	}
	return nil
}

func (k *kafka3) kill(ctx context.Context, node int) error {
	k.wait()
	return k.stack(ctx, "kill-kafka3-node", strconv.Itoa(node))
}

// start restarts node through stack.sh, which returns once every
// partition of the cluster is in sync again: with other tests' topics on
// the shared cluster that can take minutes. So start returns as soon as
// inSync (this run's topics fully replicated) holds, and stack.sh
// finishes in the background; the next start or kill waits for it.
func (k *kafka3) start(ctx context.Context, node int, inSync func(context.Context) error) error {
	k.wait()
	done := make(chan error, 1)
	k.mu.Lock()
	k.pending = done
	k.mu.Unlock()
	go func() { done <- k.stack(context.WithoutCancel(ctx), "start-kafka3-node", strconv.Itoa(node)) }()
	// A node killed for less than the broker session timeout is still in
	// every ISR it was in, so inSync alone can hold before the node is up:
	// it must also accept connections again.
	addr := k.Brokers[node-1]
	err := waitFor(ctx, 3*time.Minute, fmt.Sprintf("kafka node %d in sync", node), func(ctx context.Context) error {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		_ = c.Close()
		return inSync(ctx)
	})
	select {
	case serr := <-done: // finished already: its verdict counts
		done <- serr
		if serr != nil {
			return serr
		}
	default:
	}
	return err
}

// wait waits for a background stack.sh start, if any.
func (k *kafka3) wait() {
	k.mu.Lock()
	p := k.pending
	k.pending = nil
	k.mu.Unlock()
	if p != nil {
		<-p
	}
}

// node returns the stack node number of a broker address, 0 if unknown.
func (k *kafka3) node(host string, port int32) int {
	for i, b := range k.Brokers {
		if b == net.JoinHostPort(host, strconv.Itoa(int(port))) || strings.HasSuffix(b, ":"+strconv.Itoa(int(port))) {
			return i + 1
		}
	}
	return 0
}

// waitFor polls fn until it succeeds, ctx ends or within passes.
func waitFor(ctx context.Context, within time.Duration, what string, fn func(context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s: %w", what, within, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
