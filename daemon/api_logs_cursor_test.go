package daemon

import (
	"bytes"
	"testing"
)

// memLog is a job log in memory that reads like store.Logs: at most max
// bytes (further capped by step, to cut records anywhere), from the oldest
// kept byte (first, a record's start) when asked for older ones.
type memLog struct {
	data  []byte
	first int64
	step  int
}

func (m *memLog) Read(_ string, off int64, max int) ([]byte, int64, int64, error) {
	end := int64(len(m.data))
	if off >= end {
		return nil, end, end, nil
	}
	off = maxInt64(off, m.first)
	n := min(int64(max), int64(m.step), end-off)
	return m.data[off : off+n], off, off + n, nil
}

func maxInt64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// FuzzLogCursor: for any log of newline-ended records, any oldest kept
// record, any read size and any start offset, the cursor returns a gap
// exactly when the start is before the kept part (with the dropped byte
// count), then every whole record that starts at or after the start, in
// order, each with the offset after it; never a piece of a record.
func FuzzLogCursor(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc\n"), uint8(1), uint16(3), int64(0))
	f.Add([]byte("one\ntwo\nthree\n"), uint8(2), uint16(1), int64(5))
	f.Add([]byte("x\n"), uint8(0), uint16(1000), int64(9))
	f.Fuzz(func(t *testing.T, data []byte, dropRecords uint8, step uint16, start int64) {
		if len(data) == 0 || data[len(data)-1] != '\n' {
			data = append(data, '\n')
		}
		var starts []int64 // where each record starts
		for i, off := 0, int64(0); i < len(data); {
			starts = append(starts, off)
			j := bytes.IndexByte(data[i:], '\n')
			i += j + 1
			off = int64(i)
		}
		first := int64(len(data))
		if d := int(dropRecords) % (len(starts) + 1); d < len(starts) {
			first = starts[d]
		}
		if start < 0 {
			start = -start
		}
		start %= int64(len(data)) + 2
		log := &memLog{data: data, first: first, step: 1 + int(step)%4096}
		c := newLogCursor(log, "j", start)
		var got []logRecord
		for {
			rec, ok, err := c.next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			rec.data = bytes.Clone(rec.data)
			got = append(got, rec)
		}
		var want []logRecord
		if start < first && first > 0 {
			want = append(want, logRecord{gap: true, end: first, dropped: first - start})
		}
		for i, s := range starts {
			if s < maxInt64(start, first) {
				continue
			}
			end := int64(len(data))
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			want = append(want, logRecord{data: data[s : end-1], end: end})
		}
		if len(got) != len(want) {
			t.Fatalf("%d records, want %d: %+v", len(got), len(want), got)
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.gap != w.gap || g.end != w.end || g.dropped != w.dropped || !bytes.Equal(g.data, w.data) {
				t.Fatalf("record %d = %+v, want %+v", i, g, w)
			}
		}
	})
}
