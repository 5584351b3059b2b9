package delivery

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/schemas/imv1"
)

func msgItem(seq int64, body string) *imv1.PushItem {
	return &imv1.PushItem{
		Recipients: []*imv1.Recipient{{UserId: "u", DeviceId: "d", ConnId: "c"}},
		Item: &imv1.PushItem_Event{Event: &imv1.SequencedEvent{SessionId: "s", Seq: seq,
			Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(body)}}}},
	}
}

func TestEncodeBatch(t *testing.T) {
	body := strings.Repeat("b", 100)
	many := make([]*imv1.PushItem, 50)
	for i := range many {
		many[i] = msgItem(int64(i+1), body)
	}
	cases := []struct {
		name       string
		items      []*imv1.PushItem
		max        int
		wantFrames int // 0: any number above one
		wantErr    error
	}{
		{"fits in one frame", many[:3], 1 << 20, 1, nil},
		{"empty batch", nil, 1 << 20, 1, nil},
		{"split by items", many, 1000, 0, nil},
		{"single item too large", many[:1], 50, 0, ErrTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			frames, err := encodeBatch(&imv1.PushBatch{GatewayId: "gw", Sender: "sequencer", SentTsMs: 9, Items: c.items}, c.max)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.wantFrames > 0 && len(frames) != c.wantFrames || c.wantFrames == 0 && len(frames) < 2 {
				t.Fatalf("%d frames, want %d (0 = several)", len(frames), c.wantFrames)
			}
			var got []*imv1.PushItem
			for _, f := range frames {
				if len(f) > c.max {
					t.Fatalf("frame of %d bytes over the limit %d", len(f), c.max)
				}
				b, err := decodeBatch(f, "gw")
				if err != nil {
					t.Fatal(err)
				}
				if b.SentTsMs != 9 || b.Sender != "sequencer" {
					t.Fatalf("part lost sent_ts_ms or sender: %v %q", b.SentTsMs, b.Sender)
				}
				got = append(got, b.Items...)
			}
			if len(got) != len(c.items) {
				t.Fatalf("%d items after split, want %d", len(got), len(c.items))
			}
			for i := range got {
				if !proto.Equal(got[i], c.items[i]) {
					t.Fatalf("item %d changed or moved", i)
				}
			}
		})
	}
}

func TestDecodeBatchRejects(t *testing.T) {
	good, _ := proto.Marshal(&imv1.PushBatch{GatewayId: "gw", Items: []*imv1.PushItem{msgItem(1, "x")}})
	other, _ := proto.Marshal(&imv1.PushBatch{GatewayId: "gw-2"})
	empty, _ := proto.Marshal(&imv1.PushBatch{GatewayId: "gw", Items: []*imv1.PushItem{{}}})
	cases := []struct {
		name string
		data []byte
		ok   bool
	}{
		{"good", good, true},
		{"another gateway's batch", other, false},
		{"item without payload", empty, false},
		{"garbage", []byte{0xff, 0xff, 0xff}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeBatch(c.data, "gw")
			if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrBadBatch) {
				t.Fatalf("decodeBatch = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

// FuzzDecodeBatch: frames come from the network; decoding must never panic
// and whatever it accepts must re-encode to a batch for the same gateway.
func FuzzDecodeBatch(f *testing.F) {
	good, _ := proto.Marshal(&imv1.PushBatch{GatewayId: "gw", Items: []*imv1.PushItem{msgItem(1, "x")}})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 'g', 'w', 0x12, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := decodeBatch(data, "gw")
		if err != nil {
			return
		}
		if b.GatewayId != "gw" {
			t.Fatalf("accepted a batch for %q", b.GatewayId)
		}
		if _, err := encodeBatch(b, 1<<30); err != nil {
			t.Fatalf("accepted batch does not re-encode: %v", err)
		}
	})
}

// FuzzReadFrames: the TCP receiver reads frames off the network; the
// reader must never panic, never hand out a frame over the limit or one
// whose MAC does not verify, and hand out exactly the frames a well-formed
// stream holds.
func FuzzReadFrames(f *testing.F) {
	key := make([]byte, 32)
	newMAC := func() *frameMAC { return newFrameMAC(key, "gw", "k", make([]byte, nonceSize), make([]byte, nonceSize)) }
	good := append([]byte{0, 0, 0, 2, 'h', 'i'}, newMAC().next([]byte("hi"))...)
	f.Add(good)
	f.Add([]byte{0, 0, 0, 2, 'h', 'i', 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 9, 1})
	f.Fuzz(func(t *testing.T, stream []byte) {
		const max = 64
		var got int
		check := newMAC()
		err := readFrames(bytes.NewReader(stream), max, newMAC(), func() {}, func(frame []byte) error {
			if len(frame) > max {
				t.Fatalf("frame of %d bytes over the limit", len(frame))
			}
			tag := check.next(frame)
			if !bytes.Equal(tag, stream[got+frameHeader+len(frame):got+frameHeader+len(frame)+MACSize]) {
				t.Fatalf("handed out a frame whose MAC does not verify")
			}
			got += frameHeader + len(frame) + MACSize
			return nil
		})
		if err == nil && got != len(stream) {
			t.Fatalf("clean end after %d of %d bytes", got, len(stream))
		}
	})
}
