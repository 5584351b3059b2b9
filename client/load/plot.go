package load

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// PlotHTML writes a self-contained HTML page (inline SVG, no scripts, no
// network) with the latency distribution of send→ACK and send→deliver on a
// percentile axis spaced by nines (50, 90, 99, 99.9, 99.99), log-scaled
// milliseconds, and the report's table.
func (rep Report) PlotHTML(w io.Writer) error {
	const W, H, left, right, top, bottom = 860.0, 420.0, 70.0, 20.0, 20.0, 50.0
	pw, ph := W-left-right, H-top-bottom
	series := []struct {
		name, color string
		s           []float64
	}{{"send→ACK", "#1f77b4", rep.AckSamples}, {"send→deliver", "#d62728", rep.DeliverSamples}}
	lo, hi := math.Inf(1), math.Inf(-1)
	maxNines := 0.0
	for _, s := range series {
		if len(s.s) == 0 {
			continue
		}
		lo, hi = math.Min(lo, math.Max(s.s[0], 0.01)), math.Max(hi, s.s[len(s.s)-1])
		maxNines = math.Max(maxNines, math.Min(4, math.Log10(float64(len(s.s)))))
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	maxNines = math.Max(maxNines, 1)
	ylo, yhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(math.Max(hi, lo*1.01)))
	if yhi <= ylo {
		yhi = ylo + 1
	}
	x := func(nines float64) float64 { return left + nines/maxNines*pw }
	y := func(ms float64) float64 {
		return top + ph - (math.Log10(math.Max(ms, lo))-ylo)/(yhi-ylo)*ph
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`, W, H)
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`, left, top, pw, ph)
	for e := ylo; e <= yhi; e++ {
		v := math.Pow(10, e)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`,
			left, left+pw, y(v), y(v), left-6, y(v)+4, trim(v))
	}
	for _, n := range []float64{0, 1, 2, 3, 4} {
		if n > maxNines {
			break
		}
		label := trim(100 * (1 - math.Pow(10, -n)))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="middle">p%s</text>`,
			x(n), x(n), top, top+ph, x(n), top+ph+16, label)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">percentile</text>`, left+pw/2, H-8)
	fmt.Fprintf(&b, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">latency (ms, log)</text>`, top+ph/2, top+ph/2)
	for i, s := range series {
		if len(s.s) > 0 {
			var pts []string
			const steps = 400
			for k := 0; k <= steps; k++ {
				n := maxNines * float64(k) / steps
				q := 1 - math.Pow(10, -n)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(n), y(Quantile(s.s, q))))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, s.color, strings.Join(pts, " "))
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/><text x="%.1f" y="%.1f">%s (%d samples)</text>`,
			left+12, top+12+float64(i)*18, s.color, left+30, top+22+float64(i)*18, html.EscapeString(s.name), len(s.s))
	}
	b.WriteString(`</svg>`)
	var table strings.Builder
	_ = rep.Table(&table)
	_, err := fmt.Fprintf(w, `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>seqflow load report</title>
<style>body{font-family:sans-serif;margin:24px}pre{background:#f6f6f6;padding:12px}</style></head>
<body><h1>seqflow load report</h1>
%s
<pre>%s</pre>
</body></html>
`, b.String(), html.EscapeString(table.String()))
	return err
}

func trim(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
