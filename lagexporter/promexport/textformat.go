package promexport

import (
	"math"
	"strconv"
	"strings"

	"github.com/tidemark/tidemark/lagexporter"
)

// AppendText appends the Prometheus text exposition (format 0.0.4) of snapshot s and health hl to b: per family a
// HELP and TYPE line and its series, families in Describe order, labels in name order.
func (c *Collector) AppendText(b []byte, s *lagexporter.Snapshot, hl lagexporter.Health) []byte {
	return c.appendExposition(b, s, hl, false)
}

// AppendOpenMetrics appends the same series in the OpenMetrics 1.0 text format, without the final "# EOF" line (the
// handler appends it after every other family of the response): counter families are named without their _total
// suffix on the HELP and TYPE lines.
func (c *Collector) AppendOpenMetrics(b []byte, s *lagexporter.Snapshot, hl lagexporter.Health) []byte {
	return c.appendExposition(b, s, hl, true)
}

func (c *Collector) appendExposition(b []byte, s *lagexporter.Snapshot, hl lagexporter.Health, om bool) []byte {
	bufs := make([][]byte, len(c.families))
	c.emit(s, hl, func(f *family, v float64, lvs []string) {
		if len(bufs[f.idx]) == 0 {
			bufs[f.idx] = appendHeader(bufs[f.idx], f, om)
		}
		bufs[f.idx] = appendSeries(bufs[f.idx], f, v, lvs)
	})
	for _, x := range bufs {
		b = append(b, x...)
	}
	return b
}

// appendHeader appends a family's HELP and TYPE lines; for OpenMetrics a counter family is named without _total.
func appendHeader(x []byte, f *family, om bool) []byte {
	name := f.name
	if om && f.counter {
		name = strings.TrimSuffix(name, "_total")
	}
	x = append(x, "# HELP "...)
	x = append(x, name...)
	x = append(x, ' ')
	x = appendEscaped(x, f.help, om)
	x = append(x, "\n# TYPE "...)
	x = append(x, name...)
	if f.counter {
		return append(x, " counter\n"...)
	}
	return append(x, " gauge\n"...)
}

// appendSeries appends one series line: name{labels in name order} value.
func appendSeries(x []byte, f *family, v float64, lvs []string) []byte {
	if len(f.order) == 0 {
		x = append(x, f.name...)
		x = append(x, "{} "...)
	} else {
		for n, i := range f.order {
			x = append(x, f.pre[n]...)
			x = appendEscaped(x, lvs[i], true)
		}
		x = append(x, `"} `...)
	}
	return append(appendValue(x, v), '\n')
}

// appendValue appends v as strconv.AppendFloat(x, v, 'g', -1, 64) does (the shortest form that reads back as v,
// exponent form from 1e+06 on). Integers below 10^6 in magnitude, most values of a lag exposition (lags, counts,
// flags), take a shortcut that writes the same digits.
func appendValue(x []byte, v float64) []byte {
	if v > -1e6 && v < 1e6 {
		if i := int64(v); float64(i) == v && (i != 0 || !math.Signbit(v)) {
			return strconv.AppendInt(x, i, 10)
		}
	}
	return strconv.AppendFloat(x, v, 'g', -1, 64)
}

// appendEscaped escapes a label value or an OpenMetrics HELP text (backslash, double quote, newline), or a text
// format HELP text (backslash, newline).
func appendEscaped(b []byte, s string, quote bool) []byte {
	i := 0 // the prefix that needs no escape (usually all of s) is copied at once
	for i < len(s) && s[i] != '\\' && s[i] != '\n' && (s[i] != '"' || !quote) {
		i++
	}
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '\\':
			b = append(b, '\\', '\\')
		case ch == '\n':
			b = append(b, '\\', 'n')
		case ch == '"' && quote:
			b = append(b, '\\', '"')
		default:
			b = append(b, ch)
		}
	}
	return b
}
