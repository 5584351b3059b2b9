package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/seqflow/seqflow/client"
	"github.com/seqflow/seqflow/internal/auth"
)

// connFlags holds the flags every SDK command shares: where the gateway is and
// who the user is (a token, or a user and device to mint one for).
type connFlags struct {
	gateway, token, user, device, secret *string
	verbose                              *bool
}

func addConnFlags(fs *flag.FlagSet, device string) connFlags {
	return connFlags{
		gateway: fs.String("gateway", envDefault("SEQFLOW_GATEWAY_URL", "ws://127.0.0.1:8080"), "gateway URL, comma-separated for several (default SEQFLOW_GATEWAY_URL or ws://127.0.0.1:8080)"),
		token:   secretFlag(fs, "token", "SEQFLOW_TOKEN", "bearer token (default SEQFLOW_TOKEN); without it one is minted for -user/-device"),
		user:    fs.String("user", "", "user ID to mint a development token for"),
		device:  fs.String("device", device, "device ID of the minted token"),
		secret:  secretFlag(fs, "secret", "GATEWAY_JWT_HS256_SECRET", "HS256 secret to mint with (default GATEWAY_JWT_HS256_SECRET)"),
		verbose: fs.Bool("v", false, "log connection events to stderr"),
	}
}

func envDefault(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// options turns the flags into client options.
func (f connFlags) options() (client.Options, error) {
	tok := *f.token
	if tok == "" {
		if *f.user == "" {
			return client.Options{}, errors.New("give -token (or SEQFLOW_TOKEN), or -user with GATEWAY_JWT_HS256_SECRET to mint one")
		}
		if *f.secret == "" {
			return client.Options{}, errors.New("-user needs a signing secret: set GATEWAY_JWT_HS256_SECRET or -secret")
		}
		s, err := auth.NewHS256Signer([]byte(*f.secret))
		if err != nil {
			return client.Options{}, err
		}
		if tok, err = s.Mint(*f.user, *f.device, 24*time.Hour); err != nil {
			return client.Options{}, err
		}
	}
	o := client.Options{URLs: strings.Split(*f.gateway, ","), Token: tok}
	if *f.verbose {
		o.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	return o, nil
}

// started runs c until the returned stop is called; Run's early error
// (a refused token) comes back from wait.
type started struct {
	c      *client.Client
	cancel context.CancelFunc
	errc   chan error
}

func start(ctx context.Context, c *client.Client) *started {
	ctx, cancel := context.WithCancel(ctx)
	s := &started{c: c, cancel: cancel, errc: make(chan error, 1)}
	go func() { s.errc <- c.Run(ctx) }()
	return s
}

func (s *started) stop() error {
	s.cancel()
	err := <-s.errc
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// session resolves -session, -to (a direct session) or -group (a new
// group) to a session ID.
func resolveSession(ctx context.Context, c *client.Client, session, to, group, title string) (string, error) {
	switch {
	case session != "":
		return session, nil
	case to != "":
		return c.OpenDirect(ctx, to)
	case group != "":
		a, err := c.CreateGroup(ctx, title, splitList(group)...)
		return a.SessionID, err
	}
	return "", errors.New("name a session: -session ID, -to USER (direct) or -group U1,U2 (new group)")
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ackLine is one JSON line of `seqflow send`.
type ackLine struct {
	ClientMsgID string `json:"client_msg_id"`
	SessionID   string `json:"session_id"`
	Seq         int64  `json:"seq"`
	MsgID       string `json:"msg_id"`
	ServerTs    int64  `json:"server_ts"`
	Duplicate   bool   `json:"duplicate,omitempty"`
}

// runSend sends messages through the SDK and prints one ACK per message:
//
//	seqflow send -user alice -to bob hello there
//	seqflow send -user alice -session g-... -            (one message per stdin line)
func runSend(ctx context.Context, args []string) error { return send(ctx, os.Stdin, os.Stdout, args) }

func send(ctx context.Context, in io.Reader, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	cf := addConnFlags(fs, "cli")
	session := fs.String("session", "", "session ID")
	to := fs.String("to", "", "peer user: send in the direct session with them (created if needed)")
	group := fs.String("group", "", "comma-separated users: create a group with them and send there")
	title := fs.String("title", "", "title of a group made by -group")
	typ := fs.String("type", "text", "content type: text, or image/file/custom with a JSON object body")
	outbox := fs.String("outbox", "", "outbox file: unacknowledged messages are kept there and resent by the next run")
	timeout := fs.Duration("timeout", 30*time.Second, "give up waiting for the ACKs after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o, err := cf.options()
	if err != nil {
		return err
	}
	o.OutboxPath, o.SkipHistory = *outbox, true
	var bodies []string
	if fs.NArg() == 1 && fs.Arg(0) == "-" {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); line != "" {
				bodies = append(bodies, line)
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
	} else if fs.NArg() > 0 {
		bodies = []string{strings.Join(fs.Args(), " ")}
	}
	c, err := client.New(o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	run := start(ctx, c)
	err = sendAll(ctx, c, out, bodies, *typ, func() (string, error) { return resolveSession(ctx, c, *session, *to, *group, *title) })
	if serr := run.stop(); err == nil {
		err = serr
	}
	return err
}

func sendAll(ctx context.Context, c *client.Client, out io.Writer, bodies []string, typ string, session func() (string, error)) error {
	enc := json.NewEncoder(out)
	var pending []*client.Pending
	pending = append(pending, c.Recovered()...)
	if len(bodies) > 0 {
		sid, err := session()
		if err != nil {
			return err
		}
		for _, b := range bodies {
			m := client.Text(b)
			if typ != "text" {
				if !json.Valid([]byte(b)) {
					return fmt.Errorf("type %s needs a JSON object body, got %q", typ, b)
				}
				m = client.Content{Type: typ, Body: json.RawMessage(b)}
			}
			p, err := c.Post(ctx, sid, m)
			if err != nil {
				return err
			}
			pending = append(pending, p)
		}
	} else if len(pending) == 0 {
		return errors.New("nothing to send: give the text as arguments, or - to read lines from stdin")
	}
	for _, p := range pending {
		a, err := p.Wait(ctx)
		if err != nil {
			return fmt.Errorf("message %s: %w", p.ClientMsgID, err)
		}
		if err := enc.Encode(ackLine{a.ClientMsgID, a.SessionID, a.Seq, a.MsgID, a.ServerTs, a.Duplicate}); err != nil {
			return err
		}
	}
	return nil
}
