"""A small SVG writer for time series (python3's standard library only), for the pictures that
kquota-proxy/bench/picture.sh and kquota-cluster/tests/instances/picture.sh make from real runs.

    fig = Figure(760, "title", ["a subtitle line", ...])
    p = fig.panel(200, (0, 70), (0, 2e6), "bytes/s", y_fmt=mb)
    p.line([(t, v), ...], "#1f77b4", label="Kafka")
    p.hline(1048576, "#555", label="quota")
    fig.note("a line under the panels")
    open("x.svg", "w").write(fig.svg())

Panels stack under each other and share nothing but the width; each has its own legend above it.
"""
import json
import math
from xml.sax.saxutils import escape

LEFT, RIGHT = 78, 18  # room for the y labels, and a margin
FONT = 11


def nice_step(span, ticks=5):
    """A round step (1, 2 or 5 times a power of ten) giving about `ticks` steps over `span`."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def ticks(lo, hi, n=5):
    step = nice_step(hi - lo, n)
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    v = first
    while v <= hi + 1e-9 * step:
        out.append(round(v, 12))
        v += step
    return out


def fmt_plain(v):
    return ("%.0f" if abs(v - round(v)) < 1e-9 else "%g") % v


class Panel:
    def __init__(self, fig, top, height, x_range, y_range, y_label, y_fmt, x_label, x_fmt, title, legend_rows):
        self.fig, self.top, self.height, self.title, self.legend_rows = fig, top, height, title, legend_rows
        self.x0, self.x1 = x_range
        self.y0, self.y1 = y_range
        self.y_label, self.y_fmt, self.x_label, self.x_fmt = y_label, y_fmt, x_label, x_fmt
        self.items = []
        self.legend = []

    # -- coordinates

    def px(self, x):
        w = self.fig.width - LEFT - RIGHT
        return LEFT + (x - self.x0) / (self.x1 - self.x0) * w

    def py(self, y):
        y = min(max(y, self.y0), self.y1)
        return self.top + self.height - (y - self.y0) / (self.y1 - self.y0) * self.height

    # -- what a panel holds

    def line(self, points, color, width=1.5, dash=None, label=None, opacity=1.0, step=False):
        """A polyline through (x, y) points (None as y breaks it); step=True holds each value until
        the next x."""
        runs, run = [], []
        prev = None
        for x, y in points:
            if y is None:
                if run:
                    runs.append(run)
                run, prev = [], None
                continue
            if step and prev is not None:
                run.append((x, prev))
            run.append((x, y))
            prev = y
        if run:
            runs.append(run)
        style = 'fill="none" stroke="%s" stroke-width="%s" stroke-linejoin="round"%s%s' % (
            color, width, ' stroke-dasharray="%s"' % dash if dash else "",
            ' opacity="%s"' % opacity if opacity != 1.0 else "")
        for r in runs:
            pts = " ".join("%.1f,%.1f" % (self.px(x), self.py(y)) for x, y in r)
            self.items.append('<polyline points="%s" %s/>' % (pts, style))
        if label:
            self.legend.append(("line", color, width, dash, label))

    def stems(self, points, color, width=1.2, label=None, offset=0.0, opacity=1.0):
        """A vertical line from 0 to y at each (x, y) with y > 0, shifted by `offset` pixels."""
        for x, y in points:
            if y is None or y <= 0:
                continue
            X = self.px(x) + offset
            self.items.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="%s"%s/>' % (
                X, X, self.py(max(self.y0, 0)), self.py(y), color, width,
                ' opacity="%s"' % opacity if opacity != 1.0 else ""))
        if label:
            self.legend.append(("line", color, width + 1, None, label))

    def hline(self, y, color, dash="5 3", width=1.2, label=None):
        self.line([(self.x0, y), (self.x1, y)], color, width=width, dash=dash, label=label)

    def band(self, x0, x1, color, opacity=0.08, label=None):
        """A shaded span of x (e.g. the span a summary is measured over)."""
        self.items.insert(0, '<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" opacity="%s"/>' % (
            self.px(x0), self.top, self.px(x1) - self.px(x0), self.height, color, opacity))
        if label:
            self.legend.append(("band", color, opacity, None, label))

    def text(self, x, y, s, color="#333", anchor="start", size=FONT):
        self.items.append('<text x="%.1f" y="%.1f" fill="%s" text-anchor="%s" font-size="%d">%s</text>' % (
            self.px(x), self.py(y), color, anchor, size, escape(s)))

    # -- rendering

    def render(self):
        out = []
        w = self.fig.width - LEFT - RIGHT
        bottom = self.top + self.height
        if self.title:
            out.append('<text x="%d" y="%d" font-weight="bold">%s</text>' % (
                LEFT, self.top - 26 - 16 * (self.legend_rows - 1), escape(self.title)))
        # the legend, above the frame, in as many rows as panel() was given room for
        rows, row, used = [], [], 0
        for item in self.legend:
            wide = 22 + int(len(item[4]) * 6.1) + 16
            if row and LEFT + used + wide > self.fig.width - RIGHT:
                rows.append(row)
                row, used = [], 0
            row.append(item)
            used += wide
        if row:
            rows.append(row)
        for n, row in enumerate(rows):
            lx, ly = LEFT, self.top - 8 - 16 * (len(rows) - 1 - n)
            for kind, color, a, dash, label in row:
                if kind == "band":
                    out.append('<rect x="%d" y="%d" width="18" height="9" fill="%s" opacity="%s"/>' % (
                        lx, ly - 8, color, max(a, 0.15)))
                else:
                    out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="%s"%s/>' % (
                        lx, lx + 18, ly - 4, ly - 4, color, max(a, 1.5),
                        ' stroke-dasharray="%s"' % dash if dash else ""))
                out.append('<text x="%d" y="%d">%s</text>' % (lx + 22, ly, escape(label)))
                lx += 22 + int(len(label) * 6.1) + 16
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#bbb"/>' % (
            LEFT, self.top, w, self.height))
        for v in ticks(self.y0, self.y1):
            y = self.py(v)
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (LEFT, LEFT + w, y, y))
            out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (LEFT - 5, y + 4, escape(self.y_fmt(v))))
        for v in ticks(self.x0, self.x1, 8):
            x = self.px(v)
            out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#bbb"/>' % (x, x, bottom, bottom + 4))
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (x, bottom + 15, escape(self.x_fmt(v))))
        out.append('<text transform="translate(%d %.1f) rotate(-90)" text-anchor="middle">%s</text>' % (
            LEFT - 48, self.top + self.height / 2, escape(self.y_label)))
        if self.x_label:
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (LEFT + w / 2, bottom + 29,
                                                                                escape(self.x_label)))
        # what is drawn, clipped to the frame
        cid = "clip%d" % id(self)
        out.append('<clipPath id="%s"><rect x="%d" y="%d" width="%d" height="%d"/></clipPath>' % (
            cid, LEFT, self.top - 1, w, self.height + 2))
        out.append('<g clip-path="url(#%s)">' % cid)
        out.extend(self.items)
        out.append("</g>")
        return out


class Figure:
    def __init__(self, width, title, subtitle=()):
        self.width, self.title, self.subtitle = width, title, list(subtitle)
        self.panels = []
        self.notes = []
        self.meta = None
        self.y = 30 + 15 * len(self.subtitle) + 26  # below the title, the subtitle and a legend row

    def panel(self, height, x_range, y_range, y_label, y_fmt=fmt_plain, x_label=None, x_fmt=fmt_plain, title=None,
              legend_rows=1):
        """A panel below the last one; `legend_rows` is the room its legend gets above it."""
        self.y += (18 if title else 0) + 16 * (legend_rows - 1)
        p = Panel(self, self.y, height, x_range, y_range, y_label, y_fmt, x_label, x_fmt, title, legend_rows)
        self.panels.append(p)
        self.y += height + (36 if x_label else 22) + 28
        return p

    def note(self, s):
        """A line of text under the panels, wrapped at the figure's width."""
        room = int((self.width - LEFT - RIGHT) / 6.0)
        line = ""
        for word in s.split(" "):
            if line and len(line) + 1 + len(word) > room:
                self.notes.append(line)
                line = "   " + word
            else:
                line = word if not line else line + " " + word
        self.notes.append(line)

    def metadata(self, obj):
        """JSON kept in the file (a <metadata> element): the numbers the picture was drawn from."""
        self.meta = obj

    def svg(self):
        height = self.y - 10 + 15 * len(self.notes) + 8
        out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
               'font-family="sans-serif" font-size="%d">' % (self.width, height, self.width, height, FONT)]
        if self.meta is not None:
            out.append("<metadata>%s</metadata>" % escape(json.dumps(self.meta, sort_keys=True)))
        out.append('<rect width="100%" height="100%" fill="white"/>')
        out.append('<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>' % (LEFT, escape(self.title)))
        for i, s in enumerate(self.subtitle):
            out.append('<text x="%d" y="%d" fill="#444">%s</text>' % (LEFT, 37 + 15 * i, escape(s)))
        for p in self.panels:
            out.extend(p.render())
        for i, s in enumerate(self.notes):
            out.append('<text x="%d" y="%d" fill="#444">%s</text>' % (LEFT, self.y - 10 + 15 * i, escape(s)))
        out.append("</svg>")
        return "\n".join(out) + "\n"
