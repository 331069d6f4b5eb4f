// The charts of an `fp8rl report` page, drawn with uPlot from the JSON in #report-data:
//   {groups: [{preset, color, runs: [{name, steps: [S], metrics: {name: [S] (null = absent)}}]}],
//    charts: [{metric, title}], timing: {keys: [K], colors: [K]},
//    by_length: {bins: [B] (e.g. "17-32"), groups: [[B] per group: mean token_mult_prob_error or null]}}
// Line charts: one thin line per run (seed), one thick line per preset (the mean of its runs at
// each step). Mismatch by response length (when runs record it): per preset, the mean over its
// runs and steps of each length bin's token_mult_prob_error. Step time: per preset, the mean over
// its runs of each timing key, stacked.
//
// After drawing, each chart's element carries data-points (the non-null values plotted) and
// data-ink (coloured pixels in the plot area, read back from the canvas), and <body> carries
// data-charts-drawn (charts with both > 0) and data-charts-total: the test reads them with
// `chromium --headless --dump-dom`.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const charts = [];  // {el, drawn}
  const STEP_INCREMENTS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000, 20000, 50000];

  function fmt(v) {
    if (v == null || !isFinite(v)) return "-";
    const a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(2) : String(Number(v.toPrecision(4)));
  }

  function withAlpha(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  // Sorted steps at which any of `runs` has a finite value of `metric`.
  function stepsWith(runs, metric) {
    const set = new Set();
    for (const run of runs) {
      const v = run.metrics[metric];
      if (v) run.steps.forEach((s, i) => { if (v[i] != null) set.add(s); });
    }
    return [...set].sort((a, b) => a - b);
  }

  // The values of `metric` in `run` at the steps `xs` (null where absent).
  function align(run, metric, xs) {
    const at = new Map();
    const v = run.metrics[metric] || [];
    run.steps.forEach((s, i) => at.set(s, v[i]));
    return xs.map((s) => (at.has(s) ? at.get(s) : null));
  }

  function meanOf(columns, n) {
    const out = new Array(n).fill(null);
    for (let i = 0; i < n; ++i) {
      let sum = 0, k = 0;
      for (const c of columns) if (c[i] != null) { sum += c[i]; ++k; }
      if (k > 0) out[i] = sum / k;
    }
    return out;
  }

  // Counts what a chart drew and publishes it on its element and on <body>.
  function recordDrawn(u, entry) {
    let points = 0;
    for (let i = 1; i < u.data.length; ++i) for (const y of u.data[i]) if (y != null) ++points;
    const { left, top, width, height } = u.bbox;
    let ink = 0;
    if (width > 0 && height > 0) {
      const px = u.ctx.getImageData(left, top, width, height).data;
      for (let i = 0; i < px.length; i += 4) {
        const hi = Math.max(px[i], px[i + 1], px[i + 2]), lo = Math.min(px[i], px[i + 1], px[i + 2]);
        if (px[i + 3] > 0 && hi - lo >= 40) ++ink;  // coloured: series, not the grey grid or axes
      }
    }
    entry.el.dataset.points = points;
    entry.el.dataset.ink = ink;
    entry.drawn = points > 0 && ink > 0;
    document.body.dataset.chartsDrawn = charts.filter((c) => c.drawn).length;
    document.body.dataset.chartsTotal = charts.length;
  }

  function addChart(container, title, note) {
    const el = document.createElement("div");
    el.className = "chart";
    el.innerHTML = `<h3></h3><div class="plot"></div><div class="readout">hover for values</div>`;
    el.querySelector("h3").textContent = title;
    if (note) el.querySelector("h3").title = note;
    container.appendChild(el);
    const entry = { el, drawn: false };
    charts.push(entry);
    return entry;
  }

  function plot(entry, series, xs, ys, options, readout, xText = (u, i) => `step ${u.data[0][i]}`) {
    const target = entry.el.querySelector(".plot");
    const opts = Object.assign(
      {
        width: Math.max(240, target.clientWidth),
        height: 220,
        legend: { show: false },
        cursor: { points: { show: false }, drag: { x: true, y: false } },
        scales: { x: { time: false } },
        axes: [{ label: "step", labelSize: 20, size: 36, incrs: STEP_INCREMENTS }, { size: 56 }],
        series: [{ label: "step" }, ...series],
        hooks: {
          draw: [(u) => recordDrawn(u, entry)],
          setCursor: [(u) => {
            const i = u.cursor.idx;
            entry.el.querySelector(".readout").textContent =
              i == null ? "hover for values" : `${xText(u, i)}: ${readout(u, i)}`;
          }],
        },
      },
      options
    );
    return new uPlot(opts, [xs, ...ys], target);
  }

  function lineChart(container, spec) {
    const runs = data.groups.flatMap((g) => g.runs);
    const xs = stepsWith(runs, spec.metric);
    const entry = addChart(container, spec.title);
    if (xs.length === 0) {
      entry.el.querySelector(".plot").textContent = `no run has ${spec.metric}`;
      entry.el.classList.add("empty");
      return;
    }
    const sparse = xs.length <= 12;  // e.g. validation every 25 steps: mark the points
    const series = [], ys = [], means = [];  // means: [label, column index]
    for (const g of data.groups) {
      const cols = g.runs.map((r) => align(r, spec.metric, xs));
      const single = cols.length === 1;
      g.runs.forEach((r, k) => {
        series.push({
          label: r.name, stroke: single ? g.color : withAlpha(g.color, 0.35), width: single ? 2 : 1,
          spanGaps: true, points: { show: sparse, size: single ? 5 : 3 },
        });
        ys.push(cols[k]);
      });
      if (!single) {
        series.push({
          label: `${g.preset} (mean)`, stroke: g.color, width: 2, spanGaps: true, points: { show: sparse, size: 5 },
        });
        ys.push(meanOf(cols, xs.length));
      }
      means.push([g.preset, ys.length]);  // the group's last column: its mean, or its only run
    }
    plot(entry, series, xs, ys, {}, (u, i) => means.map(([name, c]) => `${name} ${fmt(u.data[c][i])}`).join(" · "));
  }

  // x = the length bin's index, labelled with the bin; one line per preset.
  function lengthChart(container) {
    const bins = data.by_length.bins;
    const entry = addChart(container, "token_mult_prob_error by response length (tokens; mean over steps and runs)");
    const xs = bins.map((_, i) => i);
    const series = data.groups.map((g) => ({ label: g.preset, stroke: g.color, width: 2, spanGaps: true,
                                             points: { show: true, size: 5 } }));
    const ys = data.by_length.groups;
    const axes = [{ label: "response length (tokens)", labelSize: 20, size: 36, incrs: [1],
                    values: (u, splits) => splits.map((i) => bins[i] || "") }, { size: 56 }];
    plot(entry, series, xs, ys, { axes, scales: { x: { time: false, range: [-0.3, bins.length - 0.7] } } },
         (u, i) => data.groups.map((g, k) => `${g.preset} ${fmt(u.data[k + 1][i])}`).join(" · "),
         (u, i) => `${bins[i]} tokens`);
  }

  // The mean over a group's runs of each timing key at the steps `xs`: (K) columns.
  function timingMeans(group, xs) {
    return data.timing.keys.map((k) => meanOf(group.runs.map((r) => align(r, `timing.${k}`, xs)), xs.length));
  }

  function stackChart(container, group, xs, parts, ymax) {
    const keys = data.timing.keys;
    const entry = addChart(container, `${group.preset}: seconds per step`, "mean over the preset's runs, stacked");
    if (xs.length === 0) {
      entry.el.querySelector(".plot").textContent = "no timing in metrics.jsonl";
      entry.el.classList.add("empty");
      return;
    }
    // Cumulative sums, drawn from the top of the stack down, each filled to zero over the last.
    const series = [], ys = [];
    for (let top = keys.length - 1; top >= 0; --top) {
      ys.push(xs.map((_, i) => parts.slice(0, top + 1).reduce((a, p) => a + (p[i] || 0), 0)));
      const color = data.timing.colors[top];
      series.push({ label: keys[top], stroke: color, fill: color, width: 1, points: { show: false } });
    }
    plot(entry, series, xs, ys, { scales: { x: { time: false }, y: { range: [0, ymax] } } }, (u, i) =>
      keys.map((k, j) => `${k} ${fmt(parts[j][i])}`).join(" · ") + ` · sum ${fmt(ys[0][i])} s`
    );
  }

  const lines = document.getElementById("line-charts");
  for (const spec of data.charts) lineChart(lines, spec);
  if (data.by_length.bins.length > 0) lengthChart(lines);
  if (data.timing.keys.length > 0) {
    // One y range for every preset, so that the stacks compare by height.
    const stacks = data.groups.map((g) => {
      const xs = stepsWith(g.runs, `timing.${data.timing.keys[0]}`);
      return { xs, parts: timingMeans(g, xs) };
    });
    let ymax = 0;
    for (const { xs, parts } of stacks) {
      xs.forEach((_, i) => { ymax = Math.max(ymax, parts.reduce((a, p) => a + (p[i] || 0), 0)); });
    }
    const container = document.getElementById("time-charts");
    data.groups.forEach((g, k) => stackChart(container, g, stacks[k].xs, stacks[k].parts, ymax * 1.05 || 1));
  }
  document.body.dataset.chartsTotal = charts.length;
  if (!document.body.dataset.chartsDrawn) document.body.dataset.chartsDrawn = 0;
})();
