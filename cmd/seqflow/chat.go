package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/seqflow/seqflow/client"
)

// runChat is an interactive terminal chat in one session:
//
//	seqflow chat -user alice -to bob          (direct session, created if needed)
//	seqflow chat -user alice -group bob,carol (new group)
//	seqflow chat -user bob -session g-...
//
// Each stdin line is sent; events of the session are printed as they come,
// once each and in seq order. /read marks everything shown as read, /quit
// (or end of input) leaves after the last ACK.
func runChat(ctx context.Context, args []string) error { return chat(ctx, os.Stdin, os.Stdout, args) }

func chat(ctx context.Context, in io.Reader, out io.Writer, args []string) error {
	// Events, disconnects and the loop's own lines are written from
	// different goroutines.
	out = &lockedWriter{w: out}
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	cf := addConnFlags(fs, "chat")
	session := fs.String("session", "", "session ID")
	to := fs.String("to", "", "peer user: chat in the direct session with them")
	group := fs.String("group", "", "comma-separated users: create a group with them")
	title := fs.String("title", "", "title of a group made by -group")
	history := fs.Int("history", 20, "events of history to show first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o, err := cf.options()
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var sid string
	var shown int64 // highest seq printed
	me := cf.user   // replaced by the gateway's view once connected
	print := func(e client.Event) {
		if e.Seq <= shown {
			return
		}
		shown = e.Seq
		fmt.Fprintln(out, renderEvent(e, *me))
	}
	o.SkipHistory = true
	o.OnEvent = func(e client.Event) {
		mu.Lock()
		defer mu.Unlock()
		if sid != "" && e.SessionID == sid {
			print(e)
		}
	}
	o.OnDisconnect = func(err error) { fmt.Fprintf(out, "-- disconnected (%v); reconnecting\n", err) }
	c, err := client.New(o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := start(ctx, c)
	err = chatLoop(ctx, c, in, out, &mu, &sid, &shown, me, print, *history,
		func() (string, error) { return resolveSession(ctx, c, *session, *to, *group, *title) })
	if serr := run.stop(); err == nil {
		err = serr
	}
	return err
}

func chatLoop(ctx context.Context, c *client.Client, in io.Reader, out io.Writer, mu *sync.Mutex, sid *string, shown *int64,
	me *string, print func(client.Event), history int, resolve func() (string, error)) error {
	id, err := resolve()
	if err != nil {
		return err
	}
	if u, err := c.UserID(ctx); err == nil {
		mu.Lock()
		*me = u
		mu.Unlock()
		fmt.Fprintf(out, "-- %s in %s; type a message, /read, /quit\n", u, id)
	}
	ch, err := c.Changes(ctx)
	if err != nil {
		return err
	}
	var maxSeq int64
	for _, s := range ch {
		if s.SessionID == id {
			maxSeq = s.MaxSeq
		}
	}
	evs, _, err := c.Sync(ctx, id, max(0, maxSeq-int64(history)), min(max(history, 1), 200))
	if err != nil {
		return err
	}
	mu.Lock()
	*sid = id
	for _, e := range evs {
		print(e)
	}
	mu.Unlock()

	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() { // ends at EOF; stdin cannot be interrupted portably
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
		close(lines)
	}()
	var pending []*client.Pending
	var waits sync.WaitGroup
	wctx, wcancel := context.WithCancel(ctx)
	defer func() { wcancel(); waits.Wait() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case line, ok := <-lines:
			if !ok || strings.TrimSpace(line) == "/quit" {
				for _, p := range pending {
					if _, err := p.Wait(ctx); err != nil {
						fmt.Fprintf(out, "-- not sent (%s): %v\n", p.ClientMsgID, err)
					}
				}
				if !ok {
					return <-readErr
				}
				return nil
			}
			switch line = strings.TrimSpace(line); {
			case line == "":
			case line == "/read":
				mu.Lock()
				seq := *shown
				mu.Unlock()
				if err := c.MarkRead(ctx, id, seq); err != nil {
					fmt.Fprintf(out, "-- read receipt: %v\n", err)
				} else {
					fmt.Fprintf(out, "-- read up to seq %d\n", seq)
				}
			default:
				p, err := c.Post(ctx, id, client.Text(line))
				if err != nil {
					return err
				}
				pending = append(pending, p)
				waits.Go(func() { // reports a failure; the SDK resends until answered
					if _, err := p.Wait(wctx); err != nil && wctx.Err() == nil {
						fmt.Fprintf(out, "-- not sent: %v\n", err)
					}
				})
			}
		}
	}
}

// renderEvent is one line of the chat transcript.
func renderEvent(e client.Event, me string) string {
	ts := time.UnixMilli(e.ServerTs).Format("15:04:05")
	who := e.SenderUserID
	if who == me {
		who = "you"
	}
	switch e.Kind {
	case "message":
		body := string(e.Body)
		var s string
		if json.Unmarshal(e.Body, &s) == nil {
			body = s
		}
		if e.Recalled {
			body = "(recalled)"
		}
		return fmt.Sprintf("[%s #%d] %s: %s", ts, e.Seq, who, body)
	case "session_create":
		return fmt.Sprintf("[%s #%d] %s created the %s session with %s", ts, e.Seq, who, e.SessionKind, strings.Join(e.UserIDs, ", "))
	case "membership":
		return fmt.Sprintf("[%s #%d] %s: %s %s", ts, e.Seq, who, e.Action, strings.Join(e.UserIDs, ", "))
	case "edit":
		return fmt.Sprintf("[%s #%d] %s edited #%d: %s", ts, e.Seq, who, e.TargetSeq, e.Body)
	case "recall":
		return fmt.Sprintf("[%s #%d] %s recalled #%d", ts, e.Seq, who, e.TargetSeq)
	}
	return fmt.Sprintf("[%s #%d] %s: %s", ts, e.Seq, who, e.Kind)
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
